#!/usr/bin/env python3
"""The LeRobot door (`--lerobot-port`, gRPC `transport.AsyncInference`) from grpcio, as LeRobot's
`robot_client` calls it, with the bytes lerobot 0.4.4 wrote (`tests/fixtures/lerobot`).

Starts the server on the multi-embodiment fixture checkpoint serving `new_embodiment` through
`examples/lerobot_so101.json`, with its ZMQ door beside it. Checks: a robot's chunk equals the
ZMQ door's actions for the same observation and noise (arm then gripper, cut to
actions_per_chunk, timed as LeRobot's server times them) and Python's own pickle reads our reply
(its lerobot and torch names stood in for: CI has neither); observations sent whole (a lone END)
and in pieces (BEGIN, MIDDLE, END); the empty answer when nothing waits; a forged pickle refused
with nothing executed and the robot served after it; unknown globals, truncated pieces, an
oversized stream and an oversized piece refused; two robots at once kept apart; a token
required when set. Prints `N passed, M failed`.
"""
import dataclasses
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

import grpc
import numpy as np

import test_protocols as tp

sys.path.insert(0, str(tp.ROOT / "tools/lerobot"))
import make_fixtures as mf  # noqa: E402

ROOT = tp.ROOT
FIXTURES = ROOT / "tests/fixtures/lerobot"
CHECKPOINT = ROOT / "tests/fixtures/gr00t_n17_tiny_multi/checkpoint"
MAP = ROOT / "examples/lerobot_so101.json"
MB = 1 << 20


def fixture(name):
    return (FIXTURES / name).read_bytes()


# LeRobot's names, stood in for, so that Python's pickle can read our reply without lerobot or
# torch installed: `TimedAction` a dataclass, `torch.tensor` a float32 array.
@dataclasses.dataclass
class TimedAction:
    timestamp: float
    timestep: int
    action: object


def _stand_ins():
    for name in ("lerobot", "lerobot.async_inference"):
        sys.modules.setdefault(name, types.ModuleType(name))
    helpers = types.ModuleType("lerobot.async_inference.helpers")
    TimedAction.__module__ = helpers.__name__
    helpers.TimedAction = TimedAction
    sys.modules[helpers.__name__] = helpers
    if "torch" not in sys.modules:
        torch = types.ModuleType("torch")
        torch.tensor = lambda values: np.asarray(values, np.float32)
        sys.modules["torch"] = torch


_stand_ins()


# The protobuf messages of LeRobot's services.proto, by hand (grpcio only, no generated code).
def _varint(n):
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def policy_setup(data):
    return b"\x0a" + _varint(len(data)) + data


def observation_piece(state, data):
    return b"\x08" + _varint(state) + b"\x12" + _varint(len(data)) + data


def actions_data(message):
    """`Actions.data` of a serialised `Actions` (empty when the field is absent)."""
    if not message:
        return b""
    assert message[0] == 0x0A, message[:4]
    n, shift, i = 0, 0, 1
    while True:
        b = message[i]
        n |= (b & 0x7F) << shift
        i += 1
        shift += 7
        if not b & 0x80:
            break
    return message[i:i + n]


BEGIN, MIDDLE, END = 1, 2, 3
SERVICE = "/transport.AsyncInference/"


class Robot:
    """One robot client: its own gRPC connection, LeRobot's channel limits (4 MB)."""

    def __init__(self, address, token=None, max_send=4 * MB):
        self.channel = grpc.insecure_channel(address, options=[
            ("grpc.max_send_message_length", max_send),
            ("grpc.max_receive_message_length", 4 * MB),
            ("grpc.use_local_subchannel_pool", 1),  # a connection of its own
        ])
        ident = lambda b: b  # noqa: E731
        self.metadata = [("authorization", f"Bearer {token}")] if token else None
        unary = lambda m: self.channel.unary_unary(SERVICE + m, ident, ident)  # noqa: E731
        self._ready, self._setup, self._actions = unary("Ready"), unary("SendPolicyInstructions"), unary("GetActions")
        self._observe = self.channel.stream_unary(SERVICE + "SendObservations", ident, ident)

    def ready(self):
        self._ready(b"", metadata=self.metadata, timeout=30)

    def setup(self, data):
        self._setup(policy_setup(data), metadata=self.metadata, timeout=30)

    def send(self, data, pieces=None):
        """Sends one observation: a lone END, or the given (state, bytes) pieces."""
        pieces = pieces or [(END, data)]
        self._observe(iter(observation_piece(s, d) for s, d in pieces), metadata=self.metadata, timeout=30)

    def actions(self):
        return actions_data(self._actions(b"", metadata=self.metadata, timeout=60))

    def close(self):
        self.channel.close()


