#!/usr/bin/env bash
# Builds the node image (images/node/Dockerfile) for each platform given
# with podman, into one OCI image index written as an oci-archive:
#
#   test/arch/node-image-index.sh ARCHIVE VERSION linux/amd64 linux/arm64 ...
#
# For each platform:
# - the base, a Debian bookworm minbase root with what the kubelet and
#   kube-proxy call at run time, made by mmdebstrap from Debian's packages
#   for that architecture (a foreign one's maintainer scripts run under
#   qemu-user through binfmt_misc: make binfmt), cached by architecture and
#   package list in NODE_BASE_CACHE, and imported into podman with its
#   platform;
# - nodeinit from make release (bin/<os>_<arch>/nodeinit);
# - the kubelet and kube-proxy from KUBE_BIN_<arch> (a directory), else the
#   real-node tests' release: test/k8s/build/build.sh's for the host's
#   architecture, test/arch/kube-node.sh's for another.
# The list, its images and the bases are removed from podman's store once
# the archive is written (mk/image.mk says why). The timings go to stderr;
# the archive's path is the last line.
set -euo pipefail
archive="${1:?usage: node-image-index.sh ARCHIVE VERSION PLATFORM...}" version="${2:?}"
shift 2
index="localhost/nodeinit-node-index:$version"
label="org.nodeinit.index=$index"
root="$(cd "$(dirname "$0")/../.." && pwd)"
packages=(iptables nftables mount util-linux conntrack kmod ca-certificates)
cache="${NODE_BASE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nodeinit/node-base}"
hostarch="$(cd "$root" && GOARCH= go env GOHOSTARCH)"
mkdir -p "$cache"
bases=()
podman manifest rm "$index" >/dev/null 2>&1 || true
podman manifest create "$index" >/dev/null
for platform in "$@"; do
  rest="${platform#*/}" arch="${platform#*/}"
  arch="${arch%%/*}"
  [[ "$rest" == "$arch" ]] || { echo "node-image-index.sh: $platform: variants are not supported" >&2; exit 1; }
  start=$SECONDS
  sum="$(printf '%s\n' bookworm minbase "$arch" "${packages[*]}" | sha256sum | cut -c1-12)"
  base="$cache/bookworm-$arch-$sum.tar"
  if [[ ! -f "$base" ]]; then
    echo "making the $platform base with mmdebstrap" >&2
    mmdebstrap --quiet --variant=minbase --format=tar --architectures="$arch" \
      --include="$(IFS=,; echo "${packages[*]}")" bookworm "$base.partial"
    mv "$base.partial" "$base"
    echo "$platform base made in $((SECONDS - start)) s: $(stat -c %s "$base") bytes" >&2
  fi
  baseimage="localhost/nodeinit-node-base:bookworm-$arch"
  podman import --quiet --os linux --arch "$arch" "$base" "$baseimage" >/dev/null
  kvar="KUBE_BIN_$arch"
  kube="${!kvar:-}"
  if [[ -z "$kube" && "$arch" == "$hostarch" ]]; then
    kube="$("$root/test/k8s/build/build.sh" | tail -n 1)"
  elif [[ -z "$kube" ]]; then
    kube="$("$root/test/arch/kube-node.sh" "$arch" | tail -n 1)"
  fi
  ctx="$root/bin/node-image-context/$arch"
  rm -rf "$ctx" && mkdir -p "$ctx/bin" "$ctx/images/node"
  cp "$root/bin/linux_$arch/nodeinit" "$kube/kubelet" "$kube/kube-proxy" "$ctx/bin/"
  cp "$root/images/node/config.yaml" "$root/images/node/machine-id" "$ctx/images/node/"
  podman build --quiet -f "$root/images/node/Dockerfile" --platform "$platform" --label "$label" \
    --build-arg BASE="$baseimage" --build-arg VERSION="$version" --manifest "$index" "$ctx" >/dev/null
  rm -rf "$ctx"
  echo "$platform node image in $((SECONDS - start)) s: $(podman image inspect --format '{{.Size}}' "$baseimage") bytes of base" >&2
  bases+=("$baseimage")
done
start=$SECONDS
rm -f "$archive"
podman manifest push --quiet --all --format oci "$index" "oci-archive:$archive"
echo "written in $((SECONDS - start)) s: $archive, $(stat -c %s "$archive") bytes" >&2
podman manifest rm "$index" >/dev/null
podman image prune --force --filter "label=$label" >/dev/null
podman rmi "${bases[@]}" >/dev/null
echo "$archive"
