#!/usr/bin/env python3
"""RTC (real-time chunking) goldens for the tiny GR00T N1.7 fixture, from NVIDIA's own code.

Run by hand, never by CI:

    /work/venv-goldens/bin/python tools/goldens/rtc_goldens.py \
        [--isaac-gr00t /work/isaac-gr00t] [--out tests/fixtures/rtc]

Builds NVIDIA's `Gr00tN1d7ActionHead` from the tiny checkpoint's config, loads its `action_head.*`
weights (bf16 up-cast to f32, as the fixture run did), feeds it the DROID case0 backbone outputs
recorded in `tests/fixtures/gr00t_n17_tiny/case0/taps.safetensors` and calls its `get_action`
with the case's fixed initial noise (patched into `torch.randn`), without RTC and with a few RTC
option sets. The previous chunk is the head's own `action_pred` for the same observation with
the seed-42 noise: normalised and padded exactly as a previous response's `action_pred`.

The fork's own RTC additions (`rtc_guidance_weight`, `options["rtc"]` in the policy) are not
used: no `rtc_guidance_weight` key is passed, so N1.7's plain inpainting branch runs.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from unittest import mock

import torch
from transformers.feature_extraction_utils import BatchFeature

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "fixtures" / "gr00t_n17_tiny"

# (name, action_horizon, rtc_overlap_steps, rtc_frozen_steps, rtc_ramp_rate)
SETTINGS = [
    ("ah40_o10_f3_r6", 40, 10, 3, 6.0),
    ("ah32_o16_f0_r2", 32, 16, 0, 2.0),
    ("ah24_o8_f8_r6", 24, 8, 8, 6.0),
]

# vel_strength only: (action_horizon, rtc_overlap_steps, rtc_frozen_steps, rtc_ramp_rate)
SWEEP = [
    (40, 40, 0, 6.0),
    (40, 40, 2, 0.5),
    (40, 33, 1, 10.0),
    (40, 20, 4, 6.0),
    (40, 17, 0, 3.0),
    (30, 12, 2, 1.0),
    (20, 5, 1, 6.0),
    (16, 3, 0, 6.0),
    (40, 6, 2, 0.0),
    (40, 1, 0, 6.0),
    (40, 25, 5, 100.0),
    (40, 31, 0, 1e-3),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--isaac-gr00t",
        default=os.environ.get("ISAAC_GR00T", "/work/isaac-gr00t"),
        help="extracted NVIDIA N1.7 sources (env ISAAC_GR00T)",
    )
    ap.add_argument("--out", default=str(REPO / "tests" / "fixtures" / "rtc"))
    args = ap.parse_args()
    sys.path.insert(0, args.isaac_gr00t)

    from safetensors.torch import load_file, save_file

    from gr00t.configs.model.gr00t_n1d7 import Gr00tN1d7Config
    from gr00t.model.gr00t_n1d7.gr00t_n1d7 import Gr00tN1d7ActionHead

    torch.manual_seed(0)
    torch.set_num_threads(2)
    ckpt = TINY / "checkpoint"
    config = Gr00tN1d7Config.from_pretrained(str(ckpt))
    head = Gr00tN1d7ActionHead(config)
    weights = load_file(str(ckpt / "model.safetensors"))
    prefix = "action_head."
    state = {k[len(prefix):]: v.float() for k, v in weights.items() if k.startswith(prefix)}
    head.load_state_dict(state, strict=True)
    head = head.float().eval()

    taps = load_file(str(TINY / "case0" / "taps.safetensors"))
    seeds = load_file(str(TINY / "noise_seeds.safetensors"))
    noise = taps["input.noise"].clone()
    assert torch.equal(noise, seeds["seed_0"])
    prev_noise = seeds["seed_42"].clone()

    def run(init_noise, prev=None, options=None):
        backbone_output = BatchFeature(
            data={
                "backbone_features": taps["backbone.features"].clone(),
                "backbone_attention_mask": taps["backbone.attention_mask"].bool(),
                "image_mask": taps["backbone.image_mask"].bool(),
            }
        )
        data = {
            "state": taps["proc.state"].clone(),
            "embodiment_id": taps["proc.embodiment_id"].clone(),
        }
        if prev is not None:
            data["action"] = prev.clone()
        action_input = BatchFeature(data=data)
        real_randn = torch.randn

        def fake_randn(*a, **kw):
            size = kw.get("size", a[0] if a else None)
            assert tuple(size) == tuple(init_noise.shape), size
            return init_noise.clone().to(kw.get("dtype", torch.float32))

        with mock.patch.object(torch, "randn", fake_randn), torch.no_grad():
            out = head.get_action(backbone_output, action_input, options)
        assert torch.randn is real_randn
        return out["action_pred"].float().contiguous()

    plain = run(noise)
    fixture = taps["head.action_pred"]
    plain_diff = (plain - fixture).abs().max().item()
    print(f"no-RTC action_pred vs fixture head.action_pred: max|d| {plain_diff:.3e}")
    prev = run(prev_noise)

    tensors = {
        "noise": noise,
        "previous_chunk": prev,
        "action_pred.plain": plain,
    }
    settings = []
    for name, ah, overlap, frozen, rate in SETTINGS:
        options = {
            "action_horizon": ah,
            "rtc_overlap_steps": overlap,
            "rtc_frozen_steps": frozen,
            "rtc_ramp_rate": rate,
        }
        pred = run(noise, prev, options)
        tensors[f"action_pred.{name}"] = pred
        tensors[f"vel_strength.{name}"] = vel_strength(head, options)
        frozen_ok = torch.equal(pred[:, :frozen], prev[:, ah - overlap : ah - overlap + frozen])
        print(
            f"{name}: frozen rows equal prev[{ah - overlap}:{ah - overlap + frozen}]: {frozen_ok}; "
            f"max|rtc - plain| {(pred - plain).abs().max().item():.3e}"
        )
        assert frozen_ok
        settings.append(dict(name=name, **options))

    # The ramp alone over more option sets (cheap: one step on a 3-token dummy input).
    sweep = []
    for ah, overlap, frozen, rate in SWEEP:
        options = {
            "action_horizon": ah,
            "rtc_overlap_steps": overlap,
            "rtc_frozen_steps": frozen,
            "rtc_ramp_rate": rate,
        }
        sweep.append(vel_strength(head, options))
    tensors["vel_strength_sweep"] = torch.stack(sweep)
    tensors["vel_strength_sweep_options"] = torch.tensor(SWEEP, dtype=torch.float32)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # No metadata: its JSON key order is not stable across runs; settings.json carries it.
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / "rtc.safetensors"))
    info = {
        "case": "gr00t_n17_tiny/case0 (backbone outputs, state, embodiment id)",
        "noise": "case0 input.noise (= seed_0)",
        "previous_chunk": "action_pred of the same inputs with noise seed_42",
        "settings": settings,
        "plain_vs_fixture_max_abs_diff": plain_diff,
        "torch": torch.__version__,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "python": platform.python_version(),
        "isaac_gr00t_commit": git_commit(args.isaac_gr00t),
    }
    (out / "settings.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info, indent=2))


def vel_strength(head, options):
    """The `vel_strength` rows (one value per horizon row) upstream builds for `options`.

    Read out of upstream itself, not recomputed: with one inference step (dt = 1), a zero
    initial x, a zero previous chunk and an action decoder that returns ones, the Euler update
    `x + dt·v·vel_strength` returns `vel_strength` exactly.
    """
    h, a = head.action_horizon, head.action_dim

    class Ones(torch.nn.Module):
        def forward(self, model_output, embodiment_id):
            return torch.ones(model_output.shape[0], model_output.shape[1], a)

    backbone_output = BatchFeature(
        data={
            "backbone_features": torch.zeros(1, 3, head.config.backbone_embedding_dim),
            "backbone_attention_mask": torch.ones(1, 3, dtype=torch.bool),
            "image_mask": torch.tensor([[False, True, False]]),
        }
    )
    action_input = BatchFeature(
        data={
            "state": torch.zeros(1, 1, head.config.max_state_dim),
            "embodiment_id": torch.tensor([24]),
            "action": torch.zeros(1, h, a),
        }
    )
    steps, decoder = head.num_inference_timesteps, head.action_decoder
    try:
        head.num_inference_timesteps = 1
        head.action_decoder = Ones()
        with mock.patch.object(torch, "randn", lambda *x, **k: torch.zeros(1, h, a)):
            with torch.no_grad():
                out = head.get_action(backbone_output, action_input, options)["action_pred"]
    finally:
        head.num_inference_timesteps, head.action_decoder = steps, decoder
    assert torch.all(out == out[:, :, :1]), "vel_strength differs across action dims"
    return out[0, :, 0].contiguous()


def git_commit(path):
    try:
        return subprocess.check_output(
            ["git", "-C", path, "rev-parse", "HEAD"], text=True, stderr=subprocess.DEVNULL
        ).strip()
    except Exception:
        return "c2188ec22dfc5c96430d807a227e90a62f6c160f (extracted tree, no .git)"


if __name__ == "__main__":
    main()