def refused(fn, code, needle):
    try:
        fn()
    except grpc.RpcError as e:
        assert e.code() == code, (e.code(), e.details())
        assert needle in e.details(), e.details()
        return
    raise AssertionError(f"not refused ({code})")


class Server:
    """`gr00t serve` with the LeRobot and ZMQ doors on free ports."""

    def __init__(self, extra=()):
        binary = os.environ.get("GR00T_BIN", str(ROOT / "target/debug/gr00t"))
        self.proc = subprocess.Popen(
            [binary, "serve", "--checkpoint", str(CHECKPOINT), "--embodiment", "new_embodiment",
             "--port", "0", "--zmq-port", "0", "--ws-port", "0", "--lerobot-port", "0", "--lerobot-map", str(MAP),
             "--lerobot-policy-name", "nvidia/GR00T-N1.7-3B",
             *extra],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True, env={**os.environ, "RUST_LOG": "info"})
        self.log, self.lerobot, self.zmq, self.http, self.ws = [], None, None, None, None
        ready = threading.Event()

        def read():
            for line in self.proc.stderr:
                self.log.append(line.rstrip("\n"))
                if "transport.AsyncInference) listening on " in line:
                    self.lerobot = line.rsplit(" ", 1)[1].strip()
                if "listening on http://" in line:
                    self.http = line.split("listening on http://", 1)[1].strip()
                if "listening on ws://" in line:
                    self.ws = line.split("listening on ws://", 1)[1].strip()
                if "listening on tcp://" in line:
                    self.zmq = line.split("listening on tcp://", 1)[1].strip()
                if line.strip() == "Application startup complete":
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(tp.STARTUP_TIMEOUT) or self.proc.poll() is not None or not self.lerobot:
            self.stop()
            raise RuntimeError("server did not start:\n" + "\n".join(self.log))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def read_observation(name):
    """A fixture observation as Python reads it (numpy frames) with lerobot's class stood in."""
    @dataclasses.dataclass
    class TimedObservation:
        timestamp: float
        timestep: int
        observation: dict
        must_go: bool = False
    TimedObservation.__module__ = "lerobot.async_inference.helpers"
    sys.modules["lerobot.async_inference.helpers"].TimedObservation = TimedObservation
    return pickle.loads(fixture(name))


def main():
    t0 = time.monotonic()
    server = Server()
    try:
        checks(server)
    finally:
        server.stop()
    token_server = Server(["--api-token-file", str(token_file()), "--handshake-timeout-s", "1",
                           "--lerobot-max-connections", "2"])
    try:
        token_checks(token_server)
    finally:
        token_server.stop()
    return tp.summary(t0)


def token_file():
    f = tempfile.NamedTemporaryFile("w", suffix=".token", delete=False)
    f.write("s3cret\n")
    f.close()
    return f.name


