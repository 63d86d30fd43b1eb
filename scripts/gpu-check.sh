#!/usr/bin/env bash
# The GPU check, in one go, on a machine with an NVIDIA GPU (built elsewhere by
# scripts/build-cuda.sh). Run from the repository root; needs dist/cuda/{gr00t,chain-test}, the
# tiny fixtures (tests/fixtures) and the bundled tokenizer (assets/).
#   1. fixture parity on the GPU: the request-JSON → actions chain for all four cases, in f32
#      (gate r ≥ 0.9999 per action group) and bf16 (gate r ≥ 0.999), figures printed;
#   2. `gr00t predict --device cuda` on the demo request, bf16 and f32;
#   3. `gr00t bench --device cuda` on a full-size synthetic checkpoint: warm end-to-end median
#      and p90 over RUNS requests with per-stage times, cold-cache and control-loop, bf16.
# Environment: RUNS=50, DEVICE=cuda:0, OUT (where logs go) [default: gpu-check-out].
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bin="${GR00T_BIN:-$root/dist/cuda/gr00t}"
chain="${CHAIN_TEST:-$root/dist/cuda/chain-test}"
runs="${RUNS:-50}"
device="${DEVICE:-cuda:0}"
out="${OUT:-$root/gpu-check-out}"
synth="${SYNTH_DIR:-${TMPDIR:-/tmp}/gr00t-synth-full}"
mkdir -p "$out"
status=0
# The bundle may come compressed (scripts/build-cuda.sh writes both forms).
for f in "$bin" "$chain"; do
    [[ -x "$f" || ! -f "$f.xz" ]] || { xz -dkf "$f.xz" && chmod +x "$f"; }
done
# CUDA libraries the binary links that the loader cannot find: look in the CUDA wheels of the
# machine's Python (nvidia-cublas, nvidia-cuda-runtime, ...).
if ldd "$bin" | grep -q "not found"; then
    for py in python3 /opt/torch/.venv/bin/python3; do
        dirs="$("$py" -c 'import nvidia, glob; print(":".join(sorted(set(
            glob.glob(list(nvidia.__path__)[0] + "/cu*/lib") +
            glob.glob(list(nvidia.__path__)[0] + "/*/lib")))))' 2>/dev/null)" || continue
        [[ -n "$dirs" ]] && export LD_LIBRARY_PATH="$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" && break
    done
fi
step() { echo "== $*" | tee -a "$out/summary.txt" >&2; }
run() { # name, command...
    local name="$1"; shift
    local t0=$SECONDS
    "$@" > "$out/$name.log" 2>&1
    local rc=$?
    echo "   $name: exit $rc in $((SECONDS - t0)) s" | tee -a "$out/summary.txt" >&2
    [[ $rc -eq 0 ]] || status=1
    return $rc
}

step "machine"
{ nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv; nproc
  echo "libraries:"; ldd "$bin" | grep -E "cuda|cublas|curand|nvrtc|not found"; } \
    > "$out/machine.txt" 2>&1
cat "$out/machine.txt" >> "$out/summary.txt"

step "1. fixture parity on $device (f32 and bf16 chains, all cases)"
GR00T_REPO_ROOT="$root" GR00T_TEST_DEVICE="$device" run parity \
    "$chain" --test-threads 1 --nocapture
grep -E "^(f32|bf16)|test result|FAILED|panicked" "$out/parity.log" >> "$out/summary.txt"

step "2. predict on $device"
for dtype in bf16 f32; do
    run "predict-$dtype" "$bin" predict --device "$device" --dtype "$dtype" \
        --checkpoint tests/fixtures/gr00t_n17_tiny/checkpoint --request assets/demo/request.json
done

step "3. bench on $device, full-size synthetic checkpoint"
if [[ ! -f "$synth/config.json" ]]; then
    run synth "$bin" synth-checkpoint --size full --out "$synth"
fi
run bench-cold "$bin" bench --device "$device" --checkpoint "$synth" --runs "$runs" --warmup 3
run bench-loop "$bin" bench --device "$device" --checkpoint "$synth" --runs "$runs" --warmup 3 --loop
run bench-f32 "$bin" bench --device "$device" --dtype f32 --checkpoint "$synth" --runs 10 --warmup 2
for b in bench-cold bench-loop bench-f32; do
    { echo "-- $b"; grep -vE "WARN|INFO" "$out/$b.log"; } >> "$out/summary.txt"
done

step "done (exit $status); logs in $out"
cat "$out/summary.txt"
exit $status
