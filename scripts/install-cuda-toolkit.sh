#!/usr/bin/env bash
# Installs NVIDIA's CUDA toolkit 11.8 from Debian's non-free component (nvcc, cuBLAS, cuRAND
# headers and libraries). No GPU is needed to build; the driver comes with the GPU machine.
set -euo pipefail

if command -v nvcc >/dev/null 2>&1; then
    echo "nvcc already installed: $(nvcc --version | tail -1)"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

# Debian's toolkit lives in non-free (and needs contrib); add both next to the existing sources.
LIST=/etc/apt/sources.list.d/gr00t-cuda-nonfree.sources
if [ ! -f "$LIST" ]; then
    . /etc/os-release
    CODENAME="${VERSION_CODENAME:-bookworm}"
    echo "adding contrib non-free for $CODENAME to $LIST"
    $SUDO tee "$LIST" >/dev/null <<SRC
Types: deb
URIs: http://deb.debian.org/debian
Suites: $CODENAME
Components: contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi

$SUDO apt-get update -q
# About 3 GB installed; answers the licence prompt non-interactively.
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
    nvidia-cuda-toolkit nvidia-cuda-dev
nvcc --version | tail -2
