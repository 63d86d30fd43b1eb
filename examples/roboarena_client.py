#!/usr/bin/env python3
"""Query `gr00t serve --ws-port` the way RoboArena's DROID evaluation client does.

The client is openpi-client's WebsocketClientPolicy plus RoboArena's `endpoint` field:
`infer` messages carry `endpoint: "infer"` and, because the server's metadata says
`needs_session_id`, a `session_id`; `reset` sends `{"endpoint": "reset", "session_id": ...}`
and gets the text frame `reset successful`. Frames are sent at the metadata's
`image_resolution` (180x320), one per camera: the server pairs each with the frame this
session sent 15 observations earlier. Sends fixture case0 (t-15, then t0) and prints the
40-step chunk of absolute joint targets + gripper.

Without `--api-token` on the server a session is this connection's own (no other client can
name it); behind a token (`--api-key` here) the authenticated connections that name a session
share it, so a reconnecting evaluation client keeps its session.
"""
import argparse
import json
from pathlib import Path

import numpy as np
from openpi_client import websocket_client_policy
from PIL import Image

CASE0 = Path(__file__).resolve().parent.parent / "tests/fixtures/gr00t_n17_tiny/case0"


class RoboArenaClient(websocket_client_policy.WebsocketClientPolicy):
    """openpi's client with RoboArena's `endpoint` field (its evaluation client's protocol)."""

    def infer(self, obs):
        return super().infer({**obs, "endpoint": "infer"})

    def reset(self, reset_info=None):
        self._ws.send(self._packer.pack({**(reset_info or {}), "endpoint": "reset"}))
        return self._ws.recv()


def case0_observation(t, session_id=None, cartesian=None):
    """case0's frames at `t` ("t-15" or "t0") as [H,W,3] uint8, its joints and gripper, and
    either the fixture's eef_9d or, like the evaluation client, `cartesian` [x,y,z,rx,ry,rz]."""
    request = json.loads((CASE0 / "request.json").read_text())
    obs = {
        f"observation/{cam}": np.asarray(Image.open(CASE0 / f"{cam}_{t}.png").convert("RGB"))
        for cam in ("exterior_image_1_left", "wrist_image_left")
    }
    for key in ("joint_position", "gripper_position"):
        obs[f"observation/{key}"] = np.asarray(request["state"][key], np.float64)
    if cartesian is None:
        obs["observation/eef_9d"] = np.asarray(request["state"]["eef_9d"], np.float64)
    else:
        obs["observation/cartesian_position"] = np.asarray(cartesian, np.float64)
    obs["prompt"] = request["instruction"]
    if session_id is not None:
        obs["session_id"] = session_id
    return obs


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--host", default="localhost")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--session-id", default="episode-1-A")
    p.add_argument("--api-key", help="the server's --api-token, if it has one")
    args = p.parse_args()
    client = RoboArenaClient(args.host, args.port, api_key=args.api_key)
    config = client.get_server_metadata()
    print("PolicyServerConfig:", {k: config.get(k) for k in (
        "image_resolution", "needs_wrist_camera", "n_external_cameras", "needs_stereo_camera",
        "needs_session_id", "action_space")})
    client.infer(case0_observation("t-15", args.session_id))
    chunk = client.infer(case0_observation("t0", args.session_id))["actions"]
    np.set_printoptions(precision=4, suppress=True, linewidth=160)
    print(f"actions {chunk.dtype} {list(chunk.shape)} (7 joints + gripper)")
    print(chunk)
    print("reset:", client.reset({"session_id": args.session_id}))


if __name__ == "__main__":
    main()
