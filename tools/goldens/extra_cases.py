"""The cases of tests/fixtures/gr00t_n17_tiny_extra (imported by generate.py --extra).

Everything invented here (frames, states, statistics, configs) is data; every number stored as
a result comes from upstream's `Gr00tPolicy.get_action`.
"""

from __future__ import annotations

import base64
import copy
import json
import shutil
import tempfile
import traceback
from pathlib import Path

import numpy as np

H_LIBERO = 16
H_EEF = 16


# ----------------------------------------------------------------------------------------------
# Invented data
# ----------------------------------------------------------------------------------------------


def f32(x) -> list:
    """float32 values as Python floats (exact), nested lists kept."""
    return np.asarray(x, dtype=np.float32).astype(np.float64).tolist()


def stats(c, hw, mean_shift=0.05, std_frac=0.4):
    """min/max wider than q01/q99, asymmetric; mean/std plausible. Zero hw → zero width."""
    c, hw = np.asarray(c, np.float64), np.asarray(hw, np.float64)
    return {
        "min": f32(c - 1.00 * hw),
        "max": f32(c + 1.10 * hw),
        "mean": f32(c + mean_shift * hw),
        "std": f32(std_frac * hw),
        "q01": f32(c - 0.80 * hw),
        "q99": f32(c + 0.90 * hw),
    }


def per_step(c, hw, horizon, growth=0.25):
    """[H][D] relative statistics whose spread grows with the step."""
    rows = [stats(np.asarray(c) * (1 + t * growth), np.asarray(hw) * (1 + t * growth))
            for t in range(horizon)]
    return {k: [r[k] for r in rows] for k in rows[0]}


def modality(keys, deltas, action_configs=None, mean_std=None):
    return {
        "delta_indices": list(deltas),
        "modality_keys": list(keys),
        "sin_cos_embedding_keys": None,
        "mean_std_embedding_keys": mean_std,
        "action_configs": action_configs,
    }


def absolute():
    return {"rep": "ABSOLUTE", "type": "NON_EEF", "format": "DEFAULT", "state_key": None}


LIBERO_STATE = ["x", "y", "z", "roll", "pitch", "yaw", "gripper"]
LIBERO_ACTION = ["x", "y", "z", "roll", "pitch", "yaw", "gripper"]


def libero_config():
    return {
        "video": modality(["image", "wrist_image"], [0]),
        "state": modality(LIBERO_STATE, [0]),
        "action": modality(LIBERO_ACTION, range(H_LIBERO), [absolute() for _ in LIBERO_ACTION],
                           mean_std=["gripper"]),
        "language": modality(["annotation.human.action.task_description"], [0]),
    }


def libero_stats():
    st = {
        "x": stats([-0.05], [0.25]), "y": stats([0.0], [0.3]), "z": stats([1.05], [0.2]),
        # LIBERO's "roll/pitch/yaw" are quat2axisangle components; roll sits near pi.
        "roll": stats([3.0], [0.4]), "pitch": stats([0.0], [0.5]), "yaw": stats([0.0], [0.5]),
        "gripper": stats([0.02, -0.02], [0.02, 0.02]),
    }
    ac = {k: stats([0.0], [0.9]) for k in ["x", "y", "z", "roll", "pitch", "yaw"]}
    ac["gripper"] = stats([0.0], [1.0], mean_shift=0.12, std_frac=0.93)
    return {"state": st, "action": ac}


EEF_STATE = ["eef_pose", "gripper"]


def eef_config():
    return {
        "video": modality(["front"], [0]),
        "state": modality(EEF_STATE, [0]),
        "action": modality(
            EEF_STATE, range(H_EEF),
            [{"rep": "RELATIVE", "type": "EEF", "format": "DEFAULT", "state_key": "eef_pose"},
             absolute()]),
        "language": modality(["annotation.human.task_description"], [0]),
    }


