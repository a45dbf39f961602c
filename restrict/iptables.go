package restrict

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/config"
	"github.com/nodeinit/nodeinit/internal/linux"
)

// xtables is what the kernel holds of iptables rules in this network
// namespace, by backend: the legacy tables (ip_tables) and the nftables
// tables iptables-nft uses. Each backend is read on its own: one that
// cannot be read leaves the other's answer.
type xtables struct {
	legacy, nft backendRules
}

// backendRules is one backend's answer.
type backendRules struct {
	// count is its rules and user chains, each user chain once (as
	// iptables-save lists a chain once).
	count int
	// hints: one of the kubelet's hint chains (KUBE-IPTABLES-HINT,
	// KUBE-KUBELET-CANARY) is in its mangle table.
	hints bool
	// err, when set, is why it could not be read; count and hints are
	// then unknown.
	err error
}

// The kubelet's chains that say which backend a node's iptables use
// (kubernetes-sigs/iptables-wrappers v3 looks for these first).
var kubeletHintChains = []string{"KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"}

// iptablesTables are the tables iptables-nft keeps its rules in, in the
// ip and ip6 families.
var iptablesTables = []string{"filter", "nat", "mangle", "raw", "security"}

// chooseBackend picks the backend the node's iptables must use, as
// kube-proxy's own images do: the kubelet's hint chains first, then the
// backend that holds more rules, nft when nothing tells. A backend that
// cannot be read counts for nothing: the other one's hints or rules
// decide; backend is empty when nothing can (why says what was seen).
func chooseBackend(x xtables) (backend, why string) {
	l, n := x.legacy, x.nft
	switch {
	case n.err == nil && n.hints:
		return config.IPTablesNFT, "the kubelet's hint chains are in the nftables tables" + unread("legacy", l.err)
	case l.err == nil && l.hints:
		return config.IPTablesLegacy, "the kubelet's hint chains are in the legacy tables" + unread("nftables", n.err)
	case l.err != nil && n.err != nil:
		return "", fmt.Sprintf("the legacy tables cannot be read (%v), nor the nftables tables (%v)", l.err, n.err)
	case l.err != nil && n.count > 0:
		return config.IPTablesNFT, fmt.Sprintf("the nftables tables hold the rules (%d); the legacy tables cannot be read (%v)", n.count, l.err)
	case l.err != nil:
		return "", fmt.Sprintf("the nftables tables hold no rules and the legacy tables cannot be read (%v)", l.err)
	case n.err != nil && l.count > 0:
		return config.IPTablesLegacy, fmt.Sprintf("the legacy tables hold the rules (%d); the nftables tables cannot be read (%v)", l.count, n.err)
	case n.err != nil:
		return "", fmt.Sprintf("the legacy tables hold no rules and the nftables tables cannot be read (%v)", n.err)
	case l.count > n.count:
		return config.IPTablesLegacy, fmt.Sprintf("the legacy tables hold the rules (%d, nft %d)", l.count, n.count)
	case n.count > 0:
		return config.IPTablesNFT, fmt.Sprintf("the nftables tables hold the rules (%d, legacy %d)", n.count, l.count)
	}
	return config.IPTablesNFT, "no rules in either backend, and nft is the default"
}

// unread says that the tables of a backend cannot be read, and why.
func unread(backend string, err error) string {
	if err == nil {
		return ""
	}
	return fmt.Sprintf("; the %s tables cannot be read (%v)", backend, err)
}

// xtablesSource is where the probe reads a network namespace's iptables
// rules from: the kernel (kernelXtables), or a test's values.
type xtablesSource interface {
	// legacyTableNames lists the legacy tables in use of a family
	// (AF_INET, AF_INET6): /proc's ip_tables_names, ip6_tables_names.
	legacyTableNames(family int) ([]string, error)
	// legacyTable is a legacy table's IPT_SO_GET_INFO answer and the
	// entries of its IPT_SO_GET_ENTRIES answer (after its header). An
	// error wrapping EAGAIN says the table changed between the two.
	legacyTable(family int, table string) (info, entries []byte, err error)
	// nftDump is the objects of one nftables dump (NFT_MSG_GETCHAIN or
	// NFT_MSG_GETRULE); interrupted says the kernel marked it
	// NLM_F_DUMP_INTR: the rule set changed while it was read.
	nftDump(msg uint16) (objs []nftObject, interrupted bool, err error)
}

// nftObject is one object of an nftables dump: its family and top-level
// attributes.
type nftObject struct {
	family uint8
	attrs  map[uint16][]byte
}

