#!/usr/bin/env bash
# Builds the programs of the cluster's pod network, DNS and store from the Go
# module proxy, into a cache directory outside the work tree, and prints the
# directory on the last line; a cached build is reused.
#
#   test/cluster/build/build.sh [--cached] [CACHE_ROOT]
#
# Each program comes from a Go module of its own here, none of it in
# nodeinit's go.mod:
#   flannel/  flanneld and install-conf (github.com/flannel-io/flannel);
#             flanneld from flannel's own main.go less two backends: the
#             tencentvpc one, whose cloud SDK the proxy does not serve, and
#             the udp one, which needs cgo on amd64 (flannel's own build
#             leaves it out elsewhere)
#   cni/      the flannel CNI plugin (containernetworking/plugins'
#             plugins/meta/flannel, what flannel-io/cni-plugin was forked
#             from; that module is not served)
#   coredns/  coredns (github.com/coredns/coredns) with the plugins a
#             cluster's Corefile uses (main.go there)
#   etcd/     etcd (go.etcd.io/etcd/server/v3) of the version the Kubernetes
#             release pins, the control plane's store
# The cache directory is keyed on the Go version, the flags and the four
# modules' go.mod and go.sum. With --cached it builds nothing: it prints the
# directory of a complete build, or fails with exit code 3.
set -euo pipefail
cached_only=
if [[ "${1:-}" == --cached ]]; then cached_only=1; shift; fi
here="$(cd "$(dirname "$0")" && pwd)"

version() { # MODULE DIR: the version DIR/go.mod requires of MODULE
  awk -v m="$1" '($1 == m && $2 ~ /^v/) {print $2} ($1 == "require" && $2 == m) {print $3}' "$2/go.mod" | head -1
}
flannel="$(version github.com/flannel-io/flannel "$here/flannel")"
cni="$(version github.com/containernetworking/plugins "$here/cni")"
coredns="$(version github.com/coredns/coredns "$here/coredns")"
etcd="$(version go.etcd.io/etcd/server/v3 "$here/etcd")"
ldflags="-s -w"
# Built with the machine's own Go, as the Kubernetes binaries are: test
# fixtures, not shipped.
export GOTOOLCHAIN=local CGO_ENABLED=0
goversion="$(go env GOVERSION)"
key="$(printf '%s\n' "$goversion" "$ldflags" "$flannel" "$cni" "$coredns" "$etcd" \
  "$(cat "$here"/flannel/go.mod "$here"/flannel/go.sum "$here"/cni/go.mod "$here"/cni/go.sum "$here"/coredns/go.mod "$here"/coredns/go.sum "$here"/coredns/main.go \
    "$here"/etcd/go.mod "$here"/etcd/go.sum)" | sha256sum | cut -c1-12)"
root="${1:-${NODEINIT_CLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nodeinit/cluster}}"
out="$root/flannel-$flannel-coredns-$coredns-etcd-$etcd-$goversion-$key"

if [[ -f "$out/.complete" ]]; then
  echo "$out"
  exit 0
fi
if [[ -n "$cached_only" ]]; then
  echo "build.sh: flannel $flannel, CoreDNS $coredns and etcd $etcd are not built ($out is missing or incomplete): make cluster-build builds them" >&2
  exit 3
fi
mkdir -p "$out"
start=$SECONDS

echo "building flanneld and install-conf $flannel with $goversion" >&2
# go list names the module's directory only once it is downloaded.
(cd "$here/flannel" && go mod download github.com/flannel-io/flannel)
src="$(cd "$here/flannel" && go list -mod=readonly -m -f '{{.Dir}}' github.com/flannel-io/flannel)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cp "$here/flannel/go.mod" "$here/flannel/go.sum" "$tmp/"
grep -v -e '"github.com/flannel-io/flannel/pkg/backend/tencentvpc"' -e '"github.com/flannel-io/flannel/pkg/backend/udp"' "$src/main.go" > "$tmp/main.go"
(cd "$tmp" && go build -mod=readonly -trimpath \
  -ldflags "$ldflags -X github.com/flannel-io/flannel/pkg/version.Version=$flannel" -o "$out/flanneld" .)
(cd "$here/flannel" && go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$out/install-conf" github.com/flannel-io/flannel/cmd/install_conf)

echo "building the flannel CNI plugin (containernetworking/plugins $cni) with $goversion" >&2
(cd "$here/cni" && go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$out/flannel" github.com/containernetworking/plugins/plugins/meta/flannel)

echo "building coredns $coredns with $goversion" >&2
(cd "$here/coredns" && go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$out/coredns" .)

echo "building etcd $etcd with $goversion" >&2
(cd "$here/etcd" && go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$out/etcd" go.etcd.io/etcd/server/v3)

printf 'flannel %s\nflannel CNI plugin %s\ncoredns %s\netcd %s\n' "$flannel" "$cni" "$coredns" "$etcd" > "$out/VERSION"
touch "$out/.complete"
echo "built in $((SECONDS - start)) s" >&2
echo "$out"