def eef_stats(horizon=H_EEF):
    # Flat row-major 4x4: rotation block entries in [-1, 1], translation in metres, bottom row
    # [0, 0, 0, 1] with zero width (normalises to 0; the relative one decodes to its min).
    c = np.zeros(16)
    hw = np.full(16, 0.95)
    c[[3, 7, 11]] = [0.45, 0.0, 0.30]
    hw[[3, 7, 11]] = [0.25, 0.30, 0.20]
    c[12:] = [0, 0, 0, 1]
    hw[12:] = 0
    rc = np.zeros(16)
    rhw = np.full(16, 0.03)
    rc[[0, 5, 10]] = 0.995
    rhw[[0, 5, 10]] = 0.006
    rc[[3, 7, 11]] = [0.004, -0.002, 0.003]
    rhw[[3, 7, 11]] = 0.012
    rc[12:] = [0, 0, 0, 1]
    rhw[12:] = 0
    rows = [stats(rc, rhw * (1 + 0.25 * t)) for t in range(horizon)]
    rel = {k: [r[k] for r in rows] for k in rows[0]}
    return {
        "state": {"eef_pose": stats(c, hw), "gripper": stats([0.04], [0.04])},
        "action": {"eef_pose": stats(c, hw), "gripper": stats([0.04], [0.04])},
        "relative_action": {"eef_pose": rel},
    }


def rot_xyz(a, b, c):
    from scipy.spatial.transform import Rotation

    return Rotation.from_euler("xyz", [a, b, c]).as_matrix()


def pose16(R, t):
    T = np.eye(4)
    T[:3, :3] = R
    T[:3, 3] = t
    return T.reshape(-1)


