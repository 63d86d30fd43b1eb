#!/usr/bin/env python3
"""Transform-level goldens for the GR00T N1.7 eval image transforms (both paths).

Runs upstream's own eval transforms, built by the fork's
`build_image_transformations_albumentations` / `build_image_transformations` (what
`Gr00tN1d7Processor.__init__` calls), on small synthetic frames and writes every stage to
`tests/fixtures/image_transforms/`:

  inputs/<name>.png            the input frames (RGB8, synthetic)
  <config>/<input>/<stage>.png every uint8 stage after the letterbox, for the small configs
  manifest.json                configs, and per (config, input) each stage's size and SHA-256
                               (the released-size configs store only the hashes)

The stages are the eval transform's own list run one step at a time on the input laid out as
`process_observation` lays it out; the composed transform, called the processor's way
(`apply_with_replay` on PIL images / the whole Compose on a (B, T*V, C, H, W) tensor), must give
the last stage.

Run by hand (never by CI), from the repository root:

    NO_ALBUMENTATIONS_UPDATE=1 /work/venv-goldens/bin/python tools/goldens/image_transforms.py \
        [--upstream /work/isaac-gr00t] [--out tests/fixtures/image_transforms]
"""

import argparse
import hashlib
import json
import os
import platform
import shutil
import sys
from pathlib import Path

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")

import numpy as np  # noqa: E402

# (name, width, height): landscape, portrait, square, odd sizes, and frames small enough that
# every resize enlarges.
INPUTS = [
    ("land_80x45", 80, 45),
    ("land_odd_97x61", 97, 61),
    ("port_45x80", 45, 80),
    ("port_odd_59x101", 59, 101),
    ("square_64x64", 64, 64),
    ("tiny_30x20", 30, 20),
    ("tiny_port_21x31", 21, 31),
    # width already the torchvision target's: only the vertical pass runs.
    ("land_40x23", 40, 23),
]

# Released-size inputs (hashes only).
BIG_INPUTS = [
    ("droid_320x180", 320, 180),
    ("port_240x320", 240, 320),
    ("land_odd_333x241", 333, 241),
]


def alb(edge, fraction, target=None, crop=None, letterbox=False):
    """The albumentations processor kwargs."""
    return dict(use_albumentations=True, shortest_image_edge=edge, crop_fraction=fraction,
                image_target_size=target, image_crop_size=crop, letter_box_transform=letterbox)


def tv(target, crop, letterbox=False):
    """The torchvision processor kwargs (no edge or fraction: that path reads neither)."""
    return dict(use_albumentations=False, image_target_size=target, image_crop_size=crop,
                letter_box_transform=letterbox)


# name -> processor kwargs that pick the transform (what processor_config.json holds).
CONFIGS = {
    # albumentations: SmallestMaxSize(edge) -> FractionalCenterCrop(f) -> SmallestMaxSize(edge)
    "alb_e40": alb(40, 0.95),
    "alb_e40_lb": alb(40, 0.95, letterbox=True),
    # shortest_image_edge / crop_fraction null: image_target_size[0] and crop/target fallbacks.
    "alb_fallback_lb": alb(None, None, [36, 36], [31, 31], letterbox=True),
    # torchvision: Resize(target) -> CenterCrop(crop) -> Resize(target), bilinear antialias.
    "tv_40_36": tv([40, 40], [36, 36]),
    "tv_40_36_lb": tv([40, 40], [36, 36], letterbox=True),
    # non-square (h, w) target; crop offsets (35-31)/2 = 2, (56-47)/2 = 4.5 -> round half even 4.
    "tv_hw_35x56": tv([35, 56], [31, 47]),
    # one-element sizes: Resize([s]) keeps the aspect ratio (shorter side s), square crop.
    "tv_short_33": tv([33], [29]),
    # crop larger than the resized image: CenterCrop pads with zeros first.
    "tv_pad_30": tv([30, 30], [33, 35], letterbox=True),
}

# The released recipe's values (hashes only).
BIG_CONFIGS = {
    "alb_256_lb": alb(256, 0.95, [256, 256], [230, 230], letterbox=True),
    "tv_256_230": tv([256, 256], [230, 230]),
    "tv_256_230_lb": tv([256, 256], [230, 230], letterbox=True),
}

