#!/usr/bin/env python3
"""End-to-end check of `gr00t serve`'s three front doors from Python clients.

Starts the server (GR00T_BIN, default target/debug/gr00t) on the tiny fixture checkpoint with
HTTP, ZMQ and websocket on free ports, then checks that fixture case0 gives the same actions
through all three, and that malformed messages get each protocol's error form while the
server keeps serving. Prints `N passed, M failed`; exits non-zero on any failure.
"""
import asyncio
import io
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import msgpack
import numpy as np
import websockets

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
import websocket_client as wsc  # noqa: E402
import zmq_client as zc  # noqa: E402

FIXTURE = ROOT / "tests/fixtures/gr00t_n17_tiny"
GROUPS = ("eef_9d", "gripper_position", "joint_position")
STARTUP_TIMEOUT = 40.0

results = []


def summary(t0):
    """Prints the run time and `N passed, M failed`; the exit code."""
    passed, failed = results.count(True), results.count(False)
    print(f"({time.monotonic() - t0:.1f} s)")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


def case_request(case="case0"):
    """A case's HTTP request body (`request.json`) of the DROID fixture."""
    return json.loads((FIXTURE / case / "request.json").read_text())


def run(checks, checkpoint=None):
    """Starts a `Server` (on `checkpoint`), runs `checks(server)` and stops it; prints the
    summary and returns the exit code."""
    t0 = time.monotonic()
    server = Server(checkpoint)
    try:
        checks(server)
    finally:
        server.stop()
    return summary(t0)