def checks(server):
    robot = Robot(server.lerobot)

    def chunk_equals_zmq():
        robot.ready()
        robot.setup(fixture("policy_config.pkl"))
        robot.send(fixture("observation_must_go.pkl"))
        reply = pickle.loads(robot.actions())
        obs = read_observation("observation_must_go.pkl")
        want = mf.zmq_actions(server.zmq, obs.observation)[:16]
        assert [type(a) for a in reply] == [TimedAction] * 16, reply[:1]
        got = np.stack([a.action for a in reply])
        assert got.dtype == np.float32 and got.shape == (16, 6), got.shape
        assert np.array_equal(got, want), f"max|Δ| {np.max(np.abs(got - want))}"
        assert [a.timestep for a in reply] == list(range(16))
        assert [a.timestamp for a in reply] == [obs.timestamp + i / 30 for i in range(16)]

    def pieces():
        whole = fixture("observation.pkl")
        cut = [(BEGIN, whole[:MB]), (MIDDLE, whole[MB:MB + 1000]), (END, whole[MB + 1000:])]
        robot.send(whole, cut)
        assert pickle.loads(robot.actions())[0].timestep == 12

    def empty_when_nothing_waits():
        t = time.monotonic()
        assert robot.actions() == b""
        assert 1.5 < time.monotonic() - t < 10

    marker = Path(tempfile.mkdtemp()) / "pwned"

    def forged_pickle_refused_nothing_run():
        evil = b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."
        refused(lambda: robot.send(evil), grpc.StatusCode.INVALID_ARGUMENT, "pickle global os.system is refused")
        popen = b"\x80\x04\x8c\nsubprocess\x8c\x05Popen\x93)R."
        refused(lambda: robot.send(popen), grpc.StatusCode.INVALID_ARGUMENT, "subprocess.Popen is refused")
        refused(lambda: robot.setup(evil), grpc.StatusCode.INVALID_ARGUMENT, "os.system is refused")
        assert not marker.exists(), "the forged pickle ran"
        robot.send(fixture("observation_must_go.pkl"))
        assert pickle.loads(robot.actions())[0].timestep == 0

    def bad_streams_refused():
        whole = fixture("observation.pkl")
        refused(lambda: robot.send(whole[:-100]), grpc.StatusCode.INVALID_ARGUMENT, "truncated")
        over = [(BEGIN, bytes(MB))] + [(MIDDLE, bytes(MB))] * 3 + [(END, bytes(MB))]
        refused(lambda: robot.send(None, over), grpc.StatusCode.INVALID_ARGUMENT, "over 4194304 bytes")
        big = Robot(server.lerobot, max_send=8 * MB)
        try:
            # tonic refuses it from its length prefix, before reading it.
            refused(lambda: big.send(bytes(5 * MB)), grpc.StatusCode.OUT_OF_RANGE, "too large")
        finally:
            big.close()
        robot.send(fixture("observation_must_go.pkl"))
        assert len(pickle.loads(robot.actions())) == 16

    def two_robots_kept_apart():
        other = Robot(server.lerobot)
        try:
            refused(lambda: other.send(fixture("observation.pkl")), grpc.StatusCode.FAILED_PRECONDITION,
                    "SendPolicyInstructions first")
            other.setup(fixture("policy_config.safe"))
            other.send(fixture("observation.safe"))
            robot.send(fixture("observation_must_go.pkl"))
            safe, plain = other.actions(), robot.actions()
            assert safe[:1] == b"\x00" and pickle.loads(plain)[0].timestep == 0
            other.ready()
            refused(lambda: other.send(fixture("observation.safe")), grpc.StatusCode.FAILED_PRECONDITION, "")
            robot.send(fixture("observation_must_go.pkl"))
            assert len(pickle.loads(robot.actions())) == 16
        finally:
            other.close()

    def unserved_policy_refused():
        other = Robot(server.lerobot)
        try:
            cfg = fixture("policy_config.pkl").replace(b"\x8c\x05groot", b"\x8c\x05act__")
            refused(lambda: other.setup(cfg), grpc.StatusCode.INVALID_ARGUMENT,
                    'served: embodiment "new_embodiment"')
            # Another checkpoint is refused, never loaded: the answer names what is served.
            other_ckpt = fixture("policy_config.pkl").replace(b"\x8c\x14nvidia/GR00T-N1.7-3B",
                                                               b"\x8c\x14lerobot/pi0_somethin")
            refused(lambda: other.setup(other_ckpt), grpc.StatusCode.INVALID_ARGUMENT,
                    "gr00t_n17_tiny_multi/checkpoint")
        finally:
            other.close()

    tp.check("a robot's chunk == the ZMQ door's actions, read by Python's pickle", chunk_equals_zmq)
    tp.check("an observation in pieces (BEGIN, MIDDLE, END)", pieces)
    tp.check("GetActions answers empty when nothing waits", empty_when_nothing_waits)
    tp.check("forged pickles refused, nothing run, the robot served after", forged_pickle_refused_nothing_run)
    tp.check("truncated, oversized streams and pieces refused", bad_streams_refused)
    tp.check("two robots at once kept apart", two_robots_kept_apart)
    tp.check("a policy that is not served is refused saying what is", unserved_policy_refused)
    def other_ports_are_http1_only():
        for address in (server.http, server.ws):
            stray = Robot(address)
            try:
                refused(stray.ready, grpc.StatusCode.UNAVAILABLE, "505")
            except AssertionError:
                refused(stray.ready, grpc.StatusCode.UNKNOWN, "505")
            finally:
                stray.close()

    tp.check("HTTP/2 on the HTTP and websocket ports is refused (505): gRPC is the LeRobot port's",
             other_ports_are_http1_only)
    def metrics_count_the_door():
        import urllib.request
        with urllib.request.urlopen(f"http://{server.http}/metrics", timeout=10) as r:
            text = r.read().decode()
        ok = [l for l in text.splitlines()
              if l.startswith("gr00t_predict_requests_total{") and 'door="lerobot"' in l and 'outcome="ok"' in l]
        bad = [l for l in text.splitlines()
               if l.startswith("gr00t_predict_requests_total{") and 'door="lerobot"' in l
               and 'outcome="bad_request"' in l]
        assert ok and float(ok[0].rsplit(" ", 1)[1]) >= 5, ok
        assert bad and sum(float(l.rsplit(" ", 1)[1]) for l in bad) >= 3, bad

    tp.check("/metrics counts the door's answers and refusals (door=\"lerobot\")", metrics_count_the_door)
    tp.check("the server is alive", lambda: server.proc.poll() is None or (_ for _ in ()).throw(AssertionError("died")))
    robot.close()


