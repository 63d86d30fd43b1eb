#!/usr/bin/env python3
"""LeRobot's **stock** `RobotClient` (lerobot 0.4.4 from PyPI, unmodified) driving a simulated
SO-101 against `gr00t serve --lerobot-port` for a few seconds.

    python3 bench/lerobot/robot_client_run.py [--seconds 10] [--checkpoint DIR --map FILE]

Prints the chunks the client received, actions per chunk, the robot's executed actions, the
latency of each `GetActions` that carried a chunk, and checks the first chunk against the ZMQ
door's actions for the observation it answered. By hand only: it needs lerobot and torch, in
the venv `tools/lerobot/make_fixtures.py` makes (target/lerobot-venv or $LEROBOT_VENV), to which
it adds grpcio, protobuf, pyzmq and msgpack-numpy.

The robot is a real `SO101Follower` (two 640x480 cameras) whose motor bus and cameras are
stand-ins: the joints move 0.25 degrees per observation so that LeRobot's filter lets them
through; `send_action` records what the client executes.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools/lerobot"))
import make_fixtures as mf  # noqa: E402

EXTRA = ["grpcio==1.73.1", "protobuf>=6.31.1,<6.32", "pyzmq==27.3.0", "msgpack==1.1.0",
         "msgpack-numpy==0.4.8"]


def start_server(args):
    binary = os.environ.get("GR00T_BIN", str(ROOT / "target/debug/gr00t"))
    cmd = [binary, "serve", "--checkpoint", str(args.checkpoint), "--port", "0", "--zmq-port", "0",
           "--lerobot-port", "0", "--lerobot-map", str(args.map),
           "--lerobot-policy-name", mf_policy_name()]
    if args.embodiment:
        cmd += ["--embodiment", args.embodiment]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "RUST_LOG": "info"})
    addrs, ready = {}, threading.Event()

    def read():
        for line in proc.stderr:
            if "transport.AsyncInference) listening on " in line:
                addrs["lerobot"] = line.rsplit(" ", 1)[1].strip()
            if "listening on tcp://" in line:
                addrs["zmq"] = line.split("listening on tcp://", 1)[1].strip()
            if line.strip() == "Application startup complete":
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(600) or proc.poll() is not None:
        raise SystemExit("the server did not start")
    return proc, addrs


def mf_policy_name():
    return "nvidia/GR00T-N1.7-3B"


def fake_robot():
    """A real SO101Follower with stand-in hardware; its joints move each observation."""
    robot = mf.make_robot()
    step = {"t": 0, "executed": []}

    def get_observation():
        obs = mf.observe(robot, step["t"])
        step["t"] += 1
        return obs

    robot.connect = lambda *a, **k: None
    robot.disconnect = lambda *a, **k: None
    robot.get_observation = get_observation
    robot.send_action = lambda action: step["executed"].append(action) or action
    return robot, step


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--checkpoint", type=Path, default=ROOT / "tests/fixtures/gr00t_n17_tiny_multi/checkpoint")
    ap.add_argument("--embodiment", default="new_embodiment")
    ap.add_argument("--map", type=Path, default=ROOT / "examples/lerobot_so101.json")
    args = ap.parse_args()
    mf.ensure_lerobot(__file__, EXTRA, ("lerobot", "torch", "grpc", "zmq"))
    args.checkpoint, args.map = args.checkpoint.resolve(), args.map.resolve()
    os.chdir(tempfile.mkdtemp())  # LeRobot's logger writes logs/ where it is imported

    import numpy as np
    import lerobot
    import lerobot.async_inference.robot_client as rc
    from lerobot.async_inference.configs import RobotClientConfig

    proc, addrs = start_server(args)
    try:
        robot, step = fake_robot()
        rc.make_robot_from_config = lambda _cfg: robot
        cfg = RobotClientConfig(
            policy_type="groot", pretrained_name_or_path=mf_policy_name(), robot=robot.config,
            actions_per_chunk=16, task=mf.TASK, server_address=addrs["lerobot"],
            policy_device="cpu", fps=30, chunk_size_threshold=0.5)
        client = rc.RobotClient(cfg)
        sent, chunks = {}, []
        send = client.send_observation

        def send_observation(obs):
            sent.setdefault(obs.get_timestep(), obs)
            return send(obs)

        client.send_observation = send_observation
        get_actions = client.stub.GetActions

        class Stub:
            def __getattr__(self, name):
                return getattr(real_stub, name)

            def GetActions(self, request):  # noqa: N802
                t0 = time.perf_counter()
                reply = get_actions(request)
                if reply.data:
                    import pickle
                    chunks.append((time.perf_counter() - t0, pickle.loads(reply.data)))
                return reply

        real_stub = client.stub
        client.stub = Stub()
        assert client.start(), "the client could not start"
        receiver = threading.Thread(target=client.receive_actions, daemon=True)
        receiver.start()
        threading.Timer(args.seconds, client.stop).start()
        t0 = time.perf_counter()
        client.control_loop(task=cfg.task)
        wall = time.perf_counter() - t0
        receiver.join(5)

        print(f"lerobot {lerobot.__version__} RobotClient, {wall:.1f} s against {addrs['lerobot']}")
        print(f"chunks received: {len(chunks)}; actions per chunk: {sorted({len(c) for _, c in chunks})}")
        print(f"observations sent (distinct timesteps): {len(sent)}; actions executed: {len(step['executed'])}")
        lat = [1000 * s for s, _ in chunks]
        if lat:
            print(f"GetActions with a chunk, ms: median {statistics.median(lat):.1f}, "
                  f"min {min(lat):.1f}, max {max(lat):.1f} (includes the wait for an observation)")
        first = chunks[0][1]
        t = first[0].get_timestep()
        want = mf.zmq_actions(addrs["zmq"], sent[t].get_observation())[:len(first)]
        got = np.stack([a.get_action().numpy() for a in first])
        same = np.array_equal(got, want)
        print(f"first chunk (for observation #{t}) == ZMQ door's actions: {same} "
              f"(max|diff| {float(np.max(np.abs(got - want))):.3g}); dtype {first[0].get_action().dtype}")
        return 0 if same and chunks else 1
    finally:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    sys.exit(main())
