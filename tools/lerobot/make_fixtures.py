#!/usr/bin/env python3
"""Writes tests/fixtures/lerobot: the bytes LeRobot's async inference puts on the wire, made by
the real `lerobot` package, and checks our reply bytes with the real pickle + torch.

Run it by hand; CI never does (CI has neither lerobot nor torch: the bytes are committed).

    python3 tools/lerobot/make_fixtures.py            # write the fixtures, check our replies
    python3 tools/lerobot/make_fixtures.py --check    # only check the committed ones

Without `lerobot` importable it makes a virtual environment (target/lerobot-venv, or
$LEROBOT_VENV), installs the pinned packages below from PyPI (torch pulls its CUDA libraries:
about 7 GB) and runs itself there.

What it writes (the robot is a real `SO101Follower` of lerobot 0.4.4 with two 640x480 OpenCV
cameras; its motor bus and cameras are stand-ins that return the values below, so
`robot.get_observation()` and `RobotClient`'s own code paths build the objects):

* `policy_config.pkl`: `pickle.dumps(RemotePolicyConfig(...))` as `RobotClient.__init__` makes
  it (`lerobot_features` from `map_robot_keys_to_lerobot_features(robot)`).
* `observation_must_go.pkl` (timestep 0, must_go True), `observation.pkl` (timestep 12,
  must_go False), `observation_p5.pkl` (the latter at pickle protocol 5, Python 3.14's
  default: numpy arrays go through `_frombuffer`), `observation_np_scalars.pkl` (motor values
  as numpy float32 scalars, as some drivers give them): `pickle.dumps(TimedObservation(...))`
  as `RobotClient.send_observation` makes it.
* `reply_stock.pkl`: `pickle.dumps(list[TimedAction])` as LeRobot's own policy server makes it
  (rows of one float32 chunk tensor: torch's storage pickle, which our reader refuses).
* `*.safe`: the same objects in the safetensors + JSON form of LeRobot PR #3048
  (`[u32 big-endian JSON length][JSON][safetensors]`), written here from that format's
  description (lerobot 0.4.4 does not have it).
* `expected.json`: the values all of the above hold; frames are `frame_byte(cam, t, y, x, c)`.

What it checks: `reply_gr00t.pkl` / `reply_gr00t.safe` (our writer's output, frozen by the Rust
test `doors::lerobot` `our_reply_is_the_committed_bytes`) load with Python's `pickle` + torch
and with safetensors to `expected.json`'s reply: float32 tensors, equal values.
"""

import json
import os
import pickle
import struct
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "lerobot"
PINS = [
    "lerobot==0.4.4",
    "torch==2.9.1",
    "numpy==2.2.6",
    "safetensors==0.8.0",
    "feetech-servo-sdk==1.0.0",
]

CAMERAS = {"front": 0, "wrist": 1}
HEIGHT, WIDTH = 480, 640
MOTORS = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]
TASK = "pick up the red cube and put it in the bowl"
T0 = 1796000000.25  # a fixed wall-clock time.time() would give
FPS = 30
ACTIONS_PER_CHUNK = 16


def ensure_lerobot(script=__file__, extra=(), modules=("lerobot", "torch")):
    """Runs `script` again inside a venv with the pinned packages (and `extra`), unless
    `modules` import here."""
    try:
        for m in modules:
            __import__(m)
        return
    except ImportError:
        pass
    venv = Path(os.environ.get("LEROBOT_VENV", ROOT / "target" / "lerobot-venv"))
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"making {venv} and installing {' '.join(PINS)} (about 7 GB with torch's CUDA libraries)")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *PINS, *extra], check=True)
    os.execv(str(python), [str(python), str(script), *sys.argv[1:]])


