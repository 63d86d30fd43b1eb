#!/usr/bin/env python3
"""Writes the fuzz seed corpora under fuzz/corpus/<target>/ from the bundled fixtures
(request.json bodies, PNG frames) plus msgpack observations built like the Python peers'
clients (needs numpy + msgpack). Run from the repository root: python3 fuzz/seed_corpus.py"""
import glob, io, json, os
import msgpack, numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests/fixtures/gr00t_n17_tiny")
OUT = os.path.join(ROOT, "fuzz/corpus")

def put(target, name, data):
    d = os.path.join(OUT, target); os.makedirs(d, exist_ok=True)
    open(os.path.join(d, name), "wb").write(data)

for case in sorted(glob.glob(FIX + "/case*")):
    c = os.path.basename(case)
    body = open(case + "/request.json", "rb").read()
    put("request_json", c + ".json", body)
    req = json.loads(body)
    req.pop("noise"); req["seed"] = 7
    put("request_json", c + "_seed.json", json.dumps(req).encode())
    for png in sorted(glob.glob(case + "/*.png")):
        put("image_decode", c + "_" + os.path.basename(png), open(png, "rb").read())

try:  # JPEG, gray and RGBA variants of one fixture frame (PIL optional)
    from PIL import Image
    im = Image.open(FIX + "/case0/exterior_image_1_left_t0.png")
    for name, img, fmt, kw in (("case0_ext.jpg", im, "JPEG", {"quality": 80}),
                               ("case0_gray.png", im.convert("L"), "PNG", {}),
                               ("case0_rgba.png", im.convert("RGBA"), "PNG", {}),
                               ("small.jpg", im.resize((32, 18)), "JPEG", {"quality": 50, "progressive": True})):
        b = io.BytesIO(); img.save(b, fmt, **kw); put("image_decode", name, b.getvalue())
except ImportError:
    pass

def npy(a):
    b = io.BytesIO(); np.save(b, a, allow_pickle=False); return b.getvalue()

def gr00t(a):  # Isaac-GR00T MsgSerializer form
    return {"__ndarray_class__": True, "as_npy": npy(a)}

def openpi(a):  # openpi msgpack_numpy form
    return {b"__ndarray__": True, b"data": a.tobytes(), b"dtype": a.dtype.str, b"shape": list(a.shape)}

H, W = 18, 32  # 16:9, small so mutations stay fast
rng = np.random.default_rng(0)
vid = lambda b, t: rng.integers(0, 256, (b, t, H, W, 3), dtype=np.uint8)
st = lambda b, d: rng.standard_normal((b, 1, d)).astype(np.float32)
lang = "annotation.language.language_instruction"
for b in (1, 2):
    nested = {"video": {"exterior_image_1_left": gr00t(vid(b, 2)), "wrist_image_left": gr00t(vid(b, 2))},
              "state": {"eef_9d": gr00t(st(b, 9)), "gripper_position": gr00t(st(b, 1)),
                        "joint_position": gr00t(st(b, 7))},
              "language": {lang: [["pick up the block"]] * b}}
    put("zmq_msgpack", f"nested_b{b}.msgpack", msgpack.packb(
        {"endpoint": "get_action", "data": {"observation": nested, "options": {"seed": 3}}, "api_token": "t"}))
    flat = {"video.exterior_image_1_left": gr00t(vid(b, 2)), "video.wrist_image_left": gr00t(vid(b, 2)),
            "state.eef_9d": gr00t(st(b, 9)), "state.gripper_position": gr00t(st(b, 1)),
            "state.joint_position": gr00t(st(b, 7)), lang: ["pick up the block"] * b}
    put("zmq_msgpack", f"flat_b{b}.msgpack", msgpack.packb({"endpoint": "get_action", "data": {"observation": flat}}))
put("zmq_msgpack", "ping.msgpack", msgpack.packb({"endpoint": "ping"}))
put("zmq_msgpack", "raw.npy", npy(np.arange(12, dtype=np.float32).reshape(3, 4)))
put("zmq_msgpack", "raw_f.npy", npy(np.asfortranarray(np.arange(12, dtype=np.int16).reshape(3, 4))))

for name, two in (("pair", True), ("single", False)):
    img = lambda: rng.integers(0, 256, ((2,) if two else ()) + (H, W, 3), dtype=np.uint8)
    obs = {"observation/exterior_image_1_left": openpi(img()), "observation/wrist_image_left": openpi(img()),
           "observation/joint_position": openpi(rng.standard_normal(7)),
           "observation/gripper_position": openpi(rng.standard_normal(1)),
           "prompt": "pick up the block"}
    if two:
        obs["observation/eef_9d"] = [0.1] * 9
    else:
        obs["observation/cartesian_position"] = openpi(rng.standard_normal(6))
    put("ws_msgpack", name + ".msgpack", msgpack.packb(obs))

# ZMTP: a connection's bytes as libzmq's REQ writes them (captured from pyzmq against a bare
# socket that answers with a REP greeting and READY), else built by hand from RFC 23/37.
def frame(data, more=False, command=False):
    flags = (1 if more else 0) | (4 if command else 0)
    if len(data) > 255:
        return bytes([flags | 2]) + len(data).to_bytes(8, "big") + data
    return bytes([flags, len(data)]) + data

