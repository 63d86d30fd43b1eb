#!/usr/bin/env python3
"""Reruns issue 43's attacks on the loopback against one or more `gr00t` binaries, side by side.

Each attack starts a fresh `gr00t serve` on the tiny fixture checkpoint, drives one or more
robots at 1 step/s while it runs, and prints what a robot lab cares about: robot steps kept,
how long a fresh connection waits, peak RSS, bytes echoed or logged. Binaries alternate per
attack so that they share the machine's state.

    python3 bench/attacks.py --bin before=/tmp/gr00t-old --bin after=target/release/gr00t

Needs numpy, msgpack, pyzmq, websockets (>= 13) and Pillow. Only flags every version has are
passed to the server, so older binaries run the same attacks.
"""
import argparse
import base64
import http.client
import io
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import warnings
from pathlib import Path

import msgpack
import numpy as np
import zmq
from PIL import Image
from websockets.sync.client import connect as ws_connect

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
import websocket_client  # noqa: E402  (openpi's wire form of case0)

CHECKPOINT = ROOT / "tests/fixtures/gr00t_n17_tiny/checkpoint"
CASE0 = json.loads((ROOT / "tests/fixtures/gr00t_n17_tiny/case0/request.json").read_text())
PING = msgpack.packb({"endpoint": "ping"})
HOST = "127.0.0.1"


class Server:
    """`BIN serve` on the tiny checkpoint with HTTP, ZMQ and websocket doors; stderr to a file."""

    def __init__(self, binary, base_port, extra=()):
        self.http, self.zmq, self.ws = base_port, base_port + 1, base_port + 2
        self.log = tempfile.NamedTemporaryFile(prefix="gr00t-attack-", suffix=".log", delete=False)
        args = [binary, "serve", "--checkpoint", str(CHECKPOINT), "--port", str(self.http),
                "--zmq-port", str(self.zmq), "--ws-port", str(self.ws), *extra]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://{HOST}:{self.http}/health", timeout=1).read()
                return
            except Exception:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"server exited: {Path(self.log.name).read_text()[-2000:]}")
                time.sleep(0.2)
        raise RuntimeError("server not ready in 120 s")

    def status(self, key):
        """A `/proc/PID/status` line's value in MB (VmRSS, VmHWM)."""
        for line in open(f"/proc/{self.proc.pid}/status"):
            if line.startswith(key):
                return int(line.split()[1]) // 1024
        return None

    def log_bytes(self):
        return os.path.getsize(self.log.name)

    def info(self):
        return json.load(urllib.request.urlopen(f"http://{HOST}:{self.http}/info", timeout=10))

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.unlink(self.log.name)


def post(port, body, path="/predict", timeout=60):
    """(status, parsed JSON or text) of one POST on a fresh connection."""
    c = http.client.HTTPConnection(HOST, port, timeout=timeout)
    c.request("POST", path, json.dumps(body), {"content-type": "application/json"})
    r = c.getresponse()
    text = r.read()
    c.close()
    try:
        return r.status, json.loads(text)
    except ValueError:
        return r.status, text


class Robot(threading.Thread):
    """Steps once a second until stopped, counting steps answered and failed (a failure
    reconnects, as a robot's client would)."""

    def __init__(self, step, connect, period=1.0):
        super().__init__(daemon=True)
        self.step, self.connect, self.period = step, connect, period
        self.ok = self.failed = 0
        self.halt = threading.Event()

    def run(self):
        conn = None
        while not self.halt.is_set():
            t0 = time.monotonic()
            try:
                conn = conn or self.connect()
                self.step(conn)
                self.ok += 1
            except Exception:
                self.failed += 1
                try:
                    conn and conn.close()
                except Exception:
                    pass
                conn = None
            self.halt.wait(max(0.0, self.period - (time.monotonic() - t0)))

    def finish(self):
        self.halt.set()
        self.join(10)
        return f"{self.ok}/{self.ok + self.failed}"


def http_robot(port):
    body = json.dumps(CASE0)

    def step(c):
        c.request("POST", "/predict", body, {"content-type": "application/json"})
        r = c.getresponse()
        r.read()
        if r.status != 200:
            raise RuntimeError(r.status)

    return Robot(step, lambda: http.client.HTTPConnection(HOST, port, timeout=3))


def ws_robot(port):
    obs = websocket_client.packb(websocket_client.case0_observation())

    def connect():
        ws = ws_connect(f"ws://{HOST}:{port}", max_size=None, open_timeout=3)
        ws.recv(timeout=3)  # metadata
        return ws

    def step(ws):
        ws.send(obs)
        if isinstance(ws.recv(timeout=3), str):
            raise RuntimeError("error reply")

    return Robot(step, connect)


