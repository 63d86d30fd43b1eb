#!/usr/bin/env python3
"""Memory read bandwidth of this machine with a given number of threads: each thread sums its
own slice of an array far larger than the caches (numpy releases the GIL inside the sum), best
of several rounds. The denoise's memory floor is the DiT weights it streams over this rate.

Prints one JSON object: {"read_gbps": best GB/s, "threads": N, "array_gb": size, "rounds": [...]}.
"""
import argparse
import json
import threading
import time

import numpy as np


def read_rate(x: np.ndarray, threads: int) -> float:
    """GB/s of one pass of `threads` threads, each summing its contiguous share of `x`."""
    parts = np.array_split(x, threads)
    sums = [0.0] * threads

    def work(i: int) -> None:
        sums[i] = float(parts[i].sum())

    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    t0 = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    dt = time.perf_counter() - t0
    if not np.isfinite(sum(sums)):
        raise SystemExit("mem_peak: the sum is not finite")
    return x.nbytes / dt / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--gb", type=float, default=2.0, help="array size in GB (≫ L3)")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    x = np.ones(int(args.gb * 1e9 / 4), dtype=np.float32)
    rates = [read_rate(x, args.threads) for _ in range(args.rounds)]
    print(json.dumps({
        "read_gbps": max(rates),
        "threads": args.threads,
        "array_gb": x.nbytes / 1e9,
        "rounds": [round(r, 2) for r in rates],
    }))


if __name__ == "__main__":
    main()
