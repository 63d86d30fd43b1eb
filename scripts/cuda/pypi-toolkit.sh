#!/usr/bin/env bash
# Assembles a CUDA toolkit of release VERSION (e.g. 13.0) from NVIDIA's PyPI wheels into DIR:
# nvcc with a matching nvvm, headers, cudart, cuBLAS, cuRAND, NVRTC, laid out as a CUDA root
# (bin/, include/, nvvm/, lib64/ with unversioned .so links for the linker). For GPU machines
# whose driver and libraries are newer than Debian's 11.8: build against what they run.
# Usage: scripts/cuda/pypi-toolkit.sh VERSION DIR   (prints DIR when done)
set -euo pipefail

version="${1:?usage: pypi-toolkit.sh VERSION DIR}"
dir="${2:?usage: pypi-toolkit.sh VERSION DIR}"
major="${version%%.*}"
venv="$dir/venv"

if [[ ! -x "$dir/bin/nvcc" ]]; then
    python3 -m venv "$venv"
    # cuRAND numbers its releases apart from the toolkit: 10.4.0 shipped with CUDA 13.0.
    curand="${CURAND_SPEC:-nvidia-curand}"
    [[ "$version" == 13.0 && -z "${CURAND_SPEC:-}" ]] && curand="nvidia-curand==10.4.0.*"
    "$venv/bin/pip" install -q \
        "nvidia-cuda-nvcc==$version.*" "nvidia-nvvm==$version.*" "nvidia-cuda-crt==$version.*" \
        "nvidia-cuda-runtime==$version.*" "nvidia-cuda-cccl==$version.*" \
        "nvidia-cuda-nvrtc==$version.*" "nvidia-cublas==$version.*" "$curand"
    site="$("$venv/bin/python" -c 'import nvidia; print(list(nvidia.__path__)[0])')"
    cu="$site/cu$major"
    [[ -d "$cu/bin" ]] || { echo "no $cu/bin in the wheels of CUDA $version" >&2; exit 1; }
    mkdir -p "$dir/lib64"
    for part in bin include nvvm; do ln -sfn "$cu/$part" "$dir/$part"; done
    for lib in "$cu"/lib/*.so.*; do
        name="$(basename "$lib")"
        ln -sf "$lib" "$dir/lib64/$name"
        ln -sf "$lib" "$dir/lib64/${name%%.so.*}.so"
    done
fi
"$dir/bin/nvcc" --version | tail -1 >&2
echo "$dir"
