#!/usr/bin/env bash
# Builds BusyBox 1.37.0 from its upstream source, as the Docker library's
# busybox image (the base of the e2e suite's) is built: `make defconfig`,
# linked statically. Debian's busybox-static is not that busybox: Debian
# reverts upstream's ash change that keeps environment variables whose
# names are not shell names ("1-data-1") for the shell's children, and the
# e2e suite's Secrets and ConfigMap specs read such variables back with
# `sh -c env`. The source is Debian's copy of the upstream tarball
# (busybox_1.37.0.orig.tar.bz2), checked against its SHA-256; no Debian
# patch is applied. tc is left out: it does not build against current
# kernel headers (upstream's defconfig fails there the same way).
#
#   images/busybox/build.sh [CACHE_ROOT]
#
# Prints the directory holding the static busybox on the last line; a
# finished build is reused. Needs curl, bzip2, make, gcc and libc6-dev.
set -euo pipefail
version=1.37.0
sha256=3311dff32e746499f4df0d5df04d7eb396382d7e108bb9250e7b519b837043a4
url="https://deb.debian.org/debian/pool/main/b/busybox/busybox_${version}.orig.tar.bz2"
root="${1:-${NODEINIT_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nodeinit/k8s}}"
out="$root/busybox-$version-${sha256:0:12}"
if [[ -x "$out/busybox" ]]; then
  echo "$out"
  exit 0
fi
for tool in curl bzip2 make gcc; do
  command -v "$tool" >/dev/null || { echo "build.sh: $tool is missing (apt-get install curl bzip2 make gcc libc6-dev)" >&2; exit 1; }
done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
start=$SECONDS
curl -fsSL --retry 3 -o "$work/src.tar.bz2" "$url"
echo "$sha256  $work/src.tar.bz2" | sha256sum --check --quiet
mkdir "$work/src"
tar -xjf "$work/src.tar.bz2" -C "$work/src" --strip-components=1
cd "$work/src"
make defconfig >/dev/null
sed -i 's/^# CONFIG_STATIC is not set/CONFIG_STATIC=y/; s/^CONFIG_TC=y/# CONFIG_TC is not set/' .config
make -j"$(nproc)" >"$work/make.log" 2>&1 || { tail -n 30 "$work/make.log" >&2; exit 1; }
mkdir -p "$out.partial"
cp busybox "$out.partial/busybox"
rm -rf "$out"
mv "$out.partial" "$out"
echo "built busybox $version in $((SECONDS - start)) s" >&2
echo "$out"
