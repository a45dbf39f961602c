#!/usr/bin/env bash
# Builds the Kubernetes binaries the real-node tests run, from the Go module
# proxy, into a cache directory outside the work tree, and prints the
# directory on the last line; a cached build is reused.
#
#   test/k8s/build/build.sh [--cached] [--release DIR] [CACHE_ROOT]
#
# Each release is a Go module of its own: test/k8s/build itself pins the
# release the suite runs (control plane, kubelet, kube-proxy, kubectl, and
# crictl at crictl_version), and a subdirectory such as test/k8s/build/v1.35
# pins an older node release (kubelet and kube-proxy only) that the suite
# also runs against that control plane. --release DIR (relative to
# test/k8s/build) picks one; the default is test/k8s/build. The commands
# built are the ones the module's tools.go imports, so a release builds only
# what it needs. The cache directory is keyed on the release, the Go version,
# the build flags, the commands, go.mod and go.sum.
#
# With --cached it builds nothing: it prints the directory of a complete
# build, or fails with exit code 3 when there is none.
set -euo pipefail
cached_only= release=.
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cached) cached_only=1; shift ;;
    --release) release="${2:?--release needs a directory}"; shift 2 ;;
    --release=*) release="${1#--release=}"; shift ;;
    *) break ;;
  esac
done
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/$release" || { echo "build.sh: no release module $here/$release" >&2; exit 1; }

version="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2} $1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' go.mod | head -1)"
[[ "$version" =~ ^v([0-9]+)\.([0-9]+)\.[0-9]+$ ]] || { echo "build.sh: no k8s.io/kubernetes version in $PWD/go.mod" >&2; exit 1; }
major="${BASH_REMATCH[1]}" minor="${BASH_REMATCH[2]}"
# The commands: k8s.io/kubernetes/cmd/X/app in tools.go builds X;
# k8s.io/kubectl/pkg/cmd builds kubectl.
mapfile -t commands < <(sed -n -e 's|^[[:space:]]*_ "k8s.io/kubernetes/cmd/\([a-z-]*\)/app"$|\1|p' \
  -e 's|^[[:space:]]*_ "k8s.io/kubectl/pkg/cmd"$|kubectl|p' tools.go)
[[ ${#commands[@]} -gt 0 ]] || { echo "build.sh: $PWD/tools.go imports no Kubernetes command" >&2; exit 1; }
# crictl removes the tests' pods through the CRI (pods outlive the kubelet):
# one is enough, built with the release that carries the control plane. So
# is containerd 2 (containerd, its runc shim and ctr, in containerd-VERSION/
# beside the Kubernetes binaries), the runtime that reports its cgroup
# driver to the kubelet over the CRI, which the distribution's containerd
# 1.6 does not; built without cgo, so without the btrfs snapshotter.
crictl_version= crictl_ldflags= containerd_version= containerd_ldflags=
if [[ "$release" == . ]]; then
  crictl_version=v1.37.0
  crictl_ldflags="-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$crictl_version"
  containerd_version=v2.4.2
  containerd_ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=${containerd_version#v}"
fi

stamp="k8s.io/component-base/version"
client="k8s.io/client-go/pkg/version"
ldflags="-s -w"
for pkg in "$stamp" "$client"; do
  ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
# Kubernetes is built with the machine's own Go, not the newer release the
# Makefile exports for nodeinit: these binaries are the tests' fixtures, not
# shipped, and a new Go would rebuild them (about 25 minutes) for nothing.
export GOTOOLCHAIN=local
goversion="$(go env GOVERSION)"
key="$(printf '%s\n' "$version" "$goversion" "$ldflags" "${commands[*]}" "$crictl_version" "$crictl_ldflags" "$containerd_version" "$containerd_ldflags" "$(cat go.mod go.sum)" | sha256sum | cut -c1-12)"
root="${1:-${NODEINIT_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nodeinit/k8s}}"
out="$root/$version-$goversion-$key"

if [[ -f "$out/.complete" ]]; then
  echo "$out"
  exit 0
fi
if [[ -n "$cached_only" ]]; then
  echo "build.sh: the Kubernetes $version binaries are not built ($out is missing or incomplete): make k8s builds them" >&2
  exit 3
fi
mkdir -p "$out"
start=$SECONDS
# The commands in one go build: what they share is compiled once either
# way (the build cache), but one build also links a command while it
# compiles the packages of another, where a build per command leaves a core
# idle through each link (28 s of 51 for the six links alone).
echo "building ${commands[*]} $version with $goversion" >&2
CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$out/" "${commands[@]/#/k8s.io/kubernetes/cmd/}"
# crictl and containerd are modules of their own, built one beside the
# other: each build's tail (its few last packages, its link) leaves a core
# to the other.
pids=()
if [[ -n "$crictl_version" ]]; then
  echo "building crictl $crictl_version with $goversion" >&2
  GOBIN="$out" CGO_ENABLED=0 go install -trimpath -ldflags "$crictl_ldflags" "sigs.k8s.io/cri-tools/cmd/crictl@$crictl_version" &
  pids+=($!)
fi
if [[ -n "$containerd_version" ]]; then
  echo "building containerd $containerd_version with $goversion" >&2
  mod=github.com/containerd/containerd/v2/cmd
  GOBIN="$out/containerd-$containerd_version" CGO_ENABLED=0 go install -trimpath -tags no_btrfs,no_devmapper,no_zfs -ldflags "$containerd_ldflags" \
    "$mod/containerd@$containerd_version" "$mod/containerd-shim-runc-v2@$containerd_version" "$mod/ctr@$containerd_version" &
  pids+=($!)
fi
for pid in "${pids[@]}"; do
  wait "$pid"
done
printf '%s\n' "$version" > "$out/VERSION"
touch "$out/.complete"
echo "built $version in $((SECONDS - start)) s" >&2
echo "$out"
