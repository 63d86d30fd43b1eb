"""Best GEMM rate of this machine: numpy matmul (OpenBLAS) of large square fp32 matrices, or with
`--torch-bf16` torch.matmul of bf16 ones (oneDNN: AMX or AVX512-BF16 where the CPU has them), the
bf16 floor of issue 16.

Prints one JSON object: {"best_gflops": x, "by_size": {n: gflops}, "threads": n, "blas": {...}}
where "blas" is threadpoolctl's view of the loaded BLAS (library, version, the kernel family it
picked: "architecture"). Run it with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset, or OpenBLAS
uses the kernel those name instead of the best one for the CPU.

With `--torch-bf16 --model-shapes` it times torch.nn.functional.linear (bf16 activations and
weights, the way PyTorch eager runs the model's linears) on the model's linear shapes, the
list of `crates/gr00t-model/examples/gemm_shapes.rs`, to set beside that example's figures.

With `--torch-int8` it measures the int8 floor: the best rate of torch's int8 products on this
machine, over square matrices and the model's shapes, each through `torch._int_mm` (s8·s8 → s32,
oneDNN) and PyTorch's dynamic int8 linear (`quantized.linear_dynamic`: FBGEMM, the activations
quantised per call as ours are); "best_gflops" is the best of them all (GOP/s, 2 per multiply-add).

Usage: python3 gemm_peak.py [--threads N] [--sizes 1024,2048,3072,4096] [--reps 3] [--torch-bf16]
                            [--model-shapes] [--torch-int8]
"""
import argparse
import json
import os
import sys
import time


def best_seconds(op, reps):
    """Runs `op()` once to warm up (thread pool, kernel choice, page faults), then `reps` times:
    the fastest run's seconds."""
    op()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        op()
        best = min(best, time.perf_counter() - t0)
    return best


def square_gflops(sizes, make, reps):
    """GFLOP/s of `a @ b` for each n of `sizes` (comma-separated), with `a, b = make(n)`."""
    by_size = {}
    for n in (int(s) for s in sizes.split(",")):
        a, b = make(n)
        by_size[n] = 2.0 * n**3 / best_seconds(lambda: a @ b, reps) / 1e9
    return by_size


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--sizes", default="1024,2048,3072,4096")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--torch-bf16", action="store_true", help="torch.matmul in bf16 instead of numpy fp32")
    ap.add_argument("--model-shapes", action="store_true",
                    help="with --torch-bf16: the model's linear shapes instead of squares")
    ap.add_argument("--torch-int8", action="store_true",
                    help="the int8 floor: torch._int_mm and the dynamic int8 linear")
    args = ap.parse_args()
    if args.torch_int8:
        return torch_int8(args)
    if args.torch_bf16:
        return torch_bf16(args)
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
    by_size = square_gflops(
        args.sizes, lambda n: [rng.standard_normal((n, n), dtype=np.float32) for _ in range(2)],
        args.reps)
    print(json.dumps({
        "best_gflops": max(by_size.values()),
        "by_size": by_size,
        "threads": blas[0]["num_threads"] if blas else None,
        "blas": blas[0] if blas else {"note": "threadpoolctl not installed"},
        "numpy": np.__version__,
        "overrides": overrides,
    }))


def torch_bf16(args):
    """The same measurement with torch.matmul on bf16 matrices (fp32 accumulation inside oneDNN)."""
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.model_shapes:
        return torch_bf16_shapes(args, torch)
    by_size = square_gflops(
        args.sizes, lambda n: [torch.randn(n, n).to(torch.bfloat16) for _ in range(2)], args.reps)
    print(json.dumps({
        "best_gflops": max(by_size.values()),
        "by_size": by_size,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }))


# (stage, rows M, in K, out N): the list of crates/gr00t-model/examples/gemm_shapes.rs.
MODEL_SHAPES = [
    ("vision qkv", 1792, 1024, 3072), ("vision proj", 1792, 1024, 1024),
    ("vision fc1", 1792, 1024, 4096), ("vision fc2", 1792, 4096, 1024),
    ("llm q/o", 469, 2048, 2048), ("llm k/v", 469, 2048, 1024),
    ("llm up/gate", 469, 2048, 6144), ("llm down", 469, 6144, 2048),
    ("adapter", 469, 2048, 1536), ("dit attn", 41, 1536, 1536), ("dit ff1", 41, 1536, 6144),
    ("dit 2x", 41, 1536, 3072), ("dit ff2", 41, 6144, 1536),
]


def torch_bf16_shapes(args, torch):
    """torch.nn.functional.linear in bf16 on each model shape: best of `reps` GFLOP/s."""
    import torch.nn.functional as F

    by_shape = {}
    for name, m, k, n in MODEL_SHAPES:
        x = torch.randn(m, k).to(torch.bfloat16)
        w = torch.randn(n, k).to(torch.bfloat16)
        best = best_seconds(lambda: F.linear(x, w), max(args.reps, 5))
        by_shape[name] = {"m": m, "k": k, "n": n, "gflops": 2.0 * m * k * n / best / 1e9}
    print(json.dumps({
        "by_shape": by_shape,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }))



def torch_int8(args):
    """The int8 floor: the best GOP/s of torch._int_mm and of the dynamic int8 linear, over the
    square sizes and the model's shapes."""
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    engines = torch.backends.quantized.supported_engines
    torch.backends.quantized.engine = "x86" if "x86" in engines else "fbgemm"
    torch.manual_seed(0)
    reps = max(args.reps, 5)

    def int_mm(m, k, n):
        a = torch.randint(-127, 128, (m, k), dtype=torch.int8)
        b = torch.randint(-127, 128, (k, n), dtype=torch.int8)
        try:
            return 2.0 * m * k * n / best_seconds(lambda: torch._int_mm(a, b), reps) / 1e9
        except (RuntimeError, NotImplementedError) as e:  # no CPU _int_mm in this build
            print(f"torch._int_mm: {e}", file=sys.stderr)
            return None

    def dynamic_linear(m, k, n):
        x = torch.randn(m, k)
        w = torch.quantize_per_channel(torch.randn(n, k), torch.rand(n) * 0.02 + 0.01,
                                       torch.zeros(n, dtype=torch.long), 0, torch.qint8)
        packed = torch.ops.quantized.linear_prepack(w, None)
        op = lambda: torch.ops.quantized.linear_dynamic(x, packed, True)
        return 2.0 * m * k * n / best_seconds(op, reps) / 1e9

    shapes = [(f"square {n}", n, n, n) for n in (int(s) for s in args.sizes.split(","))]
    shapes += MODEL_SHAPES
    rows = {}
    for name, m, k, n in shapes:
        rows[name] = {"m": m, "k": k, "n": n, "int_mm": int_mm(m, k, n),
                      "linear_dynamic": dynamic_linear(m, k, n)}
    rates = [r[op] for r in rows.values() for op in ("int_mm", "linear_dynamic") if r[op]]
    print(json.dumps({
        "best_gflops": max(rates),
        "by_shape": rows,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "quantized_engine": torch.backends.quantized.engine,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }))

if __name__ == "__main__":
    main()
