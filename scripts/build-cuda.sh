#!/usr/bin/env bash
# Builds gr00t with the `cuda` feature on a machine without a GPU (x86-64 Debian 12), plus the
# parity-test binary the GPU check runs, into dist/cuda/ (also xz-compressed, small enough to
# copy to a GPU machine).
#
# Usage: scripts/build-cuda.sh [--pypi-cuda VERSION] [--flash-attn]
#   (default)            CUDA 11.8 from Debian's contrib/non-free (scripts/install-cuda-toolkit.sh,
#                        run when nvcc is missing). The binary then needs the CUDA 11 runtime
#                        libraries (libcudart.so.11.0, libcublas.so.11) on the GPU machine.
#   --pypi-cuda VERSION  a CUDA toolkit of that release assembled from NVIDIA's PyPI wheels
#                        (scripts/cuda/pypi-toolkit.sh), e.g. 13.0 to match a driver 580 machine
#                        whose libraries are CUDA 13's. The driver must be at least as new.
#   --flash-attn         also build FlashAttention-2 kernels (candle-flash-attn). Its build
#                        clones CUTLASS from GitHub and compiles ~50 large kernels: it needs
#                        internet and an hour or more on a small machine. Without it attention
#                        runs as cuBLAS matmuls + candle's fused softmax kernel.
# Environment:
#   CUDA_COMPUTE_CAP   target GPU architecture [default: 90, Hopper: H100/H200]
#   CARGO_TARGET_DIR   cargo's target folder [default: target-cuda or target-cuda<VERSION>]
# Then, on the GPU machine, from the repository root: scripts/gpu-check.sh
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
features="cuda"
pypi=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --flash-attn) features="cuda,flash-attn" ;;
        --pypi-cuda) pypi="${2:?--pypi-cuda needs a version, e.g. 13.0}"; shift ;;
        -h|--help) sed -n 2,23p "$0"; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

if [[ -n "$pypi" ]]; then
    cuda_root="$("$root/scripts/cuda/pypi-toolkit.sh" "$pypi" "${HOME}/.cache/gr00t-cuda-$pypi")"
    export CUDA_ROOT="$cuda_root" CUDA_PATH="$cuda_root" CUDA_HOME="$cuda_root"
    export PATH="$cuda_root/bin:$PATH" LIBRARY_PATH="$cuda_root/lib64${LIBRARY_PATH:+:$LIBRARY_PATH}"
    export NVCC="$cuda_root/bin/nvcc"
    default_target="$root/target-cuda$pypi"
else
    "$root/scripts/install-cuda-toolkit.sh"
    default_target="$root/target-cuda"
fi

# Set explicitly: there is no GPU here for the kernel builder to ask.
export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"
nvcc_major="$(nvcc --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')"
if [[ -z "${NVCC:-}" && "$nvcc_major" -lt 12 ]]; then
    # CUDA 11.x lacks the sm_90a target candle's kernel builder picks for Hopper.
    export NVCC="$root/scripts/cuda/nvcc"
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$default_target}"

cd "$root"
echo "building gr00t --features $features with CUDA $(nvcc --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p') for compute capability $CUDA_COMPUTE_CAP" >&2
cargo build --release --locked -p gr00t --features "$features"
# The device-generic parity tests, run by scripts/gpu-check.sh with GR00T_TEST_DEVICE=cuda.
chain_test="$(cargo test --release --locked -p gr00t-embodiment --features cuda --test chain --no-run \
    --message-format=json | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "chain":
        print(m["executable"])
')"

out="$root/dist/cuda"
mkdir -p "$out"
cp "$CARGO_TARGET_DIR/release/gr00t" "$out/gr00t"
cp "$chain_test" "$out/chain-test"
strip "$out/gr00t" "$out/chain-test"
# ~80 MB each, mostly embedded PTX: compressed they are ~11 MB.
xz -T0 -6 -kf "$out/gr00t" "$out/chain-test"
echo "built (CUDA runtime libraries it links):" >&2
ldd "$out/gr00t" | grep -E "cuda|cublas|curand|nvrtc" >&2 || true
ls -l "$out" >&2
echo "copy the repository with dist/cuda/ to the GPU machine and run scripts/gpu-check.sh there" >&2