// Bounds on reading a rule set that changes while it is read: iptables
// reads a legacy table again, without a bound, when the kernel says
// EAGAIN (libiptc's TC_INIT), and iptables-nft a dump the kernel marked
// interrupted; nodeinit tries a few times, then says it cannot tell.
const (
	legacyAttempts = 10
	nftAttempts    = 10
)

// probeXtables reads both backends' rules from src.
func probeXtables(src xtablesSource) xtables {
	return xtables{legacy: probeLegacy(src), nft: probeNft(src)}
}

func probeLegacy(src xtablesSource) backendRules {
	var b backendRules
	for _, family := range []int{unix.AF_INET, unix.AF_INET6} {
		tables, err := src.legacyTableNames(family)
		if err != nil {
			return backendRules{err: err}
		}
		for _, t := range tables {
			var info, entries []byte
			for attempt := 1; ; attempt++ {
				info, entries, err = src.legacyTable(family, t)
				if !errors.Is(err, unix.EAGAIN) || attempt == legacyAttempts {
					break
				}
			}
			if err != nil {
				return backendRules{err: fmt.Errorf("legacy table %s: %w", t, err)}
			}
			count, hints, err := legacyCount(family, info, entries)
			if err != nil {
				return backendRules{err: fmt.Errorf("legacy table %s: %w", t, err)}
			}
			b.count += count
			b.hints = b.hints || hints && t == "mangle"
		}
	}
	return b
}

func probeNft(src xtablesSource) backendRules {
	for attempt := 1; ; attempt++ {
		chains, intr1, err := src.nftDump(unix.NFT_MSG_GETCHAIN)
		if err != nil {
			return backendRules{err: err}
		}
		rules, intr2, err := src.nftDump(unix.NFT_MSG_GETRULE)
		if err != nil {
			return backendRules{err: err}
		}
		if !intr1 && !intr2 {
			return nftCount(chains, rules)
		}
		if attempt == nftAttempts {
			return backendRules{err: fmt.Errorf("nftables changed while each of %d dumps was read", nftAttempts)}
		}
	}
}

// nftCount counts the rules and user chains of iptables-nft's tables in
// the ip and ip6 families, and finds the kubelet's hint chains. A base
// chain (one with a hook, as iptables-nft makes INPUT or PREROUTING) is
// no rule, as a built-in chain is not in the legacy tables.
func nftCount(chains, rules []nftObject) backendRules {
	var b backendRules
	ours := func(o nftObject) (table string, ok bool) {
		// NFTA_CHAIN_TABLE and NFTA_RULE_TABLE are both 1.
		table = cString(o.attrs[unix.NFTA_CHAIN_TABLE])
		return table, (o.family == unix.AF_INET || o.family == unix.AF_INET6) && slices.Contains(iptablesTables, table)
	}
	for _, c := range chains {
		table, ok := ours(c)
		if !ok {
			continue
		}
		if _, base := c.attrs[unix.NFTA_CHAIN_HOOK]; !base {
			b.count++
		}
		if table == "mangle" && slices.Contains(kubeletHintChains, cString(c.attrs[unix.NFTA_CHAIN_NAME])) {
			b.hints = true
		}
	}
	for _, r := range rules {
		if _, ok := ours(r); ok {
			b.count++
		}
	}
	return b
}

// The layout of the legacy tables' answers (linux/netfilter_ipv4/ip_tables.h,
// linux/netfilter_ipv6/ip6_tables.h, linux/netfilter/x_tables.h): struct
// ipt_getinfo's size and where it holds valid_hooks; the size of struct
// ipt_get_entries' header; where struct ipt_entry and ip6t_entry hold
// target_offset and next_offset, and their size without matches; the size
// of struct xt_entry_target's header and where it holds the target's name.
const (
	iptGetinfoSize       = 84
	iptGetinfoValidHooks = 32
	iptEntriesHead       = 40
	xtTableMaxName       = 32
	xtTargetHead         = 32
	xtTargetName         = 2
	xtExtensionMaxName   = 29
)

// entryLayout is where an entry of a family's table holds its offsets.
type entryLayout struct{ targetOffset, nextOffset, size int }

var entryLayouts = map[int]entryLayout{
	unix.AF_INET:  {targetOffset: 88, nextOffset: 90, size: 112},
	unix.AF_INET6: {targetOffset: 140, nextOffset: 142, size: 168},
}