def check(name, fn):
    """Runs one check; records and prints pass/fail."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - report every failure, keep going
        results.append(False)
        print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
    else:
        results.append(True)
        print(f"ok   {name}", flush=True)


class Server:
    """A `gr00t serve` child with all three doors on OS-chosen ports (default checkpoint: the
    tiny DROID fixture's)."""

    def __init__(self, checkpoint=None):
        binary = os.environ.get("GR00T_BIN", str(ROOT / "target/debug/gr00t"))
        checkpoint = checkpoint or FIXTURE / "checkpoint"
        self.proc = subprocess.Popen(
            [binary, "serve", "--checkpoint", str(checkpoint),
             "--port", "0", "--zmq-port", "0", "--ws-port", "0"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True, env={**os.environ, "RUST_LOG": "info"},
        )
        self.log = []
        self.http = self.zmq = self.ws = None
        ready = threading.Event()

        def read():
            for line in self.proc.stderr:
                self.log.append(line.rstrip("\n"))
                for marker, attr in (("listening on http://", "http"),
                                     ("listening on tcp://", "zmq"),
                                     ("listening on ws://", "ws")):
                    if marker in line:
                        setattr(self, attr, line.split(marker, 1)[1].strip())
                if line.strip() == "Application startup complete":
                    ready.set()
            ready.set()  # EOF: the process died

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(STARTUP_TIMEOUT) or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError("server did not start:\n" + "\n".join(self.log))
        if not (self.http and self.zmq and self.ws):
            self.stop()
            raise RuntimeError("missing listener address:\n" + "\n".join(self.log))

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def http_predict(server, body):
    req = urllib.request.Request(
        f"http://{server.http}/predict", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=60) as r:
        reply = json.load(r)
    return {g: np.asarray(reply["actions"][g], np.float32) for g in GROUPS}


def assert_equal(a, b, what, tol=0.0):
    for g in GROUPS:
        if a[g].shape != b[g].shape:
            raise AssertionError(f"{what} {g}: shape {a[g].shape} != {b[g].shape}")
        d = float(np.max(np.abs(a[g] - b[g])))
        if d > tol:
            raise AssertionError(f"{what} {g}: max|Δ| {d:.3e} > {tol:g}")


def zmq_error(client, data=None, raw=None, endpoint="get_action"):
    """Sends a request (or raw bytes) and returns the `error` text the server must answer."""
    reply = client.call_raw(raw) if raw is not None else client.call(endpoint, data)
    if not (isinstance(reply, dict) and isinstance(reply.get("error"), str)):
        raise AssertionError(f"expected {{'error': ...}}, got {reply!r}"[:300])
    return reply["error"]


async def ws_exchange(uri, payload):
    """One connection: metadata, then one message; returns (metadata, reply, close code)."""
    async with websockets.connect(uri, max_size=None, open_timeout=20) as ws:
        metadata = wsc.unpackb(await asyncio.wait_for(ws.recv(), 60))
        await ws.send(payload)
        reply = await asyncio.wait_for(ws.recv(), 60)
        code = None
        if isinstance(reply, str):
            try:
                await asyncio.wait_for(ws.recv(), 10)
            except websockets.ConnectionClosed as e:
                code = e.rcvd.code if e.rcvd else None
        return metadata, reply, code


def ws_groups(reply):
    return {g: np.asarray(reply[g], np.float32) for g in GROUPS}


def checks(server):
    request = case_request()
    client = zc.PolicyClient(*server.zmq.rsplit(":", 1), timeout_ms=60_000)
    ws_uri = f"ws://{server.ws}"
    state = {}

    def http_doors():
        state["http_noise"] = http_predict(server, request)
        seeded = {k: v for k, v in request.items() if k != "noise"}
        seeded["seed"] = 0
        state["http_seed0"] = http_predict(server, seeded)
        # case0's noise is seed 0's, so both HTTP forms agree.
        assert_equal(state["http_noise"], state["http_seed0"], "HTTP noise vs seed 0", 1e-6)
        assert state["http_noise"]["eef_9d"].shape == (40, 9)

    def zmq_ping():
        assert client.call("ping") == {"status": "ok", "message": "Server is running"}

    def zmq_matches_http():
        actions = client.get_action(zc.case0_observation(), {"noise": zc.case0_noise()})
        assert list(actions) == list(GROUPS), list(actions)
        for g in GROUPS:
            assert actions[g].dtype == np.float32 and actions[g].shape[:2] == (1, 40)
        state["zmq"] = {g: actions[g][0] for g in GROUPS}
        assert_equal(state["zmq"], state["http_noise"], "ZMQ vs HTTP")  # bit-equal

    def ws_matches_http():
        meta, reply, _ = asyncio.run(ws_exchange(ws_uri, wsc.packb(wsc.case0_observation())))
        assert isinstance(meta, dict) and meta.get("action_horizon") == 40, meta
        assert isinstance(reply, bytes), f"expected binary reply, got {reply!r}"
        reply = wsc.unpackb(reply)
        assert_equal(ws_groups(reply), state["http_seed0"], "websocket vs HTTP")  # bit-equal
        acts = reply["actions"]
        assert acts.dtype == np.float32 and acts.shape == (40, 8), (acts.dtype, acts.shape)
        want = np.concatenate(
            [state["http_seed0"]["joint_position"], state["http_seed0"]["gripper_position"]], 1)
        assert np.array_equal(acts, want), "actions != [joints | gripper]"

    check("HTTP /predict case0 (noise and seed 0)", http_doors)
    check("ZMQ ping", zmq_ping)
    check("ZMQ get_action == HTTP (bit-equal)", zmq_matches_http)
    check("websocket infer == HTTP seed 0 (bit-equal)", ws_matches_http)

    # ZMQ malformed requests: each answered {"error": ...}.
    def zmq_bad(edit, want):
        def run():
            obs = zc.case0_observation()
            edit(obs)
            e = zmq_error(client, {"observation": obs, "options": None})
            assert want in e, f"{e!r} lacks {want!r}"
        return run

    def f64_state(obs):
        obs["state"] = {k: v.astype(np.float64) for k, v in obs["state"].items()}

    def one_frame(obs):
        obs["video"]["wrist_image_left"] = obs["video"]["wrist_image_left"][:, 1:]

    def no_wrist(obs):
        del obs["video"]["wrist_image_left"]

    check("ZMQ float64 state -> error", zmq_bad(f64_state, "np.float32. Got float64"))
    check("ZMQ one frame (T=1) -> error", zmq_bad(one_frame, "horizon must be 2. Got 1"))
    check("ZMQ missing camera -> error", zmq_bad(no_wrist, "'wrist_image_left' must be in"))

    def zmq_garbage():
        e = zmq_error(client, raw=b"\xc1garbage")
        assert "msgpack" in e, e

    def zmq_unknown():
        assert zmq_error(client, endpoint="teleport") == "Unknown endpoint: teleport"

    check("ZMQ garbage bytes -> error", zmq_garbage)
    check("ZMQ unknown endpoint -> error", zmq_unknown)

    def zmq_still_serving():
        assert server.alive(), "server exited"
        actions = client.get_action(zc.case0_observation(), {"noise": zc.case0_noise()})
        assert_equal({g: actions[g][0] for g in GROUPS}, state["zmq"], "ZMQ after errors")

    check("ZMQ still serves after errors", zmq_still_serving)

    # Websocket malformed messages: text frame with the reason, then close 1011.
    def ws_bad(payload, want):
        def run():
            _, reply, code = asyncio.run(ws_exchange(ws_uri, payload))
            assert isinstance(reply, str), f"expected a text frame, got {type(reply)}"
            assert want in reply, f"{reply!r} lacks {want!r}"
            assert code == 1011, f"close code {code}"
        return run

    def ws_obs(**changes):
        obs = wsc.case0_observation(frames=("t0",))
        for k, v in changes.items():
            if v is None:
                del obs[k]
            else:
                obs[k] = v
        return wsc.packb(obs)

    float_image = np.full((180, 320, 3), 0.5, np.float32)
    three_frames = np.full((3, 180, 320, 3), 0, np.uint8)
    check("websocket float image -> 1011",
          ws_bad(ws_obs(**{"observation/wrist_image_left": float_image}), "uint8"))
    check("websocket missing joint_position -> 1011",
          ws_bad(ws_obs(**{"observation/joint_position": None}),
                 "observation/joint_position is missing"))
    check("websocket wrong T (3 frames) -> 1011",
          ws_bad(ws_obs(**{"observation/exterior_image_1_left": three_frames}),
                 "must have shape (H, W, 3) or (2, H, W, 3)"))
    check("websocket garbage bytes -> 1011", ws_bad(b"\xc1not msgpack", "msgpack"))

    def ws_still_serving():
        assert server.alive(), "server exited"
        _, reply, _ = asyncio.run(ws_exchange(ws_uri, wsc.packb(wsc.case0_observation())))
        assert isinstance(reply, bytes), reply
        assert_equal(ws_groups(wsc.unpackb(reply)), state["http_seed0"], "websocket after errors")

    check("websocket still serves after errors", ws_still_serving)
    check("HTTP still serves after errors",
          lambda: assert_equal(http_predict(server, request), state["http_noise"], "HTTP again"))
    client.close()


if __name__ == "__main__":
    sys.exit(run(checks))
