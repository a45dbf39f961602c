#!/usr/bin/env bash
# Builds Kubernetes' own end-to-end suite, e2e.test, agnhost, the program
# of the suite's test image, and ginkgo, the command that runs the suite's
# specs on several processes, from the Go module proxy, into a cache
# directory outside the work tree, and prints the directory on the last
# line; a cached build is reused.
#
#   test/k8s/conformance/build.sh [--cached] [CACHE_ROOT]
#
# test/k8s/conformance is a Go module of its own whose go.mod is
# test/k8s/build's plus what the suite needs (ginkgo, gomega and their
# few dependencies), so the Kubernetes packages are the same versions
# make k8s compiles. e2e.test is the test binary of
# k8s.io/kubernetes/test/e2e, built with the flags test/k8s/build/build.sh
# gives the Kubernetes commands (CGO_ENABLED=0, -trimpath, the machine's own
# Go, the same version stamps): the packages they share come from the Go
# build cache make k8s filled, and only the suite's own are compiled. The
# cache directory is keyed on the release, the Go version, the flags, go.mod
# and go.sum, like build.sh's, and sits beside its builds.
#
# With --cached it builds nothing: it prints the directory of a complete
# build, or fails with exit code 3 when there is none.
set -euo pipefail
cached_only=
if [[ "${1:-}" == --cached ]]; then
  cached_only=1
  shift
fi
cd "$(dirname "$0")"

version="$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3} $1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2}' go.mod | head -1)"
[[ "$version" =~ ^v([0-9]+)\.([0-9]+)\.[0-9]+$ ]] || { echo "build.sh: no k8s.io/kubernetes version in $PWD/go.mod" >&2; exit 1; }
major="${BASH_REMATCH[1]}" minor="${BASH_REMATCH[2]}"

# The same stamps as test/k8s/build/build.sh: the suite reports the
# release it is, and a flag that differs from build.sh's would make the
# build cache miss where it need not.
stamp="k8s.io/component-base/version"
client="k8s.io/client-go/pkg/version"
ldflags="-s -w"
for pkg in "$stamp" "$client"; do
  ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
export GOTOOLCHAIN=local CGO_ENABLED=0
goversion="$(go env GOVERSION)"
key="$(printf '%s\n' "$version" "$goversion" "$ldflags" e2e.test agnhost ginkgo "$(cat go.mod go.sum)" | sha256sum | cut -c1-12)"
root="${1:-${NODEINIT_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nodeinit/k8s}}"
out="$root/conformance-$version-$goversion-$key"

if [[ -f "$out/.complete" ]]; then
  echo "$out"
  exit 0
fi
if [[ -n "$cached_only" ]]; then
  echo "build.sh: the conformance suite of Kubernetes $version is not built ($out is missing or incomplete): make conformance builds it" >&2
  exit 3
fi
mkdir -p "$out"
start=$SECONDS
echo "building e2e.test $version with $goversion" >&2
go test -c -mod=readonly -trimpath -ldflags "$ldflags" -o "$out/e2e.test" k8s.io/kubernetes/test/e2e
echo "built e2e.test in $((SECONDS - start)) s" >&2
t=$SECONDS
echo "building agnhost $version with $goversion" >&2
go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$out/agnhost" k8s.io/kubernetes/test/images/agnhost
echo "built agnhost in $((SECONDS - t)) s" >&2
t=$SECONDS
go build -mod=readonly -trimpath -ldflags "-s -w" -o "$out/ginkgo" github.com/onsi/ginkgo/v2/ginkgo
echo "built ginkgo in $((SECONDS - t)) s" >&2
# What agnhost's image carries beside the program: the certificate and key
# of its porter, from the same release.
src="$(go list -mod=readonly -f '{{.Dir}}' k8s.io/kubernetes/test/images/agnhost)"
mkdir -p "$out/agnhost-files"
cp "$src/porter/localhost.crt" "$src/porter/localhost.key" "$src/VERSION" "$out/agnhost-files/"
printf '%s\n' "$version" > "$out/VERSION"
touch "$out/.complete"
echo "built $version's suite in $((SECONDS - start)) s" >&2
echo "$out"
