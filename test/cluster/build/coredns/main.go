// Command coredns is CoreDNS built with the plugins of the Corefile
// kubeadm deploys (and the cluster's): upstream's main, coredns.go, with
// the plugin list of a Kubernetes cluster's DNS in place of all of
// core/plugin, whose cloud back ends (Route 53, Azure, Cloud DNS) would
// multiply the build for nothing a cluster on one machine uses. Building
// CoreDNS with a plugin list of one's own is upstream's documented way
// (plugin.cfg); the directives' order stays upstream's
// (core/dnsserver/zdirectives.go).
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
	_ "github.com/coredns/coredns/plugin/rewrite"
	_ "github.com/coredns/coredns/plugin/whoami"
)

func main() {
	coremain.Run()
}
