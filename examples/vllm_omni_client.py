#!/usr/bin/env python3
"""Query `gr00t serve --ws-port` the way clients of vLLM-Omni's GR00T server do
(`vllm serve nvidia/GR00T-N1.7-3B --omni`): websocket path `/v1/realtime/robot/openpi`,
openpi-client's msgpack-numpy, the nested GR00T observation with `endpoint` and `session_id`.

The metadata frame names `action_horizon`, `action_keys`, `embodiment_tag` and
`needs_session_id`; `infer` answers `{key: float32 [1, 40, D]}`, `reset`
`{"status": "reset successful"}`, and an error `{"type": "error", "message": ...}` (the
connection stays open). Sends fixture case0 with `seed` 0 and prints the chunk.
"""
import argparse
import sys
from pathlib import Path

import numpy as np
import websockets.sync.client
from openpi_client import msgpack_numpy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from zmq_client import case0_observation  # noqa: E402  (the same nested observation)

PATH = "/v1/realtime/robot/openpi"


class VllmOmniClient:
    """One connection: the metadata frame, then one reply per request."""

    def __init__(self, host, port, api_key=None):
        headers = {"Authorization": f"Api-Key {api_key}"} if api_key else None
        # legacy=True: a long-lived connection without a `with` block (websockets >= 17.1).
        self.ws = websockets.sync.client.connect(
            f"ws://{host}:{port}{PATH}", compression=None, max_size=None,
            additional_headers=headers, legacy=True)
        self.metadata = msgpack_numpy.unpackb(self.ws.recv())

    def call(self, request):
        self.ws.send(msgpack_numpy.packb(request))
        return msgpack_numpy.unpackb(self.ws.recv())

    def infer(self, observation, session_id, seed=None):
        request = {**observation, "endpoint": "infer", "session_id": session_id}
        if seed is not None:
            request["seed"] = seed
        reply = self.call(request)
        if reply.get("type") == "error":
            raise RuntimeError(reply["message"])
        return reply

    def reset(self, session_id):
        return self.call({"endpoint": "reset", "session_id": session_id})

    def close(self):
        self.ws.close()


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--host", default="localhost")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key")
    args = p.parse_args()
    client = VllmOmniClient(args.host, args.port, args.api_key)
    print("metadata:", client.metadata)
    actions = client.infer(case0_observation(), "gr00t-smoke", seed=0)
    np.set_printoptions(precision=4, suppress=True, linewidth=160)
    for key, value in actions.items():
        print(f"{key} {value.dtype} {list(value.shape)}")
        print(value[0])
    print("reset:", client.reset("gr00t-smoke"))
    client.close()


if __name__ == "__main__":
    main()