def scene(w, h, seed, wrist=False):
    """A synthetic RGB8 frame: gradient wall, table, shaded boxes, disc, checker, noise patch."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.zeros((h, w, 3), np.float32)
    base = rng.uniform(90, 200, 3)
    img[:] = base + (y / h)[..., None] * rng.uniform(-40, 40, 3) + (x / w)[..., None] * 25
    horizon = int(h * rng.uniform(0.45, 0.6))
    table = rng.uniform(60, 170, 3)
    img[horizon:] = table + ((y[horizon:] - horizon) / h)[..., None] * 30
    img[horizon:] += (np.sin(x[horizon:] * 0.35) * 6)[..., None]
    for _ in range(3):
        bw, bh = int(w * rng.uniform(0.08, 0.2)), int(h * rng.uniform(0.08, 0.2))
        x0 = int(rng.uniform(0, w - bw))
        y0 = int(rng.uniform(horizon - bh // 2, h - bh))
        col = rng.uniform(20, 235, 3)
        sh = np.clip(1 - ((x - x0 - bw / 2) ** 2 / (bw * 1.2) ** 2
                          + (y - y0 - bh) ** 2 / (bh * 0.5) ** 2), 0, 1)
        img *= (1 - 0.35 * sh)[..., None]
        shade = 1 - 0.3 * (y[y0:y0 + bh, x0:x0 + bw] - y0) / bh
        img[y0:y0 + bh, x0:x0 + bw] = col * shade[..., None]
    cx, cy, r = w * rng.uniform(0.3, 0.7), h * rng.uniform(0.6, 0.85), min(w, h) * 0.09
    d = np.sqrt((x - cx) ** 2 + (y - cy) ** 2)
    a = np.clip(r - d + 0.5, 0, 1)[..., None]
    img = img * (1 - a) + a * rng.uniform(30, 230, 3)
    # sharp checker patch and a thin cable line
    s = max(4, min(w, h) // 40)
    x0, y0 = int(w * 0.72), int(h * 0.12)
    chk = (((x[y0:y0 + 4 * s, x0:x0 + 4 * s] - x0) // s + (y[y0:y0 + 4 * s, x0:x0 + 4 * s] - y0) // s) % 2)
    img[y0:y0 + 4 * s, x0:x0 + 4 * s] = (chk * 255)[..., None]
    line = np.abs((y - horizon * 0.9) - (x - w / 3) * 0.3) < 1.0
    img[line] = [25, 25, 25]
    if wrist:
        fw = int(w * 0.12)
        img[int(h * 0.7):, int(w * 0.2):int(w * 0.2) + fw] = [30, 30, 35]
        img[int(h * 0.7):, int(w * 0.8) - fw:int(w * 0.8)] = [30, 30, 35]
    py, px = int(h * 0.3), int(w * 0.1)
    img[py:py + 12, px:px + 12] += rng.normal(0, 12, (12, 12, 3))
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


# ----------------------------------------------------------------------------------------------
# Cases
# ----------------------------------------------------------------------------------------------

LIBERO_TAG = "libero_sim"
EEF_TAG = "new_embodiment"

R1 = rot_xyz(3.05, 0.12, -0.4)
R2 = rot_xyz(-2.9, -0.35, 1.1)
R2_skewed = R2.copy()
R2_skewed[0] *= 1.03
R2_skewed[1] = 0.98 * R2_skewed[1] + 0.02 * R2_skewed[2]

CASES = [
    {
        "name": "case_libero_sim_1", "checkpoint": "checkpoint", "tag": LIBERO_TAG,
        "instruction": "put both the alphabet soup and the tomato sauce in the basket",
        "frames": {"image": (256, 256, 11, False), "wrist_image": (256, 256, 12, True)},
        "state": {"x": [-0.08], "y": [0.11], "z": [1.12], "roll": [3.02], "pitch": [-0.15],
                  "yaw": [0.2], "gripper": [0.031, -0.029]},
        "noise_seed": 5701,
        "note": "in-range state; two 256x256 views; gripper action mean/std (unclipped)",
    },
    {
        "name": "case_libero_sim_2", "checkpoint": "checkpoint", "tag": LIBERO_TAG,
        "instruction": "Open the TOP drawer of the cabinet, then put the bowl inside!",
        "frames": {"image": (256, 256, 21, False), "wrist_image": (256, 256, 22, True)},
        "state": {"x": [0.31], "y": [-0.2], "z": [0.78], "roll": [3.5], "pitch": [0.1],
                  "yaw": [-0.61], "gripper": [0.052, -0.001]},
        "noise_seed": 5702,
        "note": "x, roll above q99, z, yaw below q01, gripper[0] above and gripper[1] above q99 "
                "-> clipped; upper case, ',' and '!'",
    },
    {
        "name": "case_new_embodiment_eef4x4_1", "checkpoint": "checkpoint", "tag": EEF_TAG,
        "instruction": "pick up the marker and drop it in the cup",
        "frames": {"front": (320, 240, 31, False)},
        "state": {"eef_pose": pose16(R1, [0.42, 0.05, 0.28]), "gripper": [0.03]},
        "noise_seed": 6701,
        "note": "eef_pose = flat row-major 4x4 (RELATIVE / EEF / DEFAULT); translation and "
                "gripper in range, the rotation diagonal (0.93-0.99) above q99 0.855 -> clipped "
                "in proc.state; bottom row zero-width -> 0",
    },
    {
        "name": "case_new_embodiment_eef4x4_2", "checkpoint": "checkpoint", "tag": EEF_TAG,
        "instruction": "Wipe the TABLE with the sponge; twice.",
        "frames": {"front": (320, 240, 41, False)},
        "state": {"eef_pose": pose16(R2_skewed, [0.81, -0.12, 0.02]), "gripper": [-0.01]},
        "noise_seed": 6702,
        "note": "state rotation block not orthonormal (row 0 x1.03, row 1 skewed): upstream "
                "re-projects it with scipy Rotation.from_matrix; translation x above q99, z below "
                "q01, gripper below q01 -> clipped in proc.state (raw pose is the reference)",
    },
    {
        "name": "case_letterbox_1", "checkpoint": "checkpoint_letterbox", "tag": LIBERO_TAG,
        "instruction": "stack the red block on the blue block",
        "frames": {"image": (240, 320, 51, False), "wrist_image": (320, 180, 52, True)},
        "state": {"x": [0.02], "y": [-0.05], "z": [1.0], "roll": [2.9], "pitch": [0.2],
                  "yaw": [0.1], "gripper": [0.01, -0.01]},
        "noise_seed": 7701,
        "note": "letter_box_transform: true (albumentations): portrait 240x320 and 320x180 views "
                "padded to squares first",
        "image_taps": True,
    },
    {
        "name": "case_torchvision_1", "checkpoint": "checkpoint_torchvision", "tag": LIBERO_TAG,
        "instruction": "Turn on the stove.",
        "frames": {"image": (240, 320, 61, False), "wrist_image": (320, 180, 62, True)},
        "state": {"x": [-0.1], "y": [0.2], "z": [1.1], "roll": [3.1], "pitch": [-0.3],
                  "yaw": [0.3], "gripper": [0.035, -0.033]},
        "noise_seed": 7702,
        "note": "use_albumentations: false (torchvision Resize(256x256) -> CenterCrop(230) -> "
                "Resize(256x256), bilinear + antialias); portrait and 16:9 views",
        "image_taps": True,
    },
]


def base_kwargs(tiny_ckpt: Path) -> dict:
    return json.loads((tiny_ckpt / "processor_config.json").read_text())["processor_kwargs"]


def checkpoint_files(tiny_ckpt: Path, variant: str) -> dict[str, object]:
    kw = base_kwargs(tiny_ckpt)
    kw["modality_configs"] = {LIBERO_TAG: libero_config(), EEF_TAG: eef_config()}
    if variant == "checkpoint_letterbox":
        kw["letter_box_transform"] = True
    elif variant == "checkpoint_torchvision":
        kw["use_albumentations"] = False
    return {
        "processor_config.json": {"processor_class": "Gr00tN1d7Processor", "processor_kwargs": kw},
        "statistics.json": {LIBERO_TAG: libero_stats(), EEF_TAG: eef_stats()},
        "embodiment_id.json": {LIBERO_TAG: 2, EEF_TAG: 10},
    }


def assemble(tiny_ckpt: Path, files_dir: Path, dst: Path) -> Path:
    """What crates/gr00t-fixtures does in Rust: tiny model files + this variant's JSON files."""
    dst.mkdir(parents=True, exist_ok=True)
    for name in ["config.json", "model.safetensors"]:
        shutil.copy(tiny_ckpt / name, dst / name)
    shutil.copytree(tiny_ckpt / "backbone", dst / "backbone", dirs_exist_ok=True)
    for f in files_dir.iterdir():
        shutil.copy(f, dst / f.name)
    return dst


