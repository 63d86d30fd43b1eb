#!/usr/bin/env python3
"""Golden generator: runs NVIDIA's own N1.7 inference code on the tiny random checkpoints.

Run by hand (never by CI); see README.md next to this file. The upstream tree is imported from
outside the repository (``--upstream`` / ``GR00T_UPSTREAM``, default /work/isaac-gr00t); nothing
of it is copied here.

  generate.py --check            regenerate the bundled DROID and multi cases in a temp dir and
                                 compare every stored tap with the bundled one
  generate.py --extra [--out D]  (re)write tests/fixtures/gr00t_n17_tiny_extra
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import copy
import io
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
TINY = FIXTURES / "gr00t_n17_tiny"
MULTI = FIXTURES / "gr00t_n17_tiny_multi"
EXTRA = FIXTURES / "gr00t_n17_tiny_extra"
DEFAULT_UPSTREAM = "/work/isaac-gr00t"
PINNED_COMMIT = "c2188ec22dfc5c96430d807a227e90a62f6c160f"
UPSTREAM_REPO = "Shiqi-Lii/YS_Isaac-GR00T_N1.7"
# Upstream's get_backbone_cls matches on "nvidia/Cosmos-Reason2"; the folder name carries it.
BACKBONE_SUBDIR = "nvidia/Cosmos-Reason2-2B-tiny-random"
TOKENIZER_CANDIDATES = [
    REPO / "assets" / "tokenizer" / "qwen3",
    Path("/work/shared/assets/tokenizer/qwen3"),
]
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt"]
MODEL_FILES = ["config.json", "model.safetensors"]
PROCESSOR_FILES = ["processor_config.json", "statistics.json", "embodiment_id.json"]
NOISE_SHAPE = (1, 40, 132)


# ----------------------------------------------------------------------------------------------
# Environment: upstream import, backbone stand-in, policy loading
# ----------------------------------------------------------------------------------------------


def import_upstream(path: str) -> None:
    if not Path(path, "gr00t", "__init__.py").exists():
        sys.exit(f"upstream tree not found at {path} (pass --upstream or set GR00T_UPSTREAM)")
    sys.path.insert(0, path)
    import gr00t.model  # noqa: F401  (registers Gr00tN1d7 with transformers)


def find_tokenizer(arg: str | None) -> Path:
    for cand in ([Path(arg)] if arg else []) + TOKENIZER_CANDIDATES:
        if all((cand / f).exists() for f in TOKENIZER_FILES[:1]):
            return cand
    sys.exit("Qwen3 tokenizer not found (pass --tokenizer DIR holding tokenizer.json)")


def make_backbone(workdir: Path, tokenizer: Path) -> Path:
    """The local stand-in for the backbone repo: fixture backbone files + tokenizer + random
    Qwen3-VL weights (every one is overwritten by the GR00T checkpoint at load)."""
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    folder = workdir / BACKBONE_SUBDIR
    if (folder / "model.safetensors").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    for f in (TINY / "checkpoint" / "backbone").iterdir():
        shutil.copy(f, folder / f.name)
    for name in TOKENIZER_FILES:
        if (tokenizer / name).exists():
            shutil.copy(tokenizer / name, folder / name)
    torch.manual_seed(0)
    model = Qwen3VLForConditionalGeneration(Qwen3VLConfig.from_pretrained(folder))
    model.save_pretrained(folder)
    return folder


class _Shim:
    """AutoModel / AutoProcessor with `model_name` pointed at the local backbone folder."""

    def __init__(self, real, backbone: Path):
        self.real, self.backbone = real, backbone

    def from_pretrained(self, path, **kw):
        kw.setdefault("model_name", str(self.backbone))
        return self.real.from_pretrained(path, **kw)


def load_policy(checkpoint: Path, tag: str, backbone: Path, verify: bool = False,
                strict: bool = True):
    """`Gr00tPolicy(tag, checkpoint, device="cpu", strict=strict)`, then back to float32."""
    import torch
    import gr00t.policy.gr00t_policy as gp
    from transformers import AutoModel, AutoProcessor

    real_model, real_proc = gp.AutoModel, gp.AutoProcessor
    gp.AutoModel, gp.AutoProcessor = _Shim(AutoModel, backbone), _Shim(AutoProcessor, backbone)
    try:
        policy = gp.Gr00tPolicy(tag, str(checkpoint), device="cpu", strict=strict)
    finally:
        gp.AutoModel, gp.AutoProcessor = real_model, real_proc
    # Gr00tPolicy casts to bf16; the weights are bf16 values, so the f32 cast back is exact.
    # The cast rounded the analytic RoPE inv_freq buffers: rebuild them the backbone's own way.
    policy.model.to(torch.float32)
    policy.model.backbone._reset_rotary_inv_freq()
    if verify:
        fresh = AutoModel.from_pretrained(
            checkpoint, model_name=str(backbone), torch_dtype=torch.float32
        ).eval()
        a = dict(policy.model.state_dict(keep_vars=False))
        a.update({n: b for n, b in policy.model.named_buffers()})
        b = dict(fresh.state_dict(keep_vars=False))
        b.update({n: t for n, t in fresh.named_buffers()})
        bad = [n for n in b if n not in a or not torch.equal(a[n].float(), b[n].float())]
        if bad:
            raise RuntimeError(f"f32 policy differs from a fresh f32 load: {bad[:5]}")
    return policy


@contextlib.contextmanager
def f32_inputs():
    """Keep the collated inputs float32 (upstream casts them to bf16 with the model)."""
    import torch
    import gr00t.policy.gr00t_policy as gp

    orig = gp._rec_to_dtype
    gp._rec_to_dtype = lambda x, dtype: orig(x, torch.float32)
    try:
        yield
    finally:
        gp._rec_to_dtype = orig


@contextlib.contextmanager
def fixed_noise(noise: np.ndarray):
    """`torch.randn` returns the case noise for the single (1, 40, 132) draw."""
    import torch

    orig = torch.randn
    used = []

    def randn(*args, **kw):
        size = kw.get("size", args[0] if len(args) == 1 else args)
        if tuple(size) == NOISE_SHAPE:
            used.append(1)
            return torch.from_numpy(noise.reshape(NOISE_SHAPE).copy()).to(
                dtype=kw.get("dtype") or torch.float32
            )
        return orig(*args, **kw)

    torch.randn = randn
    try:
        yield used
    finally:
        torch.randn = orig


# ----------------------------------------------------------------------------------------------
# Taps: forward hooks and thin wrappers that change no value
# ----------------------------------------------------------------------------------------------


class Recorder:
    def __init__(self):
        self.t: dict[str, np.ndarray] = {}
        self.undo: list = []
        self.aug_steps: list[list[np.ndarray]] = []
        self.step = -1

    def put(self, name, value):
        import torch

        if isinstance(value, torch.Tensor):
            value = value.detach().cpu()
            if value.dtype == torch.bool:
                value = value.to(torch.uint8)
            value = value.clone().numpy()
        self.t[name] = np.array(value, copy=True)

    def wrap_attr(self, obj, attr, make):
        orig = getattr(obj, attr)
        setattr(obj, attr, make(orig))
        self.undo.append(lambda: setattr(obj, attr, orig))

    def hook(self, module, fn, pre=False):
        if pre:
            h = module.register_forward_pre_hook(fn, with_kwargs=True)
        else:
            h = module.register_forward_hook(fn, with_kwargs=True)
        self.undo.append(h.remove)

    def remove(self):
        for u in reversed(self.undo):
            u()
        self.undo.clear()


def install_taps(policy, rec: Recorder):
    import gr00t.model.gr00t_n1d7.processing_gr00t_n1d7 as pm
    import gr00t.data.state_action.state_action_processor as sap

    proc = policy.processor
    # -- image chain: per-frame albumentations steps, then what reaches the Qwen processor
    tf = proc.eval_image_transform
    if proc.use_albumentations:
        for i, t in enumerate(tf.transforms):

            def mk(orig, i=i):
                def apply_with_params(params, *a, **k):
                    out = orig(params, *a, **k)
                    rec.aug_steps.append((i, np.array(out["image"], copy=True)))
                    return out

                return apply_with_params

            rec.wrap_attr(t, "apply_with_params", mk)

    def mk_vlm(orig):
        def f(images, language):
            rec.put("proc.images_after_aug_u8", images)
            return orig(images, language)

        return f

    rec.wrap_attr(proc, "_apply_vlm_processing", mk_vlm)
    ip = proc.collator.processor.image_processor

    def mk_rn(orig):
        def f(images, *a, **k):
            rec.put("proc.qwen_resized_u8", images)
            return orig(images, *a, **k)

        return f

    rec.wrap_attr(ip, "rescale_and_normalize", mk_rn)

    def mk_coll(orig):
        def f(features):
            out = orig(features)
            b = out["inputs"]
            for k in ("pixel_values", "image_grid_thw", "input_ids", "attention_mask", "state"):
                if k in b:
                    rec.put(f"proc.{k}", b[k])
            rec.put("proc.embodiment_id", b["embodiment_id"])
            return out

        return f

    rec.wrap_attr(policy, "collate_fn", mk_coll)

    # -- decode: un-normalised values in modality_keys order
    seq = []
    rec.decode_seq = seq
    for fname in ("unnormalize_values_minmax", "unnormalize_values_meanstd"):

        def mk_un(orig):
            def f(values, params):
                out = orig(values, params)
                seq.append(np.array(out, copy=True))
                return out

            return f

        rec.wrap_attr(sap, fname, mk_un)

    # -- backbone
    qwen = policy.model.backbone.model  # Qwen3VLForConditionalGeneration
    vis = qwen.model.visual
    lm = qwen.model.language_model
    rec.hook(vis.patch_embed, lambda m, a, k, o: rec.put("vision.patch_embed_out", o))

    def mk_pos(orig):
        def f(grid):
            out = orig(grid)
            rec.put("vision.pos_embed_interp", out)
            return out

        return f

    rec.wrap_attr(vis, "fast_pos_embed_interpolate", mk_pos)
    for i, blk in enumerate(vis.blocks):
        rec.hook(blk, lambda m, a, k, o, i=i: rec.put(f"vision.block_out.{i}", o))
    rec.hook(vis.merger, lambda m, a, k, o: rec.put("vision.merger_out", o))
    for i, mg in enumerate(vis.deepstack_merger_list):
        rec.hook(mg, lambda m, a, k, o, i=i: rec.put(f"vision.deepstack.{i}", o))

    def lm_pre(m, a, k):
        rec.put("llm.inputs_embeds", k["inputs_embeds"])
        rec.put("llm.position_ids", k["position_ids"])
        if k.get("visual_pos_masks") is not None:
            rec.put("llm.visual_pos_mask", k["visual_pos_masks"])

    rec.hook(lm, lm_pre, pre=True)
    for i, layer in enumerate(lm.layers):
        rec.hook(
            layer,
            lambda m, a, k, i=i: rec.put(
                f"llm.layer_in.{i}", a[0] if a else k["hidden_states"]
            ),
            pre=True,
        )
        rec.hook(
            layer,
            lambda m, a, k, o, i=i: rec.put(
                f"llm.layer_out.{i}", o[0] if isinstance(o, tuple) else o
            ),
        )

    def bb_out(m, a, k, o):
        rec.put("backbone.features", o["backbone_features"])
        rec.put("backbone.attention_mask", o["backbone_attention_mask"])
        rec.put("backbone.image_mask", o["image_mask"])
        rec.put("backbone.rope_deltas", qwen.model.rope_deltas)

    rec.hook(policy.model.backbone, bb_out)

    # -- action head
    head = policy.model.action_head
    rec.hook(head.vlln, lambda m, a, k, o: rec.put("head.vlln_out", o))
    vsa = head.vl_self_attention
    for i, blk in enumerate(getattr(vsa, "transformer_blocks", [])):
        rec.hook(blk, lambda m, a, k, o, i=i: rec.put(f"head.vl_self_attn.block_out.{i}", o))
    rec.hook(vsa, lambda m, a, k, o: rec.put("head.vl_embeds", o))

    def se_pre(m, a, k):
        rec.put("head.state_input", a[0])

    rec.hook(head.state_encoder, se_pre, pre=True)
    rec.hook(head.state_encoder, lambda m, a, k, o: rec.put("head.state_features", o))

    def ae_pre(m, a, k):
        rec.step += 1
        rec.put(f"head.step{rec.step}.actions_in", a[0])
        rec.put(f"head.step{rec.step}.timestep", a[1])

    rec.hook(head.action_encoder, ae_pre, pre=True)
    rec.hook(
        head.action_encoder,
        lambda m, a, k, o: rec.put(f"head.step{rec.step}.action_features", o),
    )
    dit = head.model
    rec.hook(dit, lambda m, a, k: rec.put(f"head.step{rec.step}.sa_embs", k["hidden_states"]), pre=True)
    rec.hook(dit.timestep_encoder, lambda m, a, k, o: rec.put(f"head.step{rec.step}.temb", o))
    for i, blk in enumerate(dit.transformer_blocks):
        rec.hook(blk, lambda m, a, k, o, i=i: rec.put(f"head.step{rec.step}.dit_block_out.{i}", o))
    rec.hook(dit, lambda m, a, k, o: rec.put(f"head.step{rec.step}.dit_out", o))

    def dec_out(m, a, k, o):
        rec.put(f"head.step{rec.step}.decoder_out", o)
        rec.put(f"head.step{rec.step}.velocity", o[:, -head.action_horizon :])

    rec.hook(head.action_decoder, dec_out)

    def mk_ga(orig):
        def f(*a, **k):
            out = orig(*a, **k)
            rec.put("head.action_pred", out["action_pred"])
            return out

        return f

    rec.wrap_attr(policy.model, "get_action", mk_ga)


def run_case(policy, obs: dict, noise: np.ndarray) -> tuple[dict, dict]:
    """One `Gr00tPolicy.get_action(obs)` with taps. Returns (taps, returned actions)."""
    rec = Recorder()
    install_taps(policy, rec)
    try:
        with f32_inputs(), fixed_noise(noise) as used:
            actions, _info = policy.get_action(obs)
        if len(used) != 1:
            raise RuntimeError(f"expected one (1,40,132) noise draw, saw {len(used)}")
    finally:
        rec.remove()
    t = rec.t
    # Image chain steps, time-major like everything else.
    cfg = policy.modality_configs["video"]
    V, T = len(cfg.modality_keys), len(cfg.delta_indices)
    if rec.aug_steps:
        steps: dict[int, list] = {}
        for i, img in rec.aug_steps:
            steps.setdefault(i, []).append(img)
        names = {}
        idx = sorted(steps)
        lb = 1 if len(idx) == 4 else 0
        if lb:
            names[idx[0]] = "proc.aug_step0_letterbox_u8"
        names[idx[lb]] = "proc.aug_step1_resize_u8"
        names[idx[lb + 1]] = "proc.aug_step2_centercrop_u8"
        for i in idx[: lb + 2]:
            frames = steps[i]  # view-major: view v, time t at v*T + t
            order = [v * T + s for s in range(T) for v in range(V)]
            if len({f.shape for f in frames}) == 1:
                t[names[i]] = np.stack([frames[j] for j in order])
    keys = policy.modality_configs["action"].modality_keys
    if len(rec.decode_seq) == len(keys):
        for k, v in zip(keys, rec.decode_seq):
            t[f"decode.unnormalized.{k}"] = v.astype(np.float32)
    return t, actions


# ----------------------------------------------------------------------------------------------
# Observations
# ----------------------------------------------------------------------------------------------


def read_png(path: Path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as im:
        if im.mode != "RGB":
            raise ValueError(f"{path}: mode {im.mode}, want RGB")
        return np.array(im, dtype=np.uint8)


def png_b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")


def decode_b64_png(s: str) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(base64.b64decode(s))) as im:
        return np.array(im.convert("RGB"), dtype=np.uint8)


def build_obs(policy, frames: dict[str, list[np.ndarray]], state: dict, instruction: str):
    lang_key = policy.language_key
    return {
        "video": {k: np.stack(v)[None] for k, v in frames.items()},
        "state": {k: np.asarray(v, dtype=np.float32).reshape(1, 1, -1) for k, v in state.items()},
        "language": {lang_key: [[instruction]]},
    }


def droid_case(policy, case_dir: Path):
    req = json.loads((case_dir / "request.json").read_text())
    cfg = policy.modality_configs["video"]
    frames = {}
    for key in cfg.modality_keys:
        frames[key] = [read_png(case_dir / f"{key}_t{d}.png") for d in cfg.delta_indices]
        from_req = [decode_b64_png(s) for s in req["images"][key]]
        assert all(np.array_equal(a, b) for a, b in zip(frames[key], from_req)), key
    noise = np.asarray(req["noise"], dtype=np.float32)
    return build_obs(policy, frames, req["state"], req["instruction"]), noise


def multi_case(policy, case_dir: Path):
    obs_j = json.loads((case_dir / "observation.json").read_text())
    req = json.loads((case_dir / "request.json").read_text())
    frames = {k: [read_png(case_dir / f) for f in files] for k, files in obs_j["video"].items()}
    for k, v in frames.items():
        from_req = [decode_b64_png(s) for s in req["images"][k]]
        assert all(np.array_equal(a, b) for a, b in zip(v, from_req)), k
    assert obs_j["language_key"] == policy.language_key
    noise = np.asarray(obs_j["noise"], dtype=np.float32)
    assert np.array_equal(noise, np.asarray(req["noise"], dtype=np.float32))
    return build_obs(policy, frames, obs_j["state"], obs_j["instruction"]), noise


def outputs_of(taps: dict, actions: dict, prefix: str) -> dict:
    out = dict(taps)
    for k, v in actions.items():
        out[f"{prefix}{k}"] = np.asarray(v)
    return out


# ----------------------------------------------------------------------------------------------
# --check
# ----------------------------------------------------------------------------------------------


def load_st(path: Path) -> dict:
    from safetensors.numpy import load_file

    return load_file(str(path))


def compare(ref: dict, ours: dict, rel_tol: float):
    """Rows (name, kind, figure, ok). Ints/uint8 exact; floats max|d| / max|ref|."""
    rows = []
    for name in sorted(ref):
        r = ref[name]
        if name not in ours:
            rows.append((name, "missing", float("nan"), False))
            continue
        o = np.asarray(ours[name])
        if o.shape != r.shape:
            if o.size == r.size:
                o = o.reshape(r.shape)
            else:
                rows.append((name, f"shape {o.shape} vs {r.shape}", float("nan"), False))
                continue
        if r.dtype.kind in "iub":
            n = int(np.count_nonzero(o.astype(np.int64) != r.astype(np.int64)))
            rows.append((name, "exact", float(n), n == 0))
        else:
            d = float(np.max(np.abs(o.astype(np.float64) - r.astype(np.float64)))) if r.size else 0.0
            scale = float(np.max(np.abs(r))) if r.size else 0.0
            fig = d / scale if scale > 0 else d
            rows.append((name, "float", fig, fig <= rel_tol))
    return rows


def check(args, backbone: Path) -> int:
    bad = 0
    worst = {}
    total = 0
    report = []
    # DROID
    policy = load_policy(TINY / "checkpoint", "oxe_droid_relative_eef_relative_joint", backbone,
                         verify=True)
    for case in ["case0", "case1", "case2", "case3"]:
        obs, noise = droid_case(policy, TINY / case)
        taps, actions = run_case(policy, obs, noise)
        ours = outputs_of(taps, actions, "output.")
        for k in obs["state"]:
            ours[f"input.state.{k}"] = obs["state"][k]
        ours["input.noise"] = noise.reshape(NOISE_SHAPE)
        ref = load_st(TINY / case / "taps.safetensors")
        rows = compare(ref, ours, args.rel_tol)
        report.append((f"gr00t_n17_tiny/{case}", rows))
    # multi
    tags = {}
    for d in sorted(MULTI.glob("case_*")):
        tag = json.loads((d / "observation.json").read_text())["embodiment_tag"]
        tags.setdefault(tag, []).append(d)
    for tag, dirs in tags.items():
        policy = load_policy(MULTI / "checkpoint", tag, backbone)
        for d in dirs:
            obs, noise = multi_case(policy, d)
            taps, actions = run_case(policy, obs, noise)
            ours = outputs_of(taps, actions, "action.")
            ref = load_st(d / "outputs.safetensors")
            rows = compare(ref, ours, args.rel_tol)
            report.append((f"gr00t_n17_tiny_multi/{d.name}", rows))
    # extra (regenerated into a temp dir, compared with the bundled folder)
    if EXTRA.exists() and not args.skip_extra:
        import extra_cases

        tmp = Path(tempfile.mkdtemp(prefix="gr00t-extra-check-"))
        extra_cases.generate(tmp, backbone, sys.modules[__name__])
        for d in sorted(EXTRA.glob("case_*")):
            rows = compare(load_st(d / "outputs.safetensors"),
                           load_st(tmp / d.name / "outputs.safetensors"), args.rel_tol)
            report.append((f"gr00t_n17_tiny_extra/{d.name}", rows))
        shutil.rmtree(tmp, ignore_errors=True)
    # table
    print(f"\n{'case':<58} {'taps':>5} {'int exact':>10} {'float ok':>9} {'worst float rel':>16}  worst tap")
    for case, rows in report:
        ints = [r for r in rows if r[1] == "exact"]
        floats = [r for r in rows if r[1] == "float"]
        other = [r for r in rows if r[1] not in ("exact", "float")]
        w = max(floats, key=lambda r: r[2]) if floats else ("-", "", 0.0, True)
        print(f"{case:<58} {len(rows):>5} {sum(r[3] for r in ints):>4}/{len(ints):<5} "
              f"{sum(r[3] for r in floats):>3}/{len(floats):<5} {w[2]:>16.3e}  {w[0]}")
        for r in rows:
            total += 1
            if not r[3]:
                bad += 1
                print(f"    FAIL {r[0]}: {r[1]} {r[2]}")
            if r[1] == "float":
                g = r[0].split(".")[0] + "." + r[0].split(".")[1] if "." in r[0] else r[0]
                worst[g] = max(worst.get(g, 0.0), r[2])
    print("\nworst float figure (max|ours-ref| / max|ref|) per tap family:")
    for g in sorted(worst):
        print(f"  {g:<40} {worst[g]:.3e}")
    print(f"\n{total - bad}/{total} taps within tolerance (ints exact, floats <= {args.rel_tol:g})")
    if args.report:
        Path(args.report).write_text(json.dumps(
            {c: [list(r) for r in rows] for c, rows in report}, indent=1))
    return 1 if bad else 0


# ----------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--upstream", default=os.environ.get("GR00T_UPSTREAM", DEFAULT_UPSTREAM))
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--workdir", default=None, help="cache for the backbone stand-in")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--extra", action="store_true")
    ap.add_argument("--out", default=str(EXTRA))
    ap.add_argument("--skip-extra", action="store_true", help="--check: DROID and multi only")
    ap.add_argument("--rel-tol", type=float, default=1e-6)
    ap.add_argument("--report", default=None, help="write the --check figures as JSON here")
    args = ap.parse_args()
    import_upstream(args.upstream)
    import torch

    torch.set_num_threads(args.threads)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="gr00t-goldens-"))
    backbone = make_backbone(work, find_tokenizer(args.tokenizer))
    rc = 0
    if args.check:
        rc |= check(args, backbone)
    if args.extra:
        import extra_cases  # noqa: E402  (next to this file)

        rc |= extra_cases.generate(Path(args.out), backbone, sys.modules[__name__])
    if not (args.check or args.extra):
        ap.print_help()
    return rc


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
