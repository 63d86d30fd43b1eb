#!/usr/bin/env python3
"""`tools/episode_requests.py` on a GR00T-format (LeRobot v2) episode made here: 12 steps of an
SO-100-like arm (`new_embodiment` of the tiny multi checkpoint: views front and wrist, state
single_arm[5] and gripper[1]), each frame a solid colour that names its step, videos in H.264.
The bodies carry the right step's frames and state slices and the task; `gr00t predict` takes
one; `gr00t check-dtype --dtype int8 --observations DIR` checks them all against f32 (GR00T_BIN,
default target/debug/gr00t). Prints `N passed, M failed`.
"""
import base64
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

import test_protocols as tp

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINT = ROOT / "tests/fixtures/gr00t_n17_tiny_multi/checkpoint"
TOOL = ROOT / "tools/episode_requests.py"
BINARY = os.environ.get("GR00T_BIN", str(ROOT / "target/debug/gr00t"))
STEPS, W, H = 12, 640, 480
TASK = "pick up the red cube"


def colour(view, t):
    """The solid colour of `view`'s frame at step t."""
    return (20 * t, 200 - 10 * t, 60) if view == "front" else (40, 10 * t, 240 - 15 * t)


def make_dataset(root):
    """A one-episode GR00T-format dataset under `root`; returns its states [STEPS, 6]."""
    (root / "meta").mkdir(parents=True)
    (root / "meta/info.json").write_text(json.dumps({
        "codebase_version": "v2.1", "fps": 15, "chunks_size": 1000, "total_episodes": 1,
        "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
        "video_path": "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4",
    }))
    (root / "meta/modality.json").write_text(json.dumps({
        "state": {"single_arm": {"start": 0, "end": 5}, "gripper": {"start": 5, "end": 6}},
        "action": {"single_arm": {"start": 0, "end": 5}, "gripper": {"start": 5, "end": 6}},
        "video": {"front": {"original_key": "observation.images.front"},
                  "wrist": {"original_key": "observation.images.wrist"}},
        "annotation": {"human.task_description": {"original_key": "task_index"}},
    }))
    (root / "meta/tasks.jsonl").write_text(
        json.dumps({"task_index": 0, "task": "wave"}) + "\n"
        + json.dumps({"task_index": 1, "task": TASK}) + "\n")
    states = np.array([[0.1 * t + j for j in range(6)] for t in range(STEPS)], dtype=np.float32)
    data = root / "data/chunk-000"
    data.mkdir(parents=True)
    pq.write_table(pa.table({
        "observation.state": [list(map(float, s)) for s in states],
        "task_index": [1] * STEPS,
        "frame_index": list(range(STEPS)),
        "timestamp": [t / 15 for t in range(STEPS)],
    }), data / "episode_000000.parquet")
    for view in ("front", "wrist"):
        path = root / f"videos/chunk-000/observation.images.{view}/episode_000000.mp4"
        path.parent.mkdir(parents=True)
        with av.open(str(path), "w") as out:
            stream = out.add_stream("libx264", rate=15)
            stream.width, stream.height, stream.pix_fmt = W, H, "yuv420p"
            for t in range(STEPS):
                img = np.zeros((H, W, 3), dtype=np.uint8)
                img[:] = colour(view, t)
                for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                    out.mux(packet)
            for packet in stream.encode():
                out.mux(packet)
    return states


def main():
    t0 = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="gr00t-episodes-"))
    dataset, out, hub = work / "dataset", work / "requests", work / "hub"
    states = make_dataset(dataset)
    done = subprocess.run(
        [sys.executable, str(TOOL), str(dataset), "--checkpoint", str(CHECKPOINT),
         "--embodiment", "new_embodiment", "--out", str(out), "--every", "5", "--max", "3"],
        capture_output=True, text=True)
    bodies = sorted(out.glob("*.json")) if done.returncode == 0 else []

    def converted():
        assert done.returncode == 0, done.stderr
        assert [b.name for b in bodies] == [f"episode_000000_step_{t:06d}.json" for t in (0, 5, 10)]

    def bodies_hold_their_step():
        for path, t in zip(bodies, (0, 5, 10)):
            body = json.loads(path.read_text())
            assert body["embodiment"] == "new_embodiment" and body["instruction"] == TASK
            np.testing.assert_array_equal(body["state"]["single_arm"], states[t, :5])
            np.testing.assert_array_equal(body["state"]["gripper"], states[t, 5:])
            for view in ("front", "wrist"):
                (frame,) = body["images"][view]
                img = np.asarray(Image.open(io.BytesIO(base64.b64decode(frame))).convert("RGB"))
                assert img.shape == (H, W, 3), img.shape
                # H.264 keeps a solid colour within a few levels: the step's own frame.
                got = img.reshape(-1, 3).mean(axis=0)
                assert np.abs(got - colour(view, t)).max() < 4, (view, t, got)

    def predict_takes_a_body():
        r = subprocess.run([BINARY, "predict", "--checkpoint", str(CHECKPOINT), "--request",
                            str(bodies[1])], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-2000:]
        answer = json.loads(r.stdout)
        assert answer["embodiment"] == "new_embodiment", answer["embodiment"]
        assert sorted(answer["actions"]) == ["gripper", "single_arm"], sorted(answer["actions"])

    def check_dtype_reads_the_folder():
        r = subprocess.run([BINARY, "check-dtype", "--checkpoint", str(CHECKPOINT), "--dtype",
                            "int8", "--observations", str(out), "--json"],
                           capture_output=True, text=True, env={**os.environ, "HF_HUB_CACHE": str(hub)})
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        report = json.loads(r.stdout)
        assert report["verdict"]["observations"] == 4, "the demo and three steps"
        ours = [c for c in report["checks"] if c["case"].startswith("episode_")]
        assert len(ours) == 6 and all(c["embodiment"] == "new_embodiment" for c in ours), ours

    def check_dtype_reads_the_dataset():
        r = subprocess.run([BINARY, "check-dtype", "--checkpoint", str(CHECKPOINT), "--dtype",
                            "int8", "--observations", str(dataset), "--embodiment",
                            "new_embodiment", "--json"],
                           capture_output=True, text=True, env={**os.environ, "HF_HUB_CACHE": str(hub)})
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        report = json.loads(r.stdout)
        # One step in ten of 12: steps 0 and 10, besides the demo.
        assert report["verdict"]["observations"] == 3, report["verdict"]
        ours = sorted({c["case"] for c in report["checks"] if c["embodiment"] == "new_embodiment"})
        assert ours == ["episode_000000_step_000000.json", "episode_000000_step_000010.json"], ours

    tp.check("an episode becomes request bodies", converted)
    tp.check("each body holds its step's frames, state and task", bodies_hold_their_step)
    tp.check("gr00t predict takes a body", predict_takes_a_body)
    tp.check("check-dtype reads the folder of bodies", check_dtype_reads_the_folder)
    tp.check("check-dtype reads the dataset folder itself", check_dtype_reads_the_dataset)
    return tp.summary(t0)


if __name__ == "__main__":
    sys.exit(main())
