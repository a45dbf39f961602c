#!/usr/bin/env bash
# Builds the Kubernetes binaries the real-node tests run, from the Go module
# proxy, at the release test/k8s/build/go.mod pins, and crictl (a module of
# its own, at crictl_version), into a cache directory outside the work tree
# keyed on those releases, the Go version and the build flags; a cached
# build is reused. Prints the directory on the last line.
#
#   test/k8s/build/build.sh [--cached] [CACHE_ROOT]
#
# With --cached it builds nothing: it prints the directory of a complete
# build, or fails with exit code 3 when there is none.
set -euo pipefail
cached_only=
if [[ "${1:-}" == --cached ]]; then
  cached_only=1
  shift
fi
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

version="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2} $1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' go.mod | head -1)"
[[ "$version" =~ ^v([0-9]+)\.([0-9]+)\.[0-9]+$ ]] || { echo "build.sh: no k8s.io/kubernetes version in go.mod" >&2; exit 1; }
major="${BASH_REMATCH[1]}" minor="${BASH_REMATCH[2]}"
commands=(kubelet kube-proxy kube-apiserver kube-controller-manager kube-scheduler kubectl)
# crictl removes the tests' pods through the CRI: pods outlive the kubelet.
crictl_version=v1.34.0
crictl_ldflags="-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$crictl_version"

stamp="k8s.io/component-base/version"
client="k8s.io/client-go/pkg/version"
ldflags="-s -w"
for pkg in "$stamp" "$client"; do
  ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
goversion="$(go env GOVERSION)"
key="$(printf '%s\n' "$version" "$goversion" "$ldflags" "${commands[*]}" "$crictl_version" "$crictl_ldflags" "$(cat go.mod go.sum)" | sha256sum | cut -c1-12)"
root="${1:-${NODEINIT_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nodeinit/k8s}}"
out="$root/$version-$goversion-$key"

if [[ -f "$out/.complete" ]]; then
  echo "$out"
  exit 0
fi
if [[ -n "$cached_only" ]]; then
  echo "build.sh: the Kubernetes binaries are not built ($out is missing or incomplete): make k8s builds them" >&2
  exit 3
fi
mkdir -p "$out"
start=$SECONDS
for cmd in "${commands[@]}"; do
  echo "building $cmd $version with $goversion" >&2
  CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$out/$cmd" "k8s.io/kubernetes/cmd/$cmd"
done
echo "building crictl $crictl_version with $goversion" >&2
GOBIN="$out" CGO_ENABLED=0 go install -trimpath -ldflags "$crictl_ldflags" "sigs.k8s.io/cri-tools/cmd/crictl@$crictl_version"
printf '%s\n' "$version" > "$out/VERSION"
touch "$out/.complete"
echo "built in $((SECONDS - start)) s" >&2
echo "$out"