def synthetic_frame(width: int, height: int, seed: int, noise: float) -> np.ndarray:
    """Smooth gradients, a disc, a checker and (small frames) mild noise: every resizer has edges
    to get wrong, and the PNGs stay small."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    r = 255.0 * x / max(width - 1, 1)
    g = 255.0 * y / max(height - 1, 1)
    b = 127.5 + 127.5 * np.sin((x + 2 * y) / 5.0)
    img = np.stack([r, g, b], axis=-1)
    cx, cy, rad = width * 0.6, height * 0.4, min(width, height) * 0.3
    disc = (x - cx) ** 2 + (y - cy) ** 2 < rad**2
    img[disc] = [250.0, 20.0, 60.0]
    checker = ((x // 4 + y // 4) % 2 == 0) & (x < width / 3) & (y > height / 2)
    img[checker] = 255.0 - img[checker]
    img += rng.normal(0.0, noise, img.shape)
    img[0, :] = [255, 255, 255]  # hard borders: the outermost rows/columns matter
    img[:, -1] = [0, 0, 0]
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def sha256(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def build_eval(ia, kw):
    """The eval transform exactly as Gr00tN1d7Processor.__init__ builds it."""
    if kw["use_albumentations"]:
        _, ev = ia.build_image_transformations_albumentations(
            kw["image_target_size"], kw["image_crop_size"], None, None,
            kw["shortest_image_edge"], kw["crop_fraction"],
            extra_augmentation_config=None,
            letter_box_transform=kw["letter_box_transform"],
        )
    else:
        _, ev = ia.build_image_transformations(
            kw["image_target_size"], kw["image_crop_size"], None, None,
            letter_box_transform=kw["letter_box_transform"],
        )
    return ev


def stage_names(kw):
    names = ["letterboxed"] if kw["letter_box_transform"] else []
    return names + ["resized", "cropped", "output"]


def run_stages(ia, kw, frame: np.ndarray):
    """Every stage (HWC uint8) of the eval transform on one frame."""
    import torch
    from PIL import Image

    ev = build_eval(ia, kw)
    stages = []
    if kw["use_albumentations"]:
        img = np.array(Image.fromarray(frame))  # process_observation's PIL round trip
        for t in ev.transforms:
            img = t(image=img)["image"]
            assert img.dtype == np.uint8, (t, img.dtype)
            stages.append(img.copy())
        composed, _ = ia.apply_with_replay(ev, [Image.fromarray(frame)])
        composed = composed[0].permute(1, 2, 0).numpy()
    else:
        # (B, T, V, H, W, C) -> (B, T*V, C, H, W), as process_observation does.
        images = torch.from_numpy(frame[None, None, None])
        h, w = frame.shape[:2]
        x = images.permute(0, 1, 2, 5, 3, 4).reshape(1, 1, 3, h, w)
        steps = ev.transforms
        assert type(steps[0]).__name__ == "ToImage"
        x = steps[0](x)
        for t in steps[1:]:
            x = t(x)
            assert x.dtype == torch.uint8, (t, x.dtype)
            stages.append(x[0, 0].permute(1, 2, 0).contiguous().numpy().copy())
        composed = ev(images.permute(0, 1, 2, 5, 3, 4).reshape(1, 1, 3, h, w))
        composed = composed[0, 0].permute(1, 2, 0).contiguous().numpy()
    names = stage_names(kw)
    assert len(stages) == len(names), (names, len(stages))
    assert np.array_equal(composed, stages[-1]), "composed transform != last stage"
    return list(zip(names, stages))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--upstream", default=os.environ.get("GR00T_UPSTREAM", "/work/isaac-gr00t"))
    ap.add_argument("--out", default="tests/fixtures/image_transforms")
    args = ap.parse_args()
    sys.path.insert(0, args.upstream)
    import albumentations
    import cv2
    import torch
    import torchvision
    from PIL import Image

    from gr00t.model.gr00t_n1d7 import image_augmentations as ia

    out = Path(args.out)
    if out.exists():
        for p in out.iterdir():
            if p.name != "README.md":
                shutil.rmtree(p) if p.is_dir() else p.unlink()
    (out / "inputs").mkdir(parents=True, exist_ok=True)

    frames = {}
    for seed, (name, w, h) in enumerate(INPUTS + BIG_INPUTS):
        noise = 6.0 if (name, w, h) in INPUTS else 0.0
        frames[name] = synthetic_frame(w, h, seed, noise)
        Image.fromarray(frames[name]).save(out / "inputs" / f"{name}.png", optimize=True)

    manifest = {
        "generator": "tools/goldens/image_transforms.py",
        "upstream": "Shiqi-Lii/YS_Isaac-GR00T_N1.7 gr00t/model/gr00t_n1d7/image_augmentations.py",
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "torchvision": torchvision.__version__,
            "albumentations": albumentations.__version__,
            "opencv": cv2.__version__,
            "numpy": np.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        },
        "configs": {},
        "cases": [],
    }
    for cfg_name, kw in list(CONFIGS.items()) + list(BIG_CONFIGS.items()):
        manifest["configs"][cfg_name] = kw
        big = cfg_name in BIG_CONFIGS
        for name, w, h in BIG_INPUTS if big else INPUTS:
            case = {"config": cfg_name, "input": name, "input_size": [w, h], "stages": []}
            for stage, img in run_stages(ia, kw, frames[name]):
                entry = {"name": stage, "width": img.shape[1], "height": img.shape[0],
                         "sha256": sha256(img)}
                if not big and stage != "letterboxed":
                    rel = f"{cfg_name}/{name}/{stage}.png"
                    (out / rel).parent.mkdir(parents=True, exist_ok=True)
                    Image.fromarray(img).save(out / rel, optimize=True)
                    entry["png"] = rel
                case["stages"].append(entry)
            manifest["cases"].append(case)
    with open(out / "manifest.json", "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"{len(manifest['cases'])} cases, {total / 1024:.0f} KiB in {out}")


if __name__ == "__main__":
    main()
