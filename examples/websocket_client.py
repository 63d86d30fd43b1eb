#!/usr/bin/env python3
"""Send fixture case0 to `gr00t serve --ws-port` the way openpi-client's
WebsocketClientPolicy does: msgpack-numpy with binary keys, metadata frame on connect.

Noise comes from `__noise_seed__` 0 (case0's noise is seed 0). Prints the 40-step chunk.
"""
import argparse
import asyncio
import json
from pathlib import Path

import msgpack
import numpy as np
import websockets
from PIL import Image

CASE0 = Path(__file__).resolve().parent.parent / "tests/fixtures/gr00t_n17_tiny/case0"
CAMERAS = ("exterior_image_1_left", "wrist_image_left")


def pack_array(obj):
    """msgpack `default` hook: openpi's raw-bytes array form, with binary keys."""
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind in "VOc":
            raise ValueError(f"unsupported dtype: {obj.dtype}")
        return {
            b"__ndarray__": True,
            b"data": obj.tobytes(),
            b"dtype": obj.dtype.str,
            b"shape": obj.shape,
        }
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    return obj


def unpack_array(obj):
    """msgpack `object_hook`: openpi arrays back to numpy."""
    if b"__ndarray__" in obj:
        return np.ndarray(buffer=obj[b"data"], dtype=np.dtype(obj[b"dtype"]), shape=obj[b"shape"])
    if b"__npgeneric__" in obj:
        return np.dtype(obj[b"dtype"]).type(obj[b"data"])
    return obj


def packb(obj):
    return msgpack.packb(obj, default=pack_array)


def unpackb(data):
    return msgpack.unpackb(data, object_hook=unpack_array)


def case0_observation(frames=("t-15", "t0")):
    """case0: both frames as [2,H,W,3] uint8 (or one frame [H,W,3]), float64 state, seed 0."""
    request = json.loads((CASE0 / "request.json").read_text())
    obs = {}
    for cam in CAMERAS:
        imgs = [np.asarray(Image.open(CASE0 / f"{cam}_{t}.png").convert("RGB")) for t in frames]
        obs[f"observation/{cam}"] = np.stack(imgs) if len(imgs) > 1 else imgs[0]
    for key, value in request["state"].items():
        obs[f"observation/{key}"] = np.asarray(value, np.float64)
    obs["prompt"] = request["instruction"]
    obs["__noise_seed__"] = 0
    return obs


async def infer(uri, observation, api_key=None):
    headers = {"Authorization": f"Api-Key {api_key}"} if api_key else None
    async with websockets.connect(uri, additional_headers=headers, max_size=None) as ws:
        metadata = unpackb(await ws.recv())
        await ws.send(packb(observation))
        reply = await ws.recv()
        if isinstance(reply, str):
            raise RuntimeError(f"server error: {reply}")
        return metadata, unpackb(reply)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--host", default="localhost")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key")
    args = p.parse_args()
    metadata, reply = asyncio.run(
        infer(f"ws://{args.host}:{args.port}", case0_observation(), args.api_key)
    )
    print("metadata:", metadata)
    np.set_printoptions(precision=4, suppress=True, linewidth=160)
    actions = reply["actions"]
    print(f"actions {actions.dtype} {list(actions.shape)} (7 joints + gripper)")
    print(actions)
    print("server_timing:", reply.get("server_timing"))


if __name__ == "__main__":
    main()