# ----------------------------------------------------------------------------------------------
# JSON with shortest float32 decimals
# ----------------------------------------------------------------------------------------------


def _f32_repr(x: float) -> str:
    """Shortest decimal that parses back to the same float32 (numpy's unique repr)."""
    return str(np.float32(x))


def dump_f32(obj) -> str:
    """JSON text; float lists printed as the shortest decimal that parses back to the f32."""

    def enc(o):
        if isinstance(o, float):
            return _f32_repr(o)
        if isinstance(o, dict):
            return "{" + ", ".join(f"{json.dumps(k)}: {enc(v)}" for k, v in o.items()) + "}"
        if isinstance(o, (list, tuple)):
            return "[" + ", ".join(enc(v) for v in o) + "]"
        return json.dumps(o, ensure_ascii=False)

    return enc(obj) + "\n"


# ----------------------------------------------------------------------------------------------
# Generation
# ----------------------------------------------------------------------------------------------


def case_layouts(case, statistics, kw):
    st = statistics[case["tag"]]
    cfg = kw["modality_configs"][case["tag"]]
    lo, hi = ("q01", "q99") if kw["use_percentiles"] else ("min", "max")
    state_layout, off, outside = [], 0, []
    ms = cfg["state"]["mean_std_embedding_keys"] or []
    for k in cfg["state"]["modality_keys"]:
        s = st["state"][k]
        d = len(s[lo])
        enc = ("mean_std: (x - mean) / std, not clipped" if k in ms else
               f"min_max: 2 (x - {lo}) / ({hi} - {lo}) - 1, clipped to [-1, 1]; 0 where {lo} == {hi}")
        state_layout.append({"key": k, "offset": off, "width": d, "raw_dim": d, "encoding": enc})
        off += d
        v = np.asarray(case["state"][k], np.float32)
        for i in range(d):
            if k not in ms and (v[i] < s[lo][i] or v[i] > s[hi][i]):
                outside.append({"key": k, "index": i, "value": float(v[i]),
                                "bounds": [s[lo][i], s[hi][i]],
                                "treatment": f"min/max normalised with {lo}/{hi} then clipped"})
            if k not in ms and np.isclose(s[hi][i], s[lo][i]):
                outside.append({"key": k, "index": i, "value": float(v[i]),
                                "bounds": [s[lo][i], s[hi][i]],
                                "treatment": "zero-width entry: normalises to 0"})
    action_layout, off = [], 0
    ams = cfg["action"]["mean_std_embedding_keys"] or []
    for k, ac in zip(cfg["action"]["modality_keys"], cfg["action"]["action_configs"]):
        d = len(st["action"][k][lo])
        rel = ac["rep"] == "RELATIVE" and kw["use_relative_action"]
        src = "relative_action" if rel else "action"
        how = (f"{src} mean/std: n * std + mean, not clipped" if k in ams else
               ("relative_action min/max per step [H][D]" if rel else f"action {lo}/{hi}")
               + ", after clip(-1, 1)")
        action_layout.append({"key": k, "offset": off, "width": d, **ac, "unnormalise_with": how})
        off += d
    return state_layout, action_layout, outside


