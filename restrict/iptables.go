package restrict

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nodeinit/nodeinit/config"
)

// xtables is what the kernel holds of iptables rules in this network
// namespace, by backend: the legacy tables (ip_tables) and the nftables
// tables iptables-nft uses.
type xtables struct {
	// legacyHints, nftHints: the kubelet's hint chains (KUBE-IPTABLES-HINT,
	// KUBE-KUBELET-CANARY) are in that backend's mangle table.
	legacyHints, nftHints bool
	// legacyRules, nftRules count the rules and user chains of each.
	legacyRules, nftRules int
}

// The kubelet's chains that say which backend a node's iptables use
// (kubernetes-sigs/iptables-wrappers v3 looks for these first).
var kubeletHintChains = []string{"KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"}

// iptablesTables are the tables iptables-nft keeps its rules in, in the
// ip and ip6 families.
var iptablesTables = []string{"filter", "nat", "mangle", "raw", "security"}

// chooseBackend picks the backend the node's iptables must use, as
// kube-proxy's own images do: the kubelet's hint chains first, then the
// backend that holds more rules, nft when nothing tells.
func chooseBackend(x xtables) (backend, why string) {
	switch {
	case x.nftHints:
		return config.IPTablesNFT, "the kubelet's hint chains are in the nftables tables"
	case x.legacyHints:
		return config.IPTablesLegacy, "the kubelet's hint chains are in the legacy tables"
	case x.legacyRules > x.nftRules:
		return config.IPTablesLegacy, fmt.Sprintf("the legacy tables hold the rules (%d, nft %d)", x.legacyRules, x.nftRules)
	case x.nftRules > 0:
		return config.IPTablesNFT, fmt.Sprintf("the nftables tables hold the rules (%d, legacy %d)", x.nftRules, x.legacyRules)
	}
	return config.IPTablesNFT, "no rules in either backend, and nft is the default"
}

// iptablesCommands are the commands the kubelet and kube-proxy run, each a
// name xtables-<backend>-multi answers to.
var iptablesCommands = []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"}

// iptablesDir is where nodeinit links the chosen backend's commands, first
// in the children's PATH: a directory of its own below it, made by Apply
// and removed by Close, so that two nodes on one host never share one.
const iptablesDir = "/run"

// multiBinary is xtables-<backend>-multi in the container's /usr/sbin or
// /sbin, as the container sees it; empty when it has none.
func (h *host) multiBinary(backend string) string {
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		p := filepath.Join(dir, "xtables-"+backend+"-multi")
		if fi, err := os.Stat(h.path(p)); err == nil && fi.Mode().IsRegular() {
			return p
		}
	}
	return ""
}

// checkIPTables puts the iptables commands of the backend the network
// namespace's rules are in first in the children's PATH: commands of the
// other backend make rules the host's firewall and Services silently
// disagree with. An operator's --iptables-backend is taken as it is.
func checkIPTables(p *Plan, h *host, in Input) {
	if !isKubelet(in) && !isKubeProxy(in) {
		return
	}
	backend, why := in.Config.ContainerChecks.IPTablesBackend, "the operator's --iptables-backend"
	switch backend {
	case config.IPTablesNone:
		return
	case config.IPTablesAuto:
		// A namespace of an outer user namespace cannot be read or
		// programmed from here at all; checkConntrack says so.
		if in.Config.ContainerChecks.Skips(config.CheckIPTables) || h.foreignNetns {
			return
		}
		if h.multiBinary(config.IPTablesLegacy) == "" || h.multiBinary(config.IPTablesNFT) == "" {
			return // one backend or none: nothing to choose
		}
		x, err := h.xtables()
		if err != nil {
			p.warn("Cannot tell which iptables backend this network namespace uses (%v): the image's default iptables stays", err)
			return
		}
		backend, why = chooseBackend(x)
	}
	bin := h.multiBinary(backend)
	if bin == "" {
		p.warn("--iptables-backend=%s, but the container has no xtables-%s-multi in /usr/sbin or /sbin: the image's default iptables stays", backend, backend)
		return
	}
	p.iptables = bin
	p.adjust(config.CheckIPTables, "iptables commands of the "+backend+" backend ("+bin+") first in the children's PATH",
		"%s; the kubelet's and kube-proxy's rules must be in the backend the namespace's other rules are in", why)
}

// Environ is env with the plan's directory first in PATH, for the
// children; env itself is not changed.
func (p Plan) Environ(env []string) []string {
	if p.pathFirst == "" {
		return env
	}
	out := make([]string, 0, len(env)+1)
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
			continue
		}
		out = append(out, kv)
	}
	if path == "" {
		return append(out, "PATH="+p.pathFirst)
	}
	return append(out, "PATH="+p.pathFirst+string(filepath.ListSeparator)+path)
}
