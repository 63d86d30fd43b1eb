#!/usr/bin/env python3
"""An episode of a GR00T-format (LeRobot v2) dataset as `/predict` request bodies, the
observations `gr00t check-dtype --observations DIR` and `gr00t predict --request FILE` read.
(`gr00t check-dtype --observations DATASET --embodiment TAG` carries this file and runs it.)

The dataset: `meta/info.json` (`data_path`, `video_path`, `chunks_size`), `meta/modality.json`
(each state key's `start`/`end` in `observation.state`, each view's `original_key`, the
language annotation's `original_key`), `meta/tasks.jsonl`, the episode's parquet and one video
per view. The checkpoint says what the embodiment takes (`processor_config.json`: its views and
their frame offsets, its state keys, its language key). For each chosen step t the body holds
each view's frames at t + offset (clamped to the episode, as the dataset loader pads), each
state key's slice of `observation.state` at t, and the step's task as the instruction, with
seed 0.

Usage: python3 tools/episode_requests.py DATASET --checkpoint DIR --embodiment TAG --out DIR
           [--episode 0] [--every 10] [--max 8]
Needs: pip install numpy pyarrow av pillow
"""
import argparse
import base64
import io
import json
import sys
from pathlib import Path

import av
import numpy as np
import pyarrow.parquet as pq
from PIL import Image


def fail(message):
    print(f"episode_requests: {message}", file=sys.stderr)
    sys.exit(2)


def read_json(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        fail(f"{path}: {e}")


def embodiment_config(checkpoint, tag):
    """(views, frame offsets, state keys, language key) of `tag` in the checkpoint."""
    configs = read_json(Path(checkpoint) / "processor_config.json").get(
        "processor_kwargs", {}).get("modality_configs", {})
    if tag not in configs:
        fail(f"the checkpoint has no embodiment {tag!r}; it has {sorted(configs)}")
    c = configs[tag]
    language = c.get("language", {}).get("modality_keys", [])
    return (c["video"]["modality_keys"], c["video"]["delta_indices"],
            c["state"]["modality_keys"], language[0] if language else None)


def decode_frames(path, wanted):
    """The frames of video `path` at the indices in `wanted`, as PNG bytes."""
    frames = {}
    with av.open(str(path)) as container:
        for i, frame in enumerate(container.decode(video=0)):
            if i in wanted:
                buf = io.BytesIO()
                Image.fromarray(frame.to_ndarray(format="rgb24")).save(buf, format="PNG")
                frames[i] = buf.getvalue()
            if len(frames) == len(wanted):
                break
    missing = sorted(set(wanted) - set(frames))
    if missing:
        fail(f"{path}: no frames {missing[:5]} (the video has fewer frames than the parquet rows)")
    return frames


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--checkpoint", type=Path, required=True)
    ap.add_argument("--embodiment", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--episode", type=int, default=0)
    ap.add_argument("--every", type=int, default=10, help="one step in this many")
    ap.add_argument("--max", type=int, default=8, help="at most this many steps")
    args = ap.parse_args()

    views, offsets, state_keys, language_key = embodiment_config(args.checkpoint, args.embodiment)
    info = read_json(args.dataset / "meta/info.json")
    for field in ("data_path", "video_path"):
        if field not in info:
            fail(f"meta/info.json has no {field!r}: not a LeRobot v2 (GR00T-format) dataset")
    modality = read_json(args.dataset / "meta/modality.json")
    tasks = {}
    for line in (args.dataset / "meta/tasks.jsonl").read_text().splitlines():
        if line.strip():
            t = json.loads(line)
            tasks[t["task_index"]] = t["task"]
    chunk = args.episode // info.get("chunks_size", 1000)
    fields = {"episode_chunk": chunk, "episode_index": args.episode}
    table = pq.read_table(args.dataset / info["data_path"].format(**fields)).to_pydict()
    states = np.asarray(table["observation.state"], dtype=np.float64)
    steps = len(states)
    if steps == 0:
        fail("the episode has no rows")

    # Which column names the task: the language annotation's original key, else task_index.
    annotation = modality.get("annotation", {})
    task_column = "task_index"
    if language_key:
        short = language_key.removeprefix("annotation.")
        task_column = annotation.get(short, {}).get("original_key", task_column)
    if task_column not in table:
        fail(f"the parquet has no column {task_column!r} for the instruction")

    chosen = list(range(0, steps, max(args.every, 1)))[: max(args.max, 1)]
    needed = {min(max(t + d, 0), steps - 1) for t in chosen for d in offsets}
    frames = {}
    for view in views:
        entry = modality.get("video", {}).get(view)
        if entry is None:
            fail(f"meta/modality.json has no video {view!r}; the embodiment takes {views}")
        key = entry.get("original_key", f"observation.images.{view}")
        path = args.dataset / info["video_path"].format(video_key=key, **fields)
        frames[view] = decode_frames(path, needed)

    ranges = modality.get("state", {})
    args.out.mkdir(parents=True, exist_ok=True)
    for t in chosen:
        state = {}
        for k in state_keys:
            if k not in ranges:
                fail(f"meta/modality.json has no state {k!r}; the embodiment takes {state_keys}")
            state[k] = [float(v) for v in states[t, ranges[k]["start"]:ranges[k]["end"]]]
        images = {
            view: [base64.b64encode(frames[view][min(max(t + d, 0), steps - 1)]).decode()
                   for d in offsets]
            for view in views
        }
        task = table[task_column][t]
        body = {"embodiment": args.embodiment, "images": images, "state": state,
                "instruction": tasks.get(task, str(task)), "seed": 0}
        out = args.out / f"episode_{args.episode:06d}_step_{t:06d}.json"
        out.write_text(json.dumps(body))
    print(f"wrote {len(chosen)} request bodies to {args.out}")


if __name__ == "__main__":
    main()