def command(name, body=b""):
    return frame(bytes([len(name)]) + name + body, command=True)

def ready(socket_type):
    prop = bytes([11]) + b"Socket-Type" + len(socket_type).to_bytes(4, "big") + socket_type
    return command(b"READY", prop)

GREETING = b"\xff" + b"\0" * 7 + b"\x01\x7f\x03\x01NULL" + b"\0" * 16 + b"\0" + b"\0" * 31
ping = msgpack.packb({"endpoint": "ping"})
hand = GREETING + ready(b"REQ") + frame(b"", more=True) + frame(ping)
put("zmtp_framing", "req_ping.bin", b"\x05" + hand)
put("zmtp_framing", "req_ping_pong.bin", b"\x00" + hand + command(b"PING", b"\x00\x0actx"))
put("zmtp_framing", "long_frame.bin", b"\x03" + GREETING + ready(b"DEALER") + frame(b"x" * 300))
put("zmtp_framing", "terabyte.bin", b"\x01" + GREETING + b"\x02" + (1 << 40).to_bytes(8, "big"))
try:
    import socket, threading, zmq
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
    got = bytearray()
    def serve():
        c, _ = srv.accept(); c.settimeout(2)
        c.sendall(GREETING + ready(b"REP"))
        try:
            while len(got) < 64 + 64 + len(ping):
                b = c.recv(65536)
                if not b:
                    break
                got.extend(b)
        except OSError:
            pass
        c.close()
    t = threading.Thread(target=serve); t.start()
    ctx = zmq.Context(); req = ctx.socket(zmq.REQ); req.setsockopt(zmq.LINGER, 0)
    req.connect("tcp://127.0.0.1:%d" % srv.getsockname()[1]); req.send(ping)
    t.join(5); req.close(); ctx.term()
    if got:
        put("zmtp_framing", "pyzmq_req_ping.bin", b"\x07" + bytes(got))
except ImportError:
    pass
# Pickles as LeRobot's payloads look (plain values, numpy frames and state) in every protocol the
# reader runs; the reader must refuse or read each, never run it.
import pickle
frame = np.arange(2 * 4 * 3, dtype=np.uint8).reshape(2, 4, 3)
obs = {"observation.state": np.zeros(6, np.float32), "observation.images.front": frame,
       "task": "pick the cube", "timestep": 3, "timestamp": 1.5, "must_go": True}
for proto in (2, 3, 4, 5):
    put("lerobot_pickle", "obs_p%d.pkl" % proto, pickle.dumps(obs, protocol=proto))
    put("lerobot_pickle", "list_p%d.pkl" % proto,
        pickle.dumps([[1, 2.5, None, b"x", "y", 2 ** 70], (1,)], protocol=proto))
put("lerobot_pickle", "forged_os_system.pkl", b"cos\nsystem\n(S'echo hi'\ntR.")
# The bytes lerobot 0.4.4 itself wrote (tools/lerobot/make_fixtures.py), both forms.
LEROBOT = os.path.join(ROOT, "tests/fixtures/lerobot")
for name in sorted(os.listdir(LEROBOT)):
    if name.endswith((".pkl", ".safe")):
        put("lerobot_pickle", name, open(os.path.join(LEROBOT, name), "rb").read())
# Small ones of the same shape: stand-ins of LeRobot's dataclasses under their module's name
# pickle to the same opcodes, with 8x8 frames so that the fuzzer mutates them fast.
import dataclasses, sys, types
helpers = types.ModuleType("lerobot.async_inference.helpers")
@dataclasses.dataclass
class TimedObservation:
    timestamp: float; timestep: int; observation: dict; must_go: bool = False
@dataclasses.dataclass
class RemotePolicyConfig:
    policy_type: str; pretrained_name_or_path: str; lerobot_features: dict
    actions_per_chunk: int; device: str = "cpu"; rename_map: dict = dataclasses.field(default_factory=dict)
for cls in (TimedObservation, RemotePolicyConfig):
    cls.__module__ = helpers.__name__; setattr(helpers, cls.__name__, cls)
for parent in ("lerobot", "lerobot.async_inference"):
    sys.modules.setdefault(parent, types.ModuleType(parent))
sys.modules[helpers.__name__] = helpers
small = {"shoulder_pan.pos": 1.5, "gripper.pos": np.float32(2.0),
         "front": np.arange(8 * 8 * 3, dtype=np.uint8).reshape(8, 8, 3), "task": "pick"}
for proto in (2, 4, 5):
    put("lerobot_pickle", "small_obs_p%d.pkl" % proto,
        pickle.dumps(TimedObservation(1.25, 3, small, True), protocol=proto))
put("lerobot_pickle", "small_config.pkl", pickle.dumps(RemotePolicyConfig(
    "groot", "x", {"observation.state": {"dtype": "float32", "shape": (2,), "names": ["a", "b"]},
                   "observation.images.front": {"dtype": "image", "shape": (8, 8, 3),
                                                "names": ["height", "width", "channels"]}}, 8)))
print("corpora written to", OUT)