// legacyCount counts one legacy table's rules and user chains from its
// IPT_SO_GET_INFO answer and its entries, and finds the kubelet's hint
// chains among them. The entries are each built-in chain's policy, every
// rule, each user chain's head (an ERROR target carrying its name) and
// tail (a RETURN), and a closing ERROR entry; a user chain counts once.
func legacyCount(family int, info, entries []byte) (count int, hints bool, err error) {
	layout, ok := entryLayouts[family]
	if !ok {
		return 0, false, fmt.Errorf("no legacy tables in family %d", family)
	}
	if len(info) < iptGetinfoSize {
		return 0, false, fmt.Errorf("table information of %d bytes, want %d", len(info), iptGetinfoSize)
	}
	ne := binary.NativeEndian
	hooks := bits.OnesCount32(ne.Uint32(info[iptGetinfoValidHooks:]))
	var n, heads int
	for off := 0; off < len(entries); {
		if len(entries)-off < layout.size {
			return 0, false, fmt.Errorf("entry at %d: %d bytes left, want at least %d", off, len(entries)-off, layout.size)
		}
		target := int(ne.Uint16(entries[off+layout.targetOffset:]))
		next := int(ne.Uint16(entries[off+layout.nextOffset:]))
		if next < layout.size || next > len(entries)-off || target < layout.size || target+xtTargetHead > next {
			return 0, false, fmt.Errorf("entry at %d: target at %d, next at %d in %d bytes", off, target, next, len(entries)-off)
		}
		t := entries[off+target : off+next]
		if cString(t[xtTargetName:xtTargetName+xtExtensionMaxName]) == "ERROR" {
			heads++
			hints = hints || slices.Contains(kubeletHintChains, cString(t[xtTargetHead:]))
		}
		n++
		off += next
	}
	// The closing ERROR entry is no chain's head.
	userChains := heads - 1
	count = n - hooks - 1 - userChains
	if heads == 0 || count < 0 {
		return 0, false, fmt.Errorf("%d entries, %d of them ERROR, for %d built-in chains: not a table", n, heads, hooks)
	}
	return count, hints, nil
}

// parseNftReply reads one netlink datagram of an nftables dump: its
// objects, whether it ends the dump (NLMSG_DONE, or an acknowledgement),
// and whether the kernel marked it interrupted.
func parseNftReply(buf []byte) (objs []nftObject, done, interrupted bool, err error) {
	msgs, err := syscall.ParseNetlinkMessage(buf)
	if err != nil {
		return nil, false, false, fmt.Errorf("nftables dump: %w", err)
	}
	const nfgenmsgLen = 4
	for _, m := range msgs {
		if m.Header.Flags&unix.NLM_F_DUMP_INTR != 0 {
			interrupted = true
		}
		switch m.Header.Type {
		case unix.NLMSG_DONE:
			return objs, true, interrupted, nil
		case unix.NLMSG_ERROR:
			if len(m.Data) >= 4 {
				if code := int32(binary.NativeEndian.Uint32(m.Data)); code != 0 {
					return nil, true, interrupted, fmt.Errorf("nftables dump: %w", unix.Errno(-code))
				}
			}
			return objs, true, interrupted, nil
		}
		if len(m.Data) < nfgenmsgLen {
			continue
		}
		objs = append(objs, nftObject{family: m.Data[0], attrs: netlinkAttrs(m.Data[nfgenmsgLen:])})
	}
	return objs, false, interrupted, nil
}

// netlinkAttrs splits netlink attributes by type (nested ones left whole).
func netlinkAttrs(b []byte) map[uint16][]byte {
	out := map[uint16][]byte{}
	for len(b) >= 4 {
		l := int(binary.NativeEndian.Uint16(b))
		if l < 4 || l > len(b) {
			break
		}
		out[binary.NativeEndian.Uint16(b[2:])&0x3fff] = b[4:l]
		b = b[min((l+3)&^3, len(b)):]
	}
	return out
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
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
func (ct *container) multiBinary(backend string) string {
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		p := filepath.Join(dir, "xtables-"+backend+"-multi")
		if linux.IsRegular(ct.path(p)) {
			return p
		}
	}
	return ""
}

// checkIPTables puts the iptables commands of the backend the network
// namespace's rules are in first in the children's PATH: commands of the
// other backend make rules the host's firewall and Services silently
// disagree with. An operator's --iptables-backend is taken as it is.
func checkIPTables(p *Plan, ct *container, in Input) {
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
		if in.Config.ContainerChecks.Skips(config.CheckIPTables) || ct.foreignNetns {
			return
		}
		if ct.multiBinary(config.IPTablesLegacy) == "" || ct.multiBinary(config.IPTablesNFT) == "" {
			return // one backend or none: nothing to choose
		}
		backend, why = chooseBackend(probeXtables(kernelXtables{ct}))
		if backend == "" {
			p.warn("Cannot tell which iptables backend this network namespace uses: %s; the image's default iptables stays (--iptables-backend names one)", why)
			return
		}
	}
	bin := ct.multiBinary(backend)
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