def frame_byte(cam, t, y, x, c):
    """The pixel the fixtures' camera `cam` shows at timestep `t`: smooth, so git packs it."""
    return (x // 4 + 2 * (y // 4) + 85 * c + 40 * cam + 7 * t) % 256


def frame(cam, t):
    import numpy as np

    y = np.arange(HEIGHT).reshape(HEIGHT, 1, 1)
    x = np.arange(WIDTH).reshape(1, WIDTH, 1)
    c = np.arange(3).reshape(1, 1, 3)
    return (frame_byte(cam, t, y, x, c)).astype(np.uint8)


def motor_values(t):
    """The joint positions (degrees, gripper in %) at timestep `t`: exact in float32."""
    return {m: float(-40.0 + 12.5 * i + 0.25 * t) for i, m in enumerate(MOTORS)}


def zmq_actions(address, observation):
    """The ZMQ door at `address` (host:port) asked for an SO-101 observation's values (a raw
    robot observation dict, as `new_embodiment` of examples/lerobot_so101.json maps it, with the
    default seed as the LeRobot door's): (horizon, 6) actions, the arm's five then the gripper."""
    import numpy as np

    sys.path.insert(0, str(ROOT / "examples"))
    import zmq_client as zc

    host, port = address.rsplit(":", 1)
    client = zc.PolicyClient(host, int(port))
    motors = [f"{m}.pos" for m in MOTORS]
    nested = {
        "video": {v: np.asarray(observation[v])[None, None] for v in CAMERAS},
        "state": {"single_arm": np.asarray([[[observation[m] for m in motors[:5]]]], np.float32),
                  "gripper": np.asarray([[[observation[motors[5]]]]], np.float32)},
        "language": {"annotation.human.task_description": [[observation["task"]]]},
    }
    try:
        a = client.get_action(nested)
    finally:
        client.close()
    return np.concatenate([a["single_arm"][0], a["gripper"][0]], axis=1)


def make_robot():
    """A real SO101Follower whose bus and cameras are stand-ins (no hardware here)."""
    from lerobot.cameras.opencv.configuration_opencv import OpenCVCameraConfig
    from lerobot.robots.so_follower import SO101Follower, SO101FollowerConfig

    cfg = SO101FollowerConfig(
        port="/dev/null",
        id="fixture",
        cameras={
            name: OpenCVCameraConfig(index_or_path=i, width=WIDTH, height=HEIGHT, fps=FPS)
            for name, i in CAMERAS.items()
        },
    )
    return SO101Follower(cfg)


class FakeCamera:
    def __init__(self, cam):
        self.cam, self.t, self.is_connected = cam, 0, True

    def read_latest(self):
        return frame(self.cam, self.t)


def observe(robot, t, numpy_scalars=False):
    """`robot.get_observation()` at timestep `t`, past its connection check."""
    import numpy as np
    from lerobot.robots.so_follower import SO101Follower

    values = motor_values(t)
    if numpy_scalars:
        values = {m: np.float32(v) for m, v in values.items()}
    robot.bus.sync_read = lambda *_a, **_k: dict(values)
    robot.cameras = {name: FakeCamera(i) for name, i in CAMERAS.items()}
    for cam in robot.cameras.values():
        cam.t = t
    return SO101Follower.get_observation.__wrapped__(robot)


def timed_observation(robot, t, must_go, numpy_scalars=False):
    from lerobot.async_inference.helpers import TimedObservation

    raw = observe(robot, t, numpy_scalars)
    raw["task"] = TASK  # as RobotClient.control_loop_observation does
    obs = TimedObservation(timestamp=T0 + t / FPS, observation=raw, timestep=t)
    obs.must_go = must_go
    return obs


def reply_values():
    """The action chunk the replies carry: (ACTIONS_PER_CHUNK, 6), exact in float32."""
    return [[round(0.5 * j - 1.25 + 0.0625 * i, 4) for j in range(len(MOTORS))] for i in range(ACTIONS_PER_CHUNK)]


def stock_reply(obs):
    """`list[TimedAction]` as LeRobot's policy server builds it (`_time_action_chunk`)."""
    import torch
    from lerobot.async_inference.helpers import TimedAction

    chunk = torch.tensor(reply_values(), dtype=torch.float32)
    return [
        TimedAction(timestamp=obs.get_timestamp() + i / FPS, timestep=obs.get_timestep() + i, action=a)
        for i, a in enumerate(list(chunk))
    ]


# The safetensors + JSON form of LeRobot PR #3048, from its description.
def safe_pack(meta, tensors):
    from safetensors.torch import save

    body = json.dumps(meta).encode()
    return struct.pack(">I", len(body)) + body + (save(tensors) if tensors else b"")


def safe_unpack(data):
    from safetensors.torch import load

    n = struct.unpack(">I", data[:4])[0]
    rest = data[4 + n :]
    return json.loads(data[4 : 4 + n]), (load(rest) if rest else {})


def config_fields(cfg):
    """A `RemotePolicyConfig`'s fields, in order."""
    return {
        "policy_type": cfg.policy_type,
        "pretrained_name_or_path": cfg.pretrained_name_or_path,
        "lerobot_features": cfg.lerobot_features,
        "actions_per_chunk": cfg.actions_per_chunk,
        "device": cfg.device,
        "rename_map": cfg.rename_map,
    }


def safe_config(cfg):
    return safe_pack({"type": "RemotePolicyConfig", **config_fields(cfg)}, None)


def safe_observation(obs):
    import numpy as np
    import torch

    tensors, scalars, numpy_keys = {}, {}, []
    for k, v in obs.get_observation().items():
        if isinstance(v, torch.Tensor):
            tensors[k] = v.contiguous()
        elif isinstance(v, np.ndarray):
            tensors[k] = torch.from_numpy(np.ascontiguousarray(v))
            numpy_keys.append(k)
        else:
            scalars[k] = v
    meta = {
        "type": "TimedObservation",
        "timestamp": obs.get_timestamp(),
        "timestep": obs.get_timestep(),
        "must_go": obs.must_go,
        "scalar_data": scalars,
        "numpy_keys": numpy_keys,
    }
    return safe_pack(meta, tensors or None)


def safe_actions(actions):
    meta = {
        "type": "TimedActions",
        "actions": [{"timestamp": a.get_timestamp(), "timestep": a.get_timestep()} for a in actions],
    }
    return safe_pack(meta, {f"action_{i}": a.get_action().contiguous() for i, a in enumerate(actions)} or None)


def write():
    import lerobot
    import numpy
    import torch
    from lerobot.async_inference.helpers import RemotePolicyConfig, map_robot_keys_to_lerobot_features

    OUT.mkdir(parents=True, exist_ok=True)
    robot = make_robot()
    # RobotClient.__init__: RemotePolicyConfig(policy_type, path, features, actions_per_chunk, device)
    cfg = RemotePolicyConfig(
        "groot", "nvidia/GR00T-N1.7-3B", map_robot_keys_to_lerobot_features(robot), ACTIONS_PER_CHUNK, "cpu"
    )
    first = timed_observation(robot, 0, True)
    later = timed_observation(robot, 12, False)
    scalars = timed_observation(robot, 3, True, numpy_scalars=True)
    files = {
        "policy_config.pkl": pickle.dumps(cfg),
        "observation_must_go.pkl": pickle.dumps(first),
        "observation.pkl": pickle.dumps(later),
        "observation_p5.pkl": pickle.dumps(later, protocol=5),
        "observation_np_scalars.pkl": pickle.dumps(scalars),
        "reply_stock.pkl": pickle.dumps(stock_reply(later)),
        "policy_config.safe": safe_config(cfg),
        "observation_must_go.safe": safe_observation(first),
        "observation.safe": safe_observation(later),
        "reply_stock.safe": safe_actions(stock_reply(later)),
    }
    for name, data in files.items():
        (OUT / name).write_bytes(data)
        print(f"wrote {OUT.relative_to(ROOT) / name}: {len(data)} bytes")

    def obs_json(obs):
        return {
            "timestamp": obs.get_timestamp(),
            "timestep": obs.get_timestep(),
            "must_go": obs.must_go,
            "state": [motor_values(obs.get_timestep())[m] for m in MOTORS],
            "frame_t": obs.get_timestep(),
        }

    expected = {
        "made_by": {
            "lerobot": lerobot.__version__,
            "torch": torch.__version__,
            "numpy": numpy.__version__,
            "python": sys.version.split()[0],
            "pickle_protocol": pickle.DEFAULT_PROTOCOL,
        },
        "frame_byte": "(x // 4 + 2 * (y // 4) + 85 * c + 40 * cam + 7 * t) % 256",
        "cameras": CAMERAS,
        "height": HEIGHT,
        "width": WIDTH,
        "motors": [f"{m}.pos" for m in MOTORS],
        "task": TASK,
        "config": config_fields(cfg),
        "observations": {
            "observation_must_go": obs_json(first),
            "observation": obs_json(later),
            "observation_p5": obs_json(later),
            "observation_np_scalars": obs_json(scalars),
        },
        "reply": {
            "timestamp": later.get_timestamp(),
            "timestep": later.get_timestep(),
            "fps": FPS,
            "actions": reply_values(),
        },
    }
    (OUT / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    print(f"wrote {(OUT / 'expected.json').relative_to(ROOT)}")


def check():
    """Loads what the Rust side made (our reply writer) with the real pickle, torch, safetensors."""
    import torch
    from lerobot.async_inference.helpers import TimedAction

    expected = json.loads((OUT / "expected.json").read_text())["reply"]
    ok = True
    for name in ["reply_gr00t.pkl", "reply_gr00t.safe"]:
        path = OUT / name
        if not path.exists():
            print(f"{name}: missing (run `cargo test -p gr00t --lib lerobot` first)")
            ok = False
            continue
        data = path.read_bytes()
        if name.endswith(".pkl"):
            actions = pickle.loads(data)  # our own bytes, read as the stock robot client does
        else:
            meta, tensors = safe_unpack(data)
            assert meta["type"] == "TimedActions", meta
            actions = [
                TimedAction(timestamp=m["timestamp"], timestep=m["timestep"], action=tensors[f"action_{i}"])
                for i, m in enumerate(meta["actions"])
            ]
        assert isinstance(actions, list) and len(actions) == len(expected["actions"]), name
        for i, a in enumerate(actions):
            assert type(a) is TimedAction, (name, type(a))
            assert isinstance(a.get_action(), torch.Tensor), (name, type(a.get_action()))
            assert a.get_action().dtype == torch.float32, (name, a.get_action().dtype)
            assert a.get_action().device.type == "cpu"
            assert a.get_action().tolist() == expected["actions"][i], (name, i)
            assert a.get_timestep() == expected["timestep"] + i, (name, i)
            assert a.get_timestamp() == expected["timestamp"] + i / expected["fps"], (name, i)
            # what RobotClient._action_tensor_to_action_dict does with it
            assert [a.get_action()[j].item() for j in range(6)] == expected["actions"][i]
        print(f"{name}: {len(actions)} TimedActions, float32 torch tensors, values equal: ok")
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    ensure_lerobot()
    if "--check" not in sys.argv:
        write()
    check()
