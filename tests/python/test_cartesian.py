#!/usr/bin/env python3
"""The websocket door's `observation/cartesian_position` → `eef_9d`, checked against scipy.

NVIDIA's `droid_frame.compute_eef_9d` (what its dataset builder and its DROID client run):
`R = Rotation.from_euler("XYZ", euler) @ C`, xyz then the first two rows of R. A websocket
observation carrying `cartesian_position` must get bit-identical actions to an HTTP request
carrying the `eef_9d` that scipy computes this way, and different actions from the lowercase
(extrinsic) reading. Prints `N passed, M failed`.
"""
import asyncio
import copy
import sys

import numpy as np
from scipy.spatial.transform import Rotation

import test_protocols as tp

C = np.array([[0, 0, -1], [-1, 0, 0], [0, 1, 0]], dtype=np.float64)
CARTESIAN = np.array([0.52, -0.08, 0.31, 3.05, -0.21, 0.12])


def eef_9d(cartesian, order="XYZ"):
    r = Rotation.from_euler(order, cartesian[3:]).as_matrix() @ C
    return np.concatenate([cartesian[:3], r[:2, :].reshape(6)]).astype(np.float32)


def checks(server):
    request = {k: v for k, v in tp.case_request().items() if k != "noise"}
    request["seed"] = 0

    def http_with(eef):
        body = copy.deepcopy(request)
        body["state"]["eef_9d"] = [float(x) for x in eef]
        return tp.http_predict(server, body)

    def ws_cartesian():
        obs = tp.wsc.case0_observation()
        del obs["observation/eef_9d"]
        obs["observation/cartesian_position"] = CARTESIAN
        _, reply, _ = asyncio.run(tp.ws_exchange(f"ws://{server.ws}", tp.wsc.packb(obs)))
        assert isinstance(reply, bytes), f"expected a binary reply, got {reply!r}"
        return tp.ws_groups(tp.wsc.unpackb(reply))

    def matches_intrinsic():
        tp.assert_equal(ws_cartesian(), http_with(eef_9d(CARTESIAN)), "cartesian vs scipy XYZ")

    def differs_from_extrinsic():
        ws = ws_cartesian()
        ext = http_with(eef_9d(CARTESIAN, "xyz"))
        d = max(float(np.max(np.abs(ws[g] - ext[g]))) for g in tp.GROUPS)
        assert d > 1e-3, f"extrinsic reading gives the same actions (max|Δ| {d:.2e})"

    tp.check("websocket cartesian_position == HTTP eef_9d from scipy 'XYZ' (bit-equal)",
             matches_intrinsic)
    tp.check("websocket cartesian_position != HTTP eef_9d from scipy 'xyz'",
             differs_from_extrinsic)


if __name__ == "__main__":
    sys.exit(tp.run(checks))
