#!/usr/bin/env bash
# Builds local stand-ins for the Dockerfile's two base images from Debian's mirror (debootstrap)
# and this machine's Rust toolchain, for machines that reach Debian's packages and crates.io but
# not Docker Hub (air-gapped labs, CI sandboxes): `gr00t-local/rust:<rustc X.Y>-bookworm` and
# `gr00t-local/debian:bookworm-slim` (own names: Docker Hub's images are never shadowed). Build
# with them through the Dockerfile's arguments:
#   docker build --build-arg RUST_IMAGE=gr00t-local/rust:1.95-bookworm \
#     --build-arg RUNTIME_IMAGE=gr00t-local/debian:bookworm-slim -f deploy/Dockerfile . The certificates in /usr/local/share/ca-certificates go into the build image
# only, so cargo works behind a TLS-inspecting proxy; the runtime image gets none of them.
#   deploy/image/base-images.sh [WORKDIR]    (root; needs debootstrap and a Docker engine)
set -euo pipefail
WORK=${1:-/tmp/gr00t-base-images}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
TOOLCHAIN=${RUST_TOOLCHAIN_DIR:-$(rustc --print sysroot)}
version=$(rustc --version | awk '{split($2, v, "."); print v[1] "." v[2]}')
command -v debootstrap >/dev/null || { echo "debootstrap missing (apt-get install debootstrap)" >&2; exit 1; }
mkdir -p "$WORK"
# Imports a root filesystem as TAG and removes the image it replaces (a rerun leaves no
# dangling copies).
import_as() {
  local dir=$1 tag=$2 old
  shift 2
  old=$(docker image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
  tar -C "$dir" -c . | docker import "$@" - "$tag" >/dev/null
  if [[ -n $old && $old != $(docker image inspect --format '{{.Id}}' "$tag") ]]; then
    docker image rm "$old" >/dev/null 2>&1 || true
  fi
  echo "$tag imported"
}
slim=$WORK/slim rust=$WORK/rust
if [[ ! -x $slim/bin/sh ]]; then
  echo "debootstrap bookworm (minbase) from $MIRROR ..."
  rm -rf "$slim"
  debootstrap --variant=minbase bookworm "$slim" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
    { tail -20 "$WORK/debootstrap.log" >&2; exit 1; }
fi
import_as "$slim" gr00t-local/debian:bookworm-slim

rm -rf "$rust"
cp -a "$slim" "$rust"
cp /etc/resolv.conf "$rust/etc/resolv.conf"
# What the build stage compiles with: a C compiler for onig_sys, TLS roots for crates.io.
chroot "$rust" /bin/sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -qq --no-install-recommends gcc libc6-dev make pkg-config ca-certificates \
  && apt-get clean && rm -rf /var/lib/apt/lists/*' >"$WORK/apt.log" 2>&1 ||
  { tail -20 "$WORK/apt.log" >&2; exit 1; }
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$rust/usr/local/share/ca-certificates/"
  chroot "$rust" update-ca-certificates >/dev/null
fi
# The toolchain without its docs (share/), on PATH as in the official image.
mkdir -p "$rust/usr/local/rust" "$rust/usr/local/cargo"
for d in bin lib libexec etc; do
  if [[ -e $TOOLCHAIN/$d ]]; then cp -a "$TOOLCHAIN/$d" "$rust/usr/local/rust/"; fi
done
chroot "$rust" /usr/local/rust/bin/cargo --version
import_as "$rust" "gr00t-local/rust:$version-bookworm" \
  --change 'ENV PATH=/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV CARGO_HOME=/usr/local/cargo'