class ZmqReq:
    def __init__(self, port):
        self.s = zmq.Context.instance().socket(zmq.REQ)
        self.s.setsockopt(zmq.LINGER, 0)
        self.s.connect(f"tcp://{HOST}:{port}")

    def close(self):
        self.s.close()


def zmq_robot(port):
    def step(c):
        c.s.send(PING)
        if not c.s.poll(2000, zmq.POLLIN):
            raise TimeoutError
        c.s.recv()

    return Robot(step, lambda: ZmqReq(port))


def greeting():
    return bytes([0xFF, 0, 0, 0, 0, 0, 0, 0, 1, 0x7F, 3, 1]) + b"NULL".ljust(52, b"\0")


def frame(data, more=False, command=False):
    flags = int(more) | (4 if command else 0)
    if len(data) > 255:
        return bytes([flags | 2]) + len(data).to_bytes(8, "big") + data
    return bytes([flags, len(data)]) + data


def ready():
    return frame(b"\x05READY\x0bSocket-Type" + (3).to_bytes(4, "big") + b"REQ", command=True)


def zmq_greeting_wait(port, timeout=60.0):
    """Seconds until a fresh ZMQ connection gets the server's whole greeting."""
    t0 = time.monotonic()
    s = socket.create_connection((HOST, port), timeout=timeout)
    s.sendall(greeting())
    got = b""
    try:
        while len(got) < 64:
            chunk = s.recv(64 - len(got))
            if not chunk:
                return f"closed after {time.monotonic() - t0:.2f} s"
            got += chunk
    except socket.timeout:
        return f">{timeout:.0f} s"
    finally:
        s.close()
    return f"{time.monotonic() - t0:.3f} s"


def http_wait(port, path="/health", timeout=60.0):
    """Seconds until a fresh HTTP connection answers GET `path`."""
    t0 = time.monotonic()
    try:
        c = http.client.HTTPConnection(HOST, port, timeout=timeout)
        c.request("GET", path)
        c.getresponse().read()
        c.close()
    except Exception as e:
        return f"failed after {time.monotonic() - t0:.2f} s ({type(e).__name__})"
    return f"{time.monotonic() - t0:.3f} s"


def ws_wait(port, timeout=30.0):
    """Seconds until a fresh websocket gets its metadata."""
    t0 = time.monotonic()
    try:
        with ws_connect(f"ws://{HOST}:{port}", max_size=None, open_timeout=timeout) as ws:
            ws.recv(timeout=timeout)
    except Exception as e:
        return f"failed after {time.monotonic() - t0:.2f} s ({type(e).__name__})"
    return f"{time.monotonic() - t0:.3f} s"


def shut(server, socks, result):
    """Closes the attack's sockets and stops the server; `result`."""
    for c in socks:
        c.close()
    server.stop()
    return result


def attack_zmq_unread(binary, port):
    """256 ZMQ peers each send one ping behind a 6 MiB routing frame and never read."""
    s = Server(binary, port)
    robot = zmq_robot(s.zmq)
    robot.start()
    time.sleep(2)
    big = frame(b"e" * (6 << 20), more=True)
    socks = []

    def attacker():
        try:
            c = socket.create_connection((HOST, s.zmq), timeout=30)
            socks.append(c)
            c.sendall(greeting() + ready() + big + frame(b"", more=True) + frame(PING))
        except Exception:
            pass

    threads = [threading.Thread(target=attacker, daemon=True) for _ in range(256)]
    for t in threads:
        t.start()
    time.sleep(5)
    fresh = zmq_greeting_wait(s.zmq, timeout=30)
    time.sleep(max(0.0, 20 - 5))
    out = {"robot pings answered": robot.finish(), "fresh ZMQ greeting": fresh,
           "peak RSS MB": s.status("VmHWM")}
    return shut(s, socks, out)


def attack_http_heads(binary, port):
    """1 100 POST heads (over the cap of 1 024) declaring 100 000 bytes whose bodies never come."""
    s = Server(binary, port)
    robot = http_robot(s.http)
    robot.start()
    time.sleep(2)
    head = (f"POST /predict HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
            "Content-Length: 100000\r\n\r\n").encode()
    socks = []
    for _ in range(1100):
        try:
            c = socket.create_connection((HOST, s.http), timeout=5)
            c.sendall(head)
            socks.append(c)
        except Exception:
            break
    fresh = http_wait(s.http)
    time.sleep(2)
    out = {"robot steps answered": robot.finish(), "fresh GET /health": fresh,
           "peak RSS MB": s.status("VmHWM")}
    return shut(s, socks, out)


