#!/usr/bin/env bash
# CPU performance run, all in one go on one machine: the best fp32 GEMM rate (numpy/OpenBLAS),
# bf16 GEMM rate (torch/oneDNN) and int8 rate (torch._int_mm and FBGEMM's dynamic int8 linear),
# the memory read bandwidth (the denoise's weight stream), the PyTorch eager peer of our backbone
# in fp32, bf16 and dynamic int8 (torch_backbone_peer.py), and `gr00t bench` (cold requests, then
# the control loop, then cold requests with --dtype bf16 and with --dtype int8 --int8 all), then
# a report with per-stage GFLOP/s, GEMM-bound floors and ratios (bench/report.py). Everything
# uses the same thread count.
#
# Usage: bench/run.sh CHECKPOINT_DIR [OUT_DIR]
#   CHECKPOINT_DIR  a full-size checkpoint (`gr00t synth-checkpoint --size full --out DIR` makes
#                   one with pseudo-random weights: same shapes, same FLOPs)
#   OUT_DIR         where the raw JSON and the report go [default: ${TMPDIR:-/tmp}/gr00t-bench]
# Environment:
#   RUNS=3          timed runs of each measurement (medians are reported)
#   THREADS=$(nproc)
#   GR00T_BIN       the gr00t binary [default: build it with cargo build --release]
#   BENCH_VENV      Python venv for torch/transformers/numpy [default: ~/.cache/gr00t-bench-venv];
#                   created with: pip install numpy threadpoolctl torch transformers==4.57.3
#   FULL_LOCK       lock file serialising full-size processes [default: /tmp/gr00t-full.lock]
#   SKIP_PEER=1     skip the PyTorch peer (no torch install needed)
# The full-size model needs ~8-19 GB of RAM per process: each full-size process runs alone,
# under flock, one after the other.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
ckpt="${1:?usage: bench/run.sh CHECKPOINT_DIR [OUT_DIR]}"
out="${2:-${TMPDIR:-/tmp}/gr00t-bench}"
runs="${RUNS:-3}"
threads="${THREADS:-$(nproc)}"
venv="${BENCH_VENV:-$HOME/.cache/gr00t-bench-venv}"
lock="${FULL_LOCK:-/tmp/gr00t-full.lock}"
mkdir -p "$out"

if [[ -z "${GR00T_BIN:-}" ]]; then
    (cd "$root" && cargo build --release -p gr00t)
    GR00T_BIN="${CARGO_TARGET_DIR:-$root/target}/release/gr00t"
fi

if [[ ! -x "$venv/bin/python" ]]; then
    python3 -m venv "$venv"
fi
pkgs=(numpy threadpoolctl)
[[ "${SKIP_PEER:-0}" == 1 ]] || pkgs+=(torch "transformers==4.57.3")
"$venv/bin/pip" install -q "${pkgs[@]}"
py="$venv/bin/python"

echo "== machine" >&2
{
    lscpu
    echo "flags with avx512: $(grep -o 'avx512[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
    echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$out/machine.txt"

echo "== fp32 GEMM peak (numpy, OpenBLAS overrides unset)" >&2
# OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE pin a kernel; unset them for this command only.
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \
    "$py" "$here/gemm_peak.py" --threads "$threads" > "$out/gemm.json"

echo "== memory read bandwidth (numpy, one slice per thread)" >&2
"$py" "$here/mem_peak.py" --threads "$threads" > "$out/mem.json"

# torch's bf16 on a CPU without bf16 units (AVX512-BF16 or AMX-BF16) is an emulation far slower
# than its fp32 (tens of minutes here, one thread): no floor nor peer worth the time.
bf16_units=0
grep -qE '\b(avx512_bf16|amx_bf16)\b' /proc/cpuinfo && bf16_units=1
if [[ "${SKIP_PEER:-0}" != 1 && "$bf16_units" == 0 ]]; then
    echo "== no bf16 units on this CPU: torch's bf16 GEMM floor and bf16 peer skipped" >&2
fi
if [[ "${SKIP_PEER:-0}" != 1 ]]; then
    echo "== PyTorch eager peer (Qwen3-VL-2B cut to 16 layers, DROID shapes)" >&2
    flock "$lock" "$py" "$here/torch_backbone_peer.py" --runs "$runs" --threads "$threads" \
        | tee "$out/peer.txt" >&2
fi
if [[ "${SKIP_PEER:-0}" != 1 && "$bf16_units" == 1 ]]; then
    echo "== bf16 GEMM peak (torch.matmul, oneDNN)" >&2
    "$py" "$here/gemm_peak.py" --torch-bf16 --sizes 4096 --threads "$threads" > "$out/gemm_bf16.json"
    echo "== PyTorch eager peer, bf16" >&2
    flock "$lock" "$py" "$here/torch_backbone_peer.py" --runs "$runs" --threads "$threads" \
        --dtype bfloat16 | tee "$out/peer_bf16.txt" >&2
fi

if [[ "${SKIP_PEER:-0}" != 1 ]]; then
    echo "== int8 GEMM peak (torch._int_mm, quantized.linear_dynamic)" >&2
    "$py" "$here/gemm_peak.py" --torch-int8 --sizes 2048,4096 --threads "$threads" > "$out/gemm_int8.json"
    echo "== PyTorch eager peer, dynamic int8" >&2
    flock "$lock" "$py" "$here/torch_backbone_peer.py" --runs "$runs" --threads "$threads" \
        --dtype int8 | tee "$out/peer_int8.txt" >&2
fi

echo "== gr00t bench: cold requests" >&2
RAYON_NUM_THREADS="$threads" flock "$lock" "$GR00T_BIN" bench --checkpoint "$ckpt" \
    --runs "$runs" --json > "$out/cold.json"
echo "== gr00t bench: control loop" >&2
RAYON_NUM_THREADS="$threads" flock "$lock" "$GR00T_BIN" bench --checkpoint "$ckpt" \
    --runs "$runs" --loop --json > "$out/loop.json"
echo "== gr00t bench: cold requests, --dtype bf16" >&2
RAYON_NUM_THREADS="$threads" flock "$lock" "$GR00T_BIN" bench --checkpoint "$ckpt" \
    --dtype bf16 --runs "$runs" --json > "$out/cold_bf16.json"
echo "== gr00t bench: cold requests, --dtype int8 --int8 all" >&2
RAYON_NUM_THREADS="$threads" flock "$lock" "$GR00T_BIN" bench --checkpoint "$ckpt" \
    --dtype int8 --int8 all --runs "$runs" --json > "$out/cold_int8.json"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/machine.txt"

"$py" "$here/report.py" "$out" | tee "$out/report.md"
