#!/usr/bin/env python3
"""The websocket door's nested GR00T observation, for every embodiment, from the published
`openpi-client` (`WebsocketClientPolicy`, its msgpack-numpy).

On the multi-embodiment fixture checkpoint, every case of `tests/fixtures/gr00t_n17_tiny_multi`
sent as `{"video": {view: uint8 [T,H,W,3]}, "state": {key: float32 [T,D]}, "language": {key:
[[str]]}, "embodiment": ..., "noise": float32 [40,132]}` gives `{action key: float32 [1,H,D]}`
bit-identical to the same case over HTTP; an unknown embodiment is a text frame then close 1011.

Prints `N passed, M failed`; exits non-zero on any failure.
"""
import asyncio
import json
import sys
import urllib.request

import numpy as np
from PIL import Image
from openpi_client import msgpack_numpy as opm
from openpi_client import websocket_client_policy

import test_protocols as tp

MULTI = tp.ROOT / "tests/fixtures/gr00t_n17_tiny_multi"
CASES = sorted(p.name for p in MULTI.glob("case_*"))


def observation(case):
    """The case as the nested GR00T observation, unbatched, with its embodiment and noise."""
    d = MULTI / case
    o = json.loads((d / "observation.json").read_text())
    video = {view: np.stack([np.asarray(Image.open(d / f).convert("RGB")) for f in files])
             for view, files in o["video"].items()}
    state = {k: np.asarray([v], np.float32) for k, v in o["state"].items()}
    return {"video": video, "state": state,
            "language": {o["language_key"]: [[o["instruction"]]]},
            "embodiment": o["embodiment_tag"].upper(),
            "noise": np.asarray(o["noise"], np.float32)}


def http_actions(server, case):
    body = (MULTI / case / "request.json").read_bytes()
    req = urllib.request.Request(f"http://{server.http}/predict", data=body,
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=60) as r:
        return {k: np.asarray(v, np.float32) for k, v in json.load(r)["actions"].items()}


def checks(server):
    host, port = server.ws.rsplit(":", 1)

    def every_case():
        policy = websocket_client_policy.WebsocketClientPolicy(host, int(port))
        for case in CASES:
            reply = policy.infer(observation(case))
            want = http_actions(server, case)
            got = {k: v for k, v in reply.items() if not k.endswith("_timing")}
            assert sorted(got) == sorted(want), (case, sorted(got), sorted(want))
            for k, v in got.items():
                assert v.dtype == np.float32 and v.shape == (1, *want[k].shape), (case, k)
                assert v[0].tobytes() == want[k].tobytes(), f"{case} {k}: websocket != HTTP"
            assert "infer_ms" in reply["server_timing"], case

    def unknown_embodiment():
        obs = {**observation(CASES[0]), "embodiment": "REAL_G1"}
        _, reply, code = asyncio.run(tp.ws_exchange(f"ws://{server.ws}", opm.packb(obs)))
        assert isinstance(reply, str) and 'embodiment: "REAL_G1" is not served' in reply, reply
        assert code == 1011, code

    tp.check(f"nested GR00T observation, {len(CASES)} cases x 4 embodiments == HTTP "
             "(bit-equal)", every_case)
    tp.check("unknown embodiment -> text + 1011", unknown_embodiment)


if __name__ == "__main__":
    sys.exit(tp.run(checks, MULTI / "checkpoint"))