def crop_of(h, w, frac):
    ch, cw = max(1, int(h * frac)), max(1, int(w * frac))
    y0, x0 = (h - ch) // 2, (w - cw) // 2
    return {"in_hw": [h, w], "x0y0x1y1": [x0, y0, x0 + cw, y0 + ch]}


def write_case(out: Path, case: dict, policy_cfg, kw) -> tuple[dict, np.ndarray]:
    """PNGs, observation.json, request.json. Returns (observation from the files, noise)."""
    from PIL import Image

    d = out / case["name"]
    d.mkdir(parents=True, exist_ok=True)
    video_cfg = kw["modality_configs"][case["tag"]]["video"]
    video = {}
    for key in video_cfg["modality_keys"]:
        w, h, seed, wrist = case["frames"][key]
        files = []
        for delta in video_cfg["delta_indices"]:
            name = f"{key}_{delta}.png"
            Image.fromarray(scene(w, h, seed, wrist)).save(d / name, optimize=True)
            files.append(name)
        video[key] = files
    noise = np.random.default_rng(case["noise_seed"]).standard_normal((40, 132), dtype=np.float32)
    state = {k: f32(v) for k, v in case["state"].items()}
    lang_key = kw["modality_configs"][case["tag"]]["language"]["modality_keys"][0]
    obs_j = {"embodiment_tag": case["tag"], "language_key": lang_key,
             "instruction": case["instruction"], "video": video, "state": state,
             "noise_seed": case["noise_seed"], "noise": f32(noise)}
    (d / "observation.json").write_text(dump_f32(obs_j))
    req = {"embodiment": case["tag"],
           "images": {k: [base64.b64encode((d / f).read_bytes()).decode("ascii") for f in fs]
                      for k, fs in video.items()},
           "state": state, "instruction": case["instruction"], "noise": f32(noise)}
    (d / "request.json").write_text(dump_f32(req))
    return d


def generate(out: Path, backbone: Path, g) -> int:
    """Writes the extra fixture folder; returns 0 on success."""
    tiny_ckpt = g.TINY / "checkpoint"
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gr00t-extra-"))
    variants = sorted({c["checkpoint"] for c in CASES})
    ckpts = {}
    for v in variants:
        vd = out / v
        vd.mkdir(parents=True, exist_ok=True)
        for name, content in checkpoint_files(tiny_ckpt, v).items():
            (vd / name).write_text(json.dumps(content, indent=2) + "\n")
        ckpts[v] = assemble(tiny_ckpt, vd, work / v)
    summary = {"versions": versions(), "upstream_repository": g.UPSTREAM_REPO,
               "upstream_commit": g.PINNED_COMMIT, "cases": [], "upstream_refusals": []}
    policies = {}
    rc = 0
    for case in CASES:
        key = (case["checkpoint"], case["tag"])
        if key not in policies:
            policies[key] = g.load_policy(ckpts[case["checkpoint"]], case["tag"], backbone)
        policy = policies[key]
        kw = json.loads((out / case["checkpoint"] / "processor_config.json").read_text())[
            "processor_kwargs"]
        statistics = json.loads((out / case["checkpoint"] / "statistics.json").read_text())
        d = write_case(out, case, None, kw)
        obs, noise = g.multi_case(policy, d)
        strict_refusal = None
        try:
            taps, actions = g.run_case(policy, obs, noise)
        except Exception as e:  # an upstream refusal is a result too
            strict_refusal = refusal(f"{case['name']} (strict=True)", e)
            strict_refusal["outcome"] = "refused"
            summary["upstream_refusals"].append(strict_refusal)
            print(f"{case['name']}: strict upstream refused: {e!r}; rerun with strict=False")
            key = key + ("lenient",)
            if key not in policies:
                policies[key] = g.load_policy(ckpts[case["checkpoint"]], case["tag"], backbone,
                                              strict=False)
            policy = policies[key]
            taps, actions = g.run_case(policy, obs, noise)
        # Replay from request.json: must be bit-identical.
        obs2, noise2 = replay_from_request(policy, d, g)
        taps2, actions2 = g.run_case(policy, obs2, noise2)
        for k in actions:
            assert np.array_equal(actions[k], actions2[k]), f"{case['name']}: replay differs {k}"
        keep = ["head.action_pred", "proc.state", "proc.input_ids", "proc.image_grid_thw",
                "proc.embodiment_id"]
        if case.get("image_taps"):
            keep.append("proc.images_after_aug_u8")
        outputs = {k: np.ascontiguousarray(taps[k]) for k in keep}
        for k, v in actions.items():
            outputs[f"action.{k}"] = np.ascontiguousarray(v.astype(np.float32))
        for k in policy.modality_configs["action"].modality_keys:
            outputs[f"decode.unnormalized.{k}"] = np.ascontiguousarray(
                taps[f"decode.unnormalized.{k}"])
        text = taps_prompt(policy, taps)
        formal = formalize(case["instruction"])
        meta = {"prompt_text": text, "instruction": case["instruction"],
                "instruction_formalized": formal, "embodiment_tag": case["tag"]}
        save_if_changed(outputs, d / "outputs.safetensors", meta)
        info = case_info(case, kw, statistics, taps, outputs, text, formal, policy)
        if strict_refusal:
            info["strict_refusal"] = strict_refusal
            info["policy_strict"] = False
        (d / "case_info.json").write_text(json.dumps(info, indent=1, ensure_ascii=False) + "\n")
        entry = {k: info[k] for k in (
            "name", "checkpoint", "embodiment_tag", "projector_index", "seq_len",
            "num_image_tokens", "action_horizon", "action_dims")}
        entry["image_grid_thw"] = info["images"]["image_grid_thw"]
        summary["cases"].append(entry)
        print(f"{case['name']}: seq_len {info['seq_len']}, actions "
              + ", ".join(f"{k} {list(v.shape)}" for k, v in actions.items()))
    summary["upstream_refusals"] += refusals(ckpts, backbone, g, out, work)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return rc


