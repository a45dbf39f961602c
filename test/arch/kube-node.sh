#!/usr/bin/env bash
# Builds the node binaries of the real-node tests' Kubernetes release (the
# kubelet and kube-proxy that test/k8s/build pins) for another architecture,
# for the node image's index (make image-index), into a cache directory
# outside the work tree, and prints the directory on the last line; a cached
# build is reused.
#
#   test/arch/kube-node.sh GOARCH [CACHE_ROOT]
#
# test/k8s/build/build.sh builds the host's; its cache is keyed without the
# architecture, so a cross build must not go there. The flags are build.sh's:
# the same release, Go (the machine's, GOTOOLCHAIN=local) and version stamp.
set -euo pipefail
goarch="${1:?usage: kube-node.sh GOARCH [CACHE_ROOT]}"
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../k8s/build"

version="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2} $1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' go.mod | head -1)"
[[ "$version" =~ ^v([0-9]+)\.([0-9]+)\.[0-9]+$ ]] || { echo "kube-node.sh: no k8s.io/kubernetes version in $PWD/go.mod" >&2; exit 1; }
major="${BASH_REMATCH[1]}" minor="${BASH_REMATCH[2]}"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
export GOTOOLCHAIN=local
goversion="$(go env GOVERSION)"
key="$(printf '%s\n' "$version" "$goversion" "$goarch" "$ldflags" "$(cat go.mod go.sum)" | sha256sum | cut -c1-12)"
root="${2:-${NODEINIT_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nodeinit/k8s}}"
out="$root/node-$version-$goversion-linux_$goarch-$key"
if [[ -f "$out/.complete" ]]; then
  echo "$out"
  exit 0
fi
mkdir -p "$out"
start=$SECONDS
for cmd in kubelet kube-proxy; do
  echo "building $cmd $version for linux/$goarch with $goversion" >&2
  GOOS=linux GOARCH="$goarch" CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$out/$cmd" "k8s.io/kubernetes/cmd/$cmd"
done
printf '%s\n' "$version" > "$out/VERSION"
touch "$out/.complete"
echo "built $version for linux/$goarch in $((SECONDS - start)) s" >&2
echo "$out"
