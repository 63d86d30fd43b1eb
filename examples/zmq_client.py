#!/usr/bin/env python3
"""Send fixture case0 to `gr00t serve --zmq-port` the way Isaac-GR00T's PolicyClient does.

The envelope is msgpack {"endpoint", "data", "api_token"}. Numpy arrays travel as N1.7's
msgpack-numpy maps {b"nd": True, b"type", b"kind", b"shape", b"data"} (`--serializer
msgpack-numpy`, needs the `msgpack-numpy` package) or as the older
{"__ndarray_class__": True, "as_npy": <np.save bytes>} (`--serializer npy`, the default); the
server answers in the form it was sent. Prints the 40-step action chunk.
"""
import argparse
import io
import json
import sys
from pathlib import Path

import msgpack
import numpy as np
import zmq
from PIL import Image

CASE0 = Path(__file__).resolve().parent.parent / "tests/fixtures/gr00t_n17_tiny/case0"
CAMERAS = ("exterior_image_1_left", "wrist_image_left")
LANG_KEY = "annotation.language.language_instruction"


def encode(obj):
    """msgpack `default` hook: numpy arrays as .npy bytes, like upstream's MsgSerializer."""
    if isinstance(obj, np.ndarray):
        buf = io.BytesIO()
        np.save(buf, obj, allow_pickle=False)
        return {"__ndarray_class__": True, "as_npy": buf.getvalue()}
    raise TypeError(f"cannot serialize {type(obj)}")


def decode(obj):
    """msgpack `object_hook`: .npy dicts back to numpy arrays."""
    if isinstance(obj, dict) and "__ndarray_class__" in obj:
        return np.load(io.BytesIO(obj["as_npy"]), allow_pickle=False)
    return obj


def encode_n17(obj):
    """msgpack `default` hook of N1.7's MsgSerializer: msgpack-numpy, object arrays refused."""
    import msgpack_numpy

    if isinstance(obj, np.ndarray) and obj.dtype.kind == "O":
        raise TypeError("object arrays would travel as a pickle")
    return msgpack_numpy.encode(obj)


def decode_n17(obj):
    """msgpack `object_hook` of N1.7's MsgSerializer: .npy maps first, then msgpack-numpy maps,
    refusing object payloads before msgpack-numpy would unpickle them."""
    import msgpack_numpy

    if isinstance(obj, dict):
        if obj.get("__ndarray_class__", obj.get(b"__ndarray_class__")):
            npy = obj.get("as_npy", obj.get(b"as_npy"))
            return np.load(io.BytesIO(npy), allow_pickle=False)
        if obj.get(b"nd", obj.get("nd")) and obj.get(b"kind", obj.get("kind")) in (b"O", "O"):
            raise ValueError("refusing an object-dtype payload")
    return msgpack_numpy.decode(obj)


SERIALIZERS = {"npy": (encode, decode), "msgpack-numpy": (encode_n17, decode_n17)}


def case0_observation(batch=1):
    """case0 as the DROID client sends it: video uint8 [B,2,H,W,3], state float32 [B,1,D]."""
    request = json.loads((CASE0 / "request.json").read_text())
    video = {}
    for cam in CAMERAS:
        pair = np.stack(
            [np.asarray(Image.open(CASE0 / f"{cam}_{t}.png").convert("RGB")) for t in ("t-15", "t0")]
        )
        video[cam] = np.repeat(pair[None], batch, axis=0)
    state = {
        k: np.repeat(np.asarray(v, np.float32)[None, None], batch, axis=0)
        for k, v in request["state"].items()
    }
    language = {LANG_KEY: [[request["instruction"]]] * batch}
    return {"video": video, "state": state, "language": language}


def case0_noise():
    """case0's flow-matching noise, [1,40,132] float32."""
    request = json.loads((CASE0 / "request.json").read_text())
    return np.asarray(request["noise"], np.float32)[None]


class PolicyClient:
    """A minimal REQ client: one request, one reply."""

    def __init__(self, host, port, api_token=None, timeout_ms=120_000, serializer="npy"):
        self.encode, self.decode = SERIALIZERS[serializer]
        self.address = f"tcp://{host}:{port}"
        self.timeout_ms = timeout_ms
        self.socket = zmq.Context.instance().socket(zmq.REQ)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(self.address)
        self.api_token = api_token

    def call_raw(self, payload: bytes, timeout_ms=None):
        """One request; TimeoutError when no reply comes (ZMQ itself would wait forever)."""
        timeout_ms = self.timeout_ms if timeout_ms is None else timeout_ms
        self.socket.send(payload)
        if not self.socket.poll(timeout_ms, zmq.POLLIN):
            raise TimeoutError(f"no reply from {self.address} within {timeout_ms / 1000:g} s")
        return msgpack.unpackb(self.socket.recv(), object_hook=self.decode)

    def call(self, endpoint, data=None, timeout_ms=None):
        request = {"endpoint": endpoint}
        if data is not None:
            request["data"] = data
        if self.api_token is not None:
            request["api_token"] = self.api_token
        return self.call_raw(msgpack.packb(request, default=self.encode), timeout_ms)

    def get_action(self, observation, options=None):
        reply = self.call("get_action", {"observation": observation, "options": options})
        if isinstance(reply, dict) and "error" in reply:
            raise RuntimeError(reply["error"])
        actions, _info = reply
        return actions

    def close(self):
        self.socket.close()


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--host", default="localhost")
    p.add_argument("--port", type=int, default=5555)
    p.add_argument("--api-token")
    p.add_argument("--serializer", choices=sorted(SERIALIZERS), default="npy")
    p.add_argument("--connect-timeout", type=float, default=5.0,
                   help="seconds to wait for the ping's reply (default 5)")
    args = p.parse_args()
    client = PolicyClient(args.host, args.port, args.api_token, serializer=args.serializer)
    try:
        print("ping:", client.call("ping", timeout_ms=int(args.connect_timeout * 1000)))
    except TimeoutError as e:
        sys.exit(f"error: {e}: is `gr00t serve --zmq-port {args.port}` running there?")
    actions = client.get_action(case0_observation(), {"noise": case0_noise()})
    np.set_printoptions(precision=4, suppress=True, linewidth=160)
    for key, value in actions.items():
        print(f"{key} {value.dtype} {list(value.shape)}")
        print(value[0])
    client.close()


if __name__ == "__main__":
    main()