def save_if_changed(tensors: dict, path: Path, meta: dict) -> None:
    """safetensors writes its metadata map in no fixed order: keep an equal file's bytes."""
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    if path.exists():
        old = load_file(str(path))
        with safe_open(str(path), "np") as f:
            old_meta = f.metadata()
        if (old.keys() == tensors.keys() and old_meta == meta
                and all(old[k].dtype == tensors[k].dtype and np.array_equal(old[k], tensors[k])
                        for k in old)):
            return
    save_file(tensors, str(path), metadata=meta)


def formalize(text: str) -> str:
    import re

    return re.sub(r"[^\w\s]", "", text.lower())


def taps_prompt(policy, taps) -> str:
    ids = taps["proc.input_ids"][0].tolist()
    tok = policy.processor.processor.tokenizer
    text = tok.decode(ids, skip_special_tokens=False)
    # collapse the expanded image pads back to one per image, as the chat template writes it
    import re

    return re.sub(r"(<\|image_pad\|>)+", "<|image_pad|>", text)


def replay_from_request(policy, d: Path, g):
    req = json.loads((d / "request.json").read_text())
    frames = {k: [g.decode_b64_png(s) for s in v] for k, v in req["images"].items()}
    obs = g.build_obs(policy, frames, req["state"], req["instruction"])
    return obs, np.asarray(req["noise"], np.float32)


