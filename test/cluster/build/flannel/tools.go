//go:build tools

// Package flannel pins the flannel release the cluster's pod network runs:
// flanneld and install-conf, the programs of flannel's own image. It is a
// module of its own, so none of flannel enters nodeinit's go.mod; this file
// only lets `go mod tidy` record every module they need. build.sh builds
// them: install-conf as it is, flanneld from flannel's own main.go without
// its tencentvpc backend, whose cloud SDK the Go module proxy does not
// serve, and its udp backend, which needs cgo on amd64 (the packages below
// are the rest of what that main.go imports).
package flannel

import (
	_ "github.com/coreos/go-systemd/v22/daemon"
	_ "github.com/coreos/pkg/flagutil"
	_ "github.com/flannel-io/flannel/cmd/install_conf"
	_ "github.com/flannel-io/flannel/pkg/backend"
	_ "github.com/flannel-io/flannel/pkg/backend/alloc"
	_ "github.com/flannel-io/flannel/pkg/backend/extension"
	_ "github.com/flannel-io/flannel/pkg/backend/hostgw"
	_ "github.com/flannel-io/flannel/pkg/backend/ipip"
	_ "github.com/flannel-io/flannel/pkg/backend/ipsec"
	_ "github.com/flannel-io/flannel/pkg/backend/vxlan"
	_ "github.com/flannel-io/flannel/pkg/backend/wireguard"
	_ "github.com/flannel-io/flannel/pkg/ip"
	_ "github.com/flannel-io/flannel/pkg/ipmatch"
	_ "github.com/flannel-io/flannel/pkg/subnet"
	_ "github.com/flannel-io/flannel/pkg/subnet/etcd"
	_ "github.com/flannel-io/flannel/pkg/subnet/kube"
	_ "github.com/flannel-io/flannel/pkg/trafficmngr"
	_ "github.com/flannel-io/flannel/pkg/trafficmngr/iptables"
	_ "github.com/flannel-io/flannel/pkg/trafficmngr/nftables"
	_ "github.com/flannel-io/flannel/pkg/version"
	_ "github.com/joho/godotenv"
	_ "k8s.io/klog/v2"
)