def token_checks(server):
    def token_required():
        bare = Robot(server.lerobot)
        try:
            refused(bare.ready, grpc.StatusCode.UNAUTHENTICATED, "Bearer")
        finally:
            bare.close()
        wrong = Robot(server.lerobot, token="nope")
        try:
            refused(wrong.ready, grpc.StatusCode.UNAUTHENTICATED, "")
        finally:
            wrong.close()
        good = Robot(server.lerobot, token="s3cret")
        try:
            good.ready()
            good.setup(fixture("policy_config.pkl"))
            good.send(fixture("observation_must_go.pkl"))
            assert len(pickle.loads(good.actions())) == 16
        finally:
            good.close()

    def silent_connections_are_closed_and_capped():
        import socket
        host, port = server.lerobot.rsplit(":", 1)
        t0 = time.monotonic()
        s = socket.create_connection((host, int(port)), timeout=10)
        try:
            assert s.recv(1) == b"", "the door wrote to a silent connection"
        finally:
            s.close()
        took = time.monotonic() - t0
        assert 0.5 < took < 5, f"a silent connection lived {took:.1f} s (--handshake-timeout-s 1)"
        # At the cap (2), a third connection evicts a silent one; a robot still gets served.
        silent = [socket.create_connection((host, int(port)), timeout=10) for _ in range(3)]
        try:
            good = Robot(server.lerobot, token="s3cret")
            try:
                good.ready()
            finally:
                good.close()
        finally:
            for c in silent:
                c.close()

    tp.check("--api-token: calls need `authorization: Bearer <token>`", token_required)
    tp.check("a silent connection is closed at the handshake timeout; the cap keeps a robot served",
             silent_connections_are_closed_and_capped)


if __name__ == "__main__":
    sys.exit(main())