def attack_fresh_flood(binary, port):
    """Fresh TCP connections that send nothing, 20 a second per door, at caps of 16, while an
    HTTP keep-alive robot, an openpi websocket robot and a ZMQ robot step once a second."""
    caps = ["--max-connections", "16", "--ws-max-connections", "16",
            "--zmq-max-connections", "16"]
    s = Server(binary, port, caps)
    robots = {"http": http_robot(s.http), "websocket": ws_robot(s.ws), "zmq": zmq_robot(s.zmq)}
    for r in robots.values():
        r.start()
    time.sleep(2)
    socks, end = [], time.monotonic() + 20
    while time.monotonic() < end:
        for p in (s.http, s.ws, s.zmq):
            try:
                socks.append(socket.create_connection((HOST, p), timeout=1))
            except Exception:
                pass
        time.sleep(0.05)
    out = {f"{door} robot steps": r.finish() for door, r in robots.items()}
    return shut(s, socks, out)


def ws_refused_and_held(port, size):
    """A raw websocket that sends a frame header declaring `size` bytes, then some of it, and
    keeps its socket open without reading (the server refuses it with close 1009)."""
    c = socket.create_connection((HOST, port), timeout=10)
    key = base64.b64encode(os.urandom(16)).decode()
    c.sendall((f"GET / HTTP/1.1\r\nHost: {HOST}:{port}\r\nUpgrade: websocket\r\n"
               f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
               "Sec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = c.recv(4096)
        if not chunk:
            break
        head += chunk
    try:
        c.sendall(bytes([0x82, 0x80 | 127]) + size.to_bytes(8, "big") + b"\0" * 4 + b"\0" * 65536)
    except OSError:
        pass
    return c


def attack_ws_linger(binary, port):
    """At --ws-max-connections 2, two clients refused with close 1009 (a 2 MiB frame over
    --max-body-mb 1) that keep their sockets open, then a fresh websocket; ten rounds."""
    s = Server(binary, port, ["--ws-max-connections", "2", "--max-body-mb", "1"])
    waits, held = [], []
    for _ in range(10):
        held += [ws_refused_and_held(s.ws, 2 << 20) for _ in range(2)]
        time.sleep(0.2)
        t0 = time.monotonic()
        r = ws_wait(s.ws, timeout=15)
        waits.append(time.monotonic() - t0 if not r.startswith("failed") else float("inf"))
        for c in held:
            c.close()
        held.clear()
    s.stop()
    return {"fresh websocket wait, median": f"{statistics.median(waits):.3f} s",
            "max": f"{max(waits):.3f} s"}


def attack_echo(binary, port):
    """Ten RoboArena messages whose `endpoint` is 3 MiB: bytes of error text back and logged."""
    s = Server(binary, port)
    obs = websocket_client.case0_observation()
    obs["endpoint"] = "t" * (3 << 20)
    payload = websocket_client.packb(obs)
    before, back = s.log_bytes(), 0
    for _ in range(10):
        with ws_connect(f"ws://{HOST}:{s.ws}", max_size=None, open_timeout=10) as ws:
            ws.recv(timeout=5)
            ws.send(payload)
            reply = ws.recv(timeout=10)
            back += len(reply)
    time.sleep(0.5)
    logged = s.log_bytes() - before
    s.stop()
    return {"bytes echoed per message": back // 10, "log bytes per message": logged // 10}


def attack_session(binary, port):
    """A request without the robot's token on its session, and a reset, on HTTP."""
    s = Server(binary, port)
    robot = dict(CASE0, session_id="arm-1")
    st, first = post(s.http, robot)
    token = first.get("session_token") if isinstance(first, dict) else None
    if token:
        robot["session_token"] = token
    post(s.http, robot)
    st_foreign, _ = post(s.http, dict(CASE0, session_id="arm-1"))
    st_reset, _ = post(s.http, {"session_id": "arm-1"}, path="/reset")
    s.stop()
    return {"foreign request": st_foreign, "foreign reset": st_reset}


def png_b64(width, height, shift):
    x = np.arange(width, dtype=np.uint32)[None, :]
    y = np.arange(height, dtype=np.uint32)[:, None]
    a = np.stack([np.broadcast_to((x + shift) % 256, (height, width)),
                  np.broadcast_to(y % 256, (height, width)), (x + y) % 256], -1).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


def attack_history(binary, port):
    """4 sessions each posting 16 lone 4096x2304 frames, then one lone 8192x4608 frame."""
    s = Server(binary, port)
    frames = [png_b64(4096, 2304, k) for k in range(3)]
    start = s.status("VmRSS")
    for r in range(16):
        for k in range(4):
            body = dict(CASE0, session_id=f"robot-{k}")
            body["images"] = {cam: [frames[(r + k) % 3]] for cam in CASE0["images"]}
            post(s.http, body)
    held = s.info().get("sessions", {}).get("history_bytes", "n/a")
    rss = s.status("VmRSS")
    huge = dict(CASE0, session_id="huge")
    huge["images"] = {cam: [png_b64(8192, 4608, 0)] for cam in CASE0["images"]}
    st, _ = post(s.http, huge)
    s.stop()
    return {"RSS MB start -> after 16 rounds": f"{start} -> {rss}", "history bytes": held,
            "lone 8192x4608 frame": st}


def attack_zmq_batch(binary, port):
    """One get_action of 600 items (8x14 frames, 0.9 MB), then another robot's get_action."""
    import zmq_client

    s = Server(binary, port)
    small = zmq_client.case0_observation(batch=600)
    for cam in small["video"]:
        small["video"][cam] = np.zeros((600, 2, 8, 14, 3), np.uint8)
    big = msgpack.packb({"endpoint": "get_action", "data": {"observation": small}},
                        default=zmq_client.encode)
    one = msgpack.packb({"endpoint": "get_action",
                         "data": {"observation": zmq_client.case0_observation()}},
                        default=zmq_client.encode)
    attacker, robot = ZmqReq(s.zmq), ZmqReq(s.zmq)
    attacker.s.send(big)
    time.sleep(0.5)
    t0 = time.monotonic()
    robot.s.send(one)
    answered = robot.s.poll(60_000, zmq.POLLIN)
    wait = time.monotonic() - t0
    reply = msgpack.unpackb(attacker.s.recv(), object_hook=zmq_client.decode) \
        if attacker.s.poll(60_000, zmq.POLLIN) else None
    refused = isinstance(reply, dict) and "error" in reply
    attacker.close()
    robot.close()
    s.stop()
    return {"batch": "refused" if refused else "served" if reply else "no reply",
            "other robot's answer": f"{wait:.2f} s" if answered else ">60 s",
            "message bytes": len(big)}


def attack_token_forms(binary, port):
    """A token file that starts with a byte-order mark, and `bearer` in lower case."""
    with tempfile.NamedTemporaryFile("w", encoding="utf-8-sig", suffix=".token",
                                     delete=False) as f:
        f.write("s3cret-token\n")
    s = Server(binary, port, ["--api-token-file", f.name])
    out = {}
    for scheme in ("Bearer", "bearer"):
        c = http.client.HTTPConnection(HOST, s.http, timeout=10)
        c.request("GET", "/info", headers={"Authorization": f"{scheme} s3cret-token"})
        out[f"GET /info with '{scheme}'"] = c.getresponse().status
        c.close()
    s.stop()
    os.unlink(f.name)
    return out


ATTACKS = {
    "zmq_unread": attack_zmq_unread,
    "http_heads": attack_http_heads,
    "fresh_flood": attack_fresh_flood,
    "ws_linger": attack_ws_linger,
    "echo": attack_echo,
    "zmq_batch": attack_zmq_batch,
    "token_forms": attack_token_forms,
    "session": attack_session,
    "history": attack_history,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", action="append", required=True, metavar="NAME=PATH",
                    help="a gr00t binary to attack, named in the output (repeat to compare)")
    ap.add_argument("--only", nargs="*", choices=list(ATTACKS), help="attacks to run")
    ap.add_argument("--port", type=int, default=18400, help="first port (three per server)")
    args = ap.parse_args()
    warnings.filterwarnings("ignore", category=DeprecationWarning)  # websockets' sync connect
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    bins = [b.split("=", 1) for b in args.bin]
    for name in args.only or ATTACKS:
        print(f"## {name}: {ATTACKS[name].__doc__.split(chr(10))[0]}", flush=True)
        for i, (label, path) in enumerate(bins):
            t0 = time.monotonic()
            result = ATTACKS[name](path, args.port + 10 * i)
            print(f"  {label:>8}: {result}  ({time.monotonic() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
