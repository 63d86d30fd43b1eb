"""Best fp32 GEMM rate of this machine: numpy matmul (OpenBLAS) of large square matrices.

Prints one JSON object: {"best_gflops": x, "by_size": {n: gflops}, "threads": n, "blas": {...}}
where "blas" is threadpoolctl's view of the loaded BLAS (library, version, the kernel family it
picked: "architecture"). Run it with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset, or OpenBLAS
uses the kernel those name instead of the best one for the CPU.

Usage: python3 gemm_peak.py [--threads N] [--sizes 1024,2048,3072,4096] [--reps 3]
"""
import argparse
import json
import os
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--sizes", default="1024,2048,3072,4096")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    if args.threads:
        # Must be set before numpy loads OpenBLAS.
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
            os.environ[var] = str(args.threads)
    import numpy as np

    try:
        from threadpoolctl import threadpool_info

        blas = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    except ImportError:
        blas = []
    overrides = {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if k in os.environ}
    if overrides:
        print(f"warning: {overrides} force an OpenBLAS kernel choice", file=sys.stderr)
    rng = np.random.default_rng(0)
    by_size = {}
    for n in (int(s) for s in args.sizes.split(",")):
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        a @ b  # warm-up: thread pool, page faults
        best = float("inf")
        for _ in range(args.reps):
            t0 = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - t0)
        by_size[n] = 2.0 * n**3 / best / 1e9
    print(json.dumps({
        "best_gflops": max(by_size.values()),
        "by_size": by_size,
        "threads": blas[0]["num_threads"] if blas else None,
        "blas": blas[0] if blas else {"note": "threadpoolctl not installed"},
        "numpy": np.__version__,
        "overrides": overrides,
    }))


if __name__ == "__main__":
    main()