def case_info(case, kw, statistics, taps, outputs, text, formal, policy):
    state_layout, action_layout, outside = case_layouts(case, statistics, kw)
    grid = taps["proc.image_grid_thw"].tolist()
    n_img_tokens = int(sum(t * h * w for t, h, w in grid) // 4)
    vcfg = kw["modality_configs"][case["tag"]]["video"]
    frame_wh = {k: list(case["frames"][k][:2]) for k in vcfg["modality_keys"]}
    aug = taps["proc.images_after_aug_u8"]
    images = {"order": "time-major: for each delta index, every video key in config order",
              "frame_wh": frame_wh, "after_augmentation_hw": list(aug.shape[2:]),
              "image_grid_thw": grid}
    if taps.get("proc.qwen_resized_u8") is not None:
        images["qwen_resized_hw"] = list(taps["proc.qwen_resized_u8"].shape[2:])
    if kw["use_albumentations"]:
        crops = []
        for k in vcfg["modality_keys"]:
            w, h = case["frames"][k][:2]
            if kw["letter_box_transform"]:
                w = h = max(w, h)
            s = kw["shortest_image_edge"] / min(w, h)
            hh, ww = (kw["shortest_image_edge"], int(round(w * s))) if h <= w else \
                (int(round(h * s)), kw["shortest_image_edge"])
            crops.append(crop_of(hh, ww, kw["crop_fraction"]))
        images["chain"] = (("LetterBoxPad (cv2 copyMakeBorder, black, centred) -> " if
                            kw["letter_box_transform"] else "")
                           + "SmallestMaxSize(256, INTER_AREA) -> FractionalCenterCrop(0.95) -> "
                             "SmallestMaxSize(256, INTER_AREA)")
        images["crop"] = crops
    else:
        images["chain"] = ("torchvision v2: ToImage -> Resize(image_target_size) -> "
                           "CenterCrop(image_crop_size) -> Resize(image_target_size) "
                           f"(target {kw['image_target_size']}, crop {kw['image_crop_size']})")
    H = len(kw["modality_configs"][case["tag"]]["action"]["delta_indices"])
    return {
        "name": case["name"], "checkpoint": case["checkpoint"], "embodiment_tag": case["tag"],
        "projector_index": int(taps["proc.embodiment_id"].reshape(-1)[0]),
        "note": case["note"], "state_outside_bounds": outside,
        "instruction": case["instruction"], "instruction_formalized": formal,
        "prompt_text": text, "seq_len": int(taps["proc.input_ids"].shape[1]),
        "num_image_tokens": n_img_tokens, "images": images,
        "state_layout": state_layout, "action_layout": action_layout, "action_horizon": H,
        "state_width_after_processing": sum(s["width"] for s in state_layout),
        "action_dims": {a["key"]: a["width"] for a in action_layout},
        "noise_seed": case["noise_seed"],
        "noise_recipe": "np.random.default_rng(noise_seed).standard_normal((40, 132), dtype=np.float32)",
        "outputs": {k: [list(v.shape), str(v.dtype)] for k, v in outputs.items()},
    }


def refusal(what, e) -> dict:
    tb = traceback.extract_tb(e.__traceback__)
    up = [f for f in tb if "/gr00t/" in f.filename]
    where = up[-1] if up else tb[-1]
    return {"what": what, "exception": type(e).__name__, "message": str(e).split("\n")[0],
            "raised_in": f"{where.filename.split('/gr00t/', 1)[-1] if '/gr00t/' in where.filename else where.filename}:{where.lineno} ({where.name})",
            "code": where.line}


def refusals(ckpts, backbone, g, out, work) -> list:
    """Upstream behaviours the Rust side must refuse too, recorded with upstream's message."""
    res = []
    tiny_ckpt = g.TINY / "checkpoint"
    case = next(c for c in CASES if c["name"] == "case_new_embodiment_eef4x4_1")
    d = out / case["name"]
    for label, H in (("relative_action stats with H+1 rows", H_EEF + 1),
                     ("relative_action stats with H-1 rows", H_EEF - 1)):
        vd = work / f"refusal_{H}"
        files = checkpoint_files(tiny_ckpt, "checkpoint")
        files["statistics.json"][EEF_TAG]["relative_action"] = eef_stats(H)["relative_action"]
        vd.mkdir(parents=True, exist_ok=True)
        for name, content in files.items():
            (vd / name).write_text(json.dumps(content))
        ck = assemble(tiny_ckpt, vd, work / f"refusal_ckpt_{H}")
        try:
            policy = g.load_policy(ck, EEF_TAG, backbone)
            obs, noise = g.multi_case(policy, d)
            g.run_case(policy, obs, noise)
            res.append({"what": label, "outcome": "accepted"})
        except Exception as e:
            r = refusal(label, e)
            r["outcome"] = "refused"
            res.append(r)
        print(f"{label}: {res[-1]}")
    return res


def versions() -> dict:
    import importlib.metadata as md
    import platform

    out = {"python": platform.python_version()}
    for p in ["torch", "torchvision", "transformers", "tokenizers", "numpy", "scipy",
              "opencv-python-headless", "albumentations", "albucore", "diffusers", "peft",
              "einops", "safetensors", "Pillow", "dm-tree", "huggingface_hub"]:
        try:
            out[p] = md.version(p)
        except md.PackageNotFoundError:
            pass
    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    out["cpu"] = cpu
    return out
