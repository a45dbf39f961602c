//go:build k8s

package k8s

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/cgroups"
)

// hostSysctls are the kernel settings a node changes: the kubelet's kernel
// tunables (it sets them unless protectKernelDefaults), forwarding (the
// CNI bridge's gateway turns it on), and kube-proxy's (the tests pass the
// flags that leave them alone; they are checked all the same).
var hostSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
	"net/ipv4/ip_forward", "net/ipv4/conf/all/forwarding", "net/ipv6/conf/all/forwarding",
	"net/ipv4/conf/all/route_localnet",
	"net/netfilter/nf_conntrack_max", "net/netfilter/nf_conntrack_tcp_timeout_established",
	"net/netfilter/nf_conntrack_tcp_timeout_close_wait",
	"net/bridge/bridge-nf-call-iptables", "net/bridge/bridge-nf-call-ip6tables",
}

// hostPaths are the files and directories a node makes outside the
// fixture's own directory: the kubelet's root, pod logs, CNI's cache,
// containerd's shim sockets and the CRI plugin's network namespaces, the
// iptables lock, and the kubelet's default plugin directories.
var hostPaths = []string{
	"/var/lib/kubelet", "/var/log/pods", "/var/log/containers", "/var/lib/cni", "/run/containerd", "/run/netns",
	"/run/xtables.lock", "/opt/containerd", "/usr/libexec/kubernetes", "/etc/kubernetes", "/run/kubernetes",
	"/var/lib/kube-proxy", "/etc/cni/net.d", "/opt/cni",
}

// mountPrefixes are where the node mounts: the kubelet's volumes, the
// CRI plugin's network namespaces, containerd's state.
var mountPrefixes = []string{"/var/lib/kubelet", "/run/netns", "/run/containerd"}

// hostState is what the tests compare before and after: the parts of the
// host a node changes. A fixture whose nodes all run in guests
// (guestsOnly) owns only its network namespace: then hostState holds the
// state of that namespace alone (its links, nftables tables and per-namespace
// sysctls), and the host's cgroups, mounts, paths and kernel-wide settings
// are another run's to check.
type hostState struct {
	network bool              // the network namespace's state only
	sysctls map[string]string // "" when the setting does not exist
	tables  map[string]string // nftables table ("ip filter") -> its listing; iptables-nft rules live here too
	links   []string
	cgroups []string // cgroup directories named in cgroupNames, per hierarchy
	mounts  []string // mount points under mountPrefixes (and extra)
	paths   map[string]bool
}

// cgroupNames are the top-level cgroups a node makes: the kubelet's
// /kubepods, and the cgroups a test makes for it (added by trackCgroup).
var cgroupNames = []string{"kubepods"}

// trackCgroup adds name to cgroupNames, once: a test run again in the same
// process (go test -count) names the same cgroups again.
func trackCgroup(name string) {
	if !slices.Contains(cgroupNames, name) {
		cgroupNames = append(cgroupNames, name)
	}
}

// readHost reads the host's state, or with network only its network
// namespace's; extra are more directories under which mounts count (the
// fixture's own).
func readHost(network bool, extra []string) (*hostState, error) {
	h := &hostState{network: network, sysctls: map[string]string{}, tables: map[string]string{}, paths: map[string]bool{}}
	for _, s := range hostSysctls {
		if network && !netnsSysctl(s) {
			continue
		}
		b, err := os.ReadFile("/proc/sys/" + s)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		h.sysctls[s] = strings.TrimSpace(string(b))
	}
	var err error
	if h.tables, err = nftTables(); err != nil {
		return nil, err
	}
	if h.links, err = readLinks(); err != nil {
		return nil, err
	}
	if network {
		return h, nil
	}
	for _, dir := range cgroupDirs() {
		if dirExists(dir) {
			h.cgroups = append(h.cgroups, dir)
		}
	}
	if h.mounts, err = mountsUnder(append(slices.Clone(mountPrefixes), extra...)); err != nil {
		return nil, err
	}
	for _, p := range hostPaths {
		_, err := os.Lstat(p)
		h.paths[p] = err == nil
	}
	return h, nil
}

// netnsSysctl says whether the setting s is one of each network
// namespace's own.
func netnsSysctl(s string) bool {
	return strings.HasPrefix(s, "net/ipv4/") || strings.HasPrefix(s, "net/ipv6/")
}

// nftTables lists every nftables table with its rules. iptables-nft keeps
// the kubelet's and kube-proxy's iptables rules in tables such as "ip nat".
func nftTables() (map[string]string, error) {
	out, err := run(30*time.Second, "nft", "list", "tables")
	if err != nil {
		return nil, err
	}
	tables := map[string]string{}
	for line := range strings.SplitSeq(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "table" {
			continue
		}
		// -s: without counters, which traffic on the host moves.
		listing, err := run(30*time.Second, "nft", "-s", "list", "table", f[1], f[2])
		if err != nil {
			return nil, err
		}
		tables[f[1]+" "+f[2]] = listing
	}
	return tables, nil
}

// cgroupDirs are the directories of cgroupNames in every mounted hierarchy.
func cgroupDirs() []string {
	l, err := cgroups.ReadLayout("/")
	if err != nil {
		return nil
	}
	var dirs []string
	for _, h := range l.Hierarchies {
		for _, name := range cgroupNames {
			if d, ok := h.Dir("/", "/"+name); ok {
				dirs = append(dirs, d)
			}
		}
	}
	return dirs
}

// mountsUnder lists the mount points of this mount namespace under any of
// prefixes, deepest first.
func mountsUnder(prefixes []string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		for _, p := range prefixes {
			if mp == p || strings.HasPrefix(mp, p+"/") {
				out = append(out, mp)
				break
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) || len(out[i]) == len(out[j]) && out[i] < out[j] })
	return out, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// putBack undoes what a node did to the host, as far as base (the host
// before) shows it was not so: kube-proxy's rules and the kubelet's, the
// CNI bridge, the kubelet's mounts and directories, the pod cgroups, the
// kernel settings. It is safe to run when nothing is left. bin holds
// kube-proxy, whose --cleanup removes its rules in every mode.
func putBack(base *hostState, bin string) []error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	now, err := readHost(base.network, nil)
	if err != nil {
		return []error{err}
	}

	if rulesChanged(base, now) {
		// kube-proxy --cleanup removes its chains and tables (iptables,
		// ipvs, nftables) but not the kubelet's KUBE-FIREWALL,
		// KUBE-KUBELET-CANARY and KUBE-IPTABLES-HINT: those go below, with
		// anything else named KUBE-* or CNI-*.
		if _, err := run(time.Minute, filepath.Join(bin, "kube-proxy"), "--cleanup"); err != nil {
			// It reports modes it cannot clean (no IPVS here) as errors;
			// what is left is removed and checked below.
			_ = err
		}
		for _, family := range []string{"iptables", "ip6tables"} {
			add(removeKubeChains(family))
		}
		add(removeNewTables(base))
		add(removeNewEmptyChains(base))
	}
	for _, l := range now.links {
		if l == bridgeName && !slices.Contains(base.links, l) {
			_, err := run(10*time.Second, "ip", "link", "delete", l)
			add(err)
		}
	}
	// The kubelet's volume mounts outlive it, and the CRI plugin's network
	// namespaces those of pods that were not removed.
	for _, mp := range now.mounts {
		if !slices.Contains(base.mounts, mp) {
			if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				add(fmt.Errorf("unmount %s: %w", mp, err))
			}
		}
	}
	for _, dir := range now.cgroups {
		if !slices.Contains(base.cgroups, dir) {
			add(removeCgroupTree(dir))
		}
	}
	for s, v := range base.sysctls {
		if v != "" && now.sysctls[s] != v {
			add(os.WriteFile("/proc/sys/"+s, []byte(v), 0o644))
		}
	}
	for p, existed := range base.paths {
		if !existed && now.paths[p] {
			add(removeAll(p))
		}
	}
	return errs
}

// rulesChanged reports whether any nftables table differs from base.
func rulesChanged(base, now *hostState) bool {
	if len(base.tables) != len(now.tables) {
		return true
	}
	for t, l := range now.tables {
		if base.tables[t] != l {
			return true
		}
	}
	return false
}

// removeKubeChains deletes, in every table of family (iptables or
// ip6tables), the rules that jump to a chain named KUBE-* or CNI-*, then
// those chains: one iptables-restore --noflush transaction per family.
func removeKubeChains(family string) error {
	out, err := run(30*time.Second, family+"-save")
	if err != nil {
		return err
	}
	ours := func(chain string) bool { return strings.HasPrefix(chain, "KUBE-") || strings.HasPrefix(chain, "CNI-") }
	var script strings.Builder
	var table string
	var del, chains []string
	flush := func() {
		if table == "" || len(del)+len(chains) == 0 {
			return
		}
		script.WriteString("*" + table + "\n")
		for _, r := range del {
			script.WriteString(r + "\n")
		}
		for _, c := range chains {
			script.WriteString("-F " + c + "\n")
		}
		for _, c := range chains {
			script.WriteString("-X " + c + "\n")
		}
		script.WriteString("COMMIT\n")
	}
	for line := range strings.SplitSeq(out, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			flush()
			table, del, chains = line[1:], nil, nil
		case strings.HasPrefix(line, ":"):
			if c := strings.Fields(line[1:])[0]; ours(c) {
				chains = append(chains, c)
			}
		case strings.HasPrefix(line, "-A "):
			f := strings.Fields(line)
			if ours(f[1]) {
				continue // flushed with its chain
			}
			if i := slices.Index(f, "-j"); i >= 0 && i+1 < len(f) && ours(f[i+1]) {
				del = append(del, "-D"+line[2:])
			}
		}
	}
	flush()
	if script.Len() == 0 {
		return nil
	}
	if _, err := runInput(30*time.Second, script.String(), family+"-restore", "--noflush"); err != nil {
		return fmt.Errorf("%w\nthe script was:\n%s", err, script.String())
	}
	return nil
}

// removeNewTables deletes the nftables tables base did not have and that
// hold no rule now: the ones iptables-nft made for the node's rules, and
// kube-proxy's own if --cleanup left them.
func removeNewTables(base *hostState) error {
	now, err := nftTables()
	if err != nil {
		return err
	}
	for t, listing := range now {
		if _, had := base.tables[t]; had {
			continue
		}
		f := strings.Fields(t)
		if f[1] != "kube-proxy" && !emptyTable(listing) {
			continue // rules of someone else's: verify reports them
		}
		if _, err := run(30*time.Second, "nft", "delete", "table", f[0], f[1]); err != nil {
			return err
		}
	}
	return nil
}

// removeNewEmptyChains deletes, in the tables base had, the chains base did
// not have and that hold no rule now: iptables-nft adds the base chains
// INPUT and OUTPUT to a table such as "ip filter" that another program
// (podman's netavark) made with FORWARD only, and they stay, empty, when
// the kubelet's rules are gone.
func removeNewEmptyChains(base *hostState) error {
	now, err := nftTables()
	if err != nil {
		return err
	}
	for t, listing := range now {
		before, had := base.tables[t]
		if !had {
			continue
		}
		old := nftChains(before)
		for chain, rules := range nftChains(listing) {
			if _, kept := old[chain]; kept || rules > 0 {
				continue
			}
			f := strings.Fields(t)
			if _, err := run(30*time.Second, "nft", "delete", "chain", f[0], f[1], chain); err != nil {
				return err
			}
		}
	}
	return nil
}

// nftChains maps each chain of an nft table listing to its number of rules.
func nftChains(listing string) map[string]int {
	chains := map[string]int{}
	chain := ""
	for line := range strings.SplitSeq(listing, "\n") {
		l := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(l, "chain ") && strings.HasSuffix(l, "{"):
			chain = strings.Fields(l)[1]
			chains[chain] = 0
		case l == "}":
			chain = ""
		case chain != "" && l != "" && !(strings.HasPrefix(l, "type ") && strings.Contains(l, "hook")):
			chains[chain]++
		}
	}
	return chains
}

// emptyTable reports whether an nft listing holds chains without rules.
func emptyTable(listing string) bool {
	for line := range strings.SplitSeq(listing, "\n") {
		l := strings.TrimSpace(line)
		switch {
		case l == "", l == "}", strings.HasPrefix(l, "table "), strings.HasPrefix(l, "chain "),
			strings.HasPrefix(l, "type ") && strings.Contains(l, "hook"):
		default:
			return false
		}
	}
	return true
}

// removeCgroupTree removes a cgroup and its descendants, deepest first
// (rmdir is how a cgroup is removed; each must be empty of processes).
func removeCgroupTree(root string) error {
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := unix.Rmdir(dirs[i]); err != nil && !errors.Is(err, unix.ENOENT) {
			procs, _ := os.ReadFile(filepath.Join(dirs[i], "cgroup.procs"))
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w (processes: %q)", dirs[i], err, strings.Fields(string(procs))))
		}
	}
	return errors.Join(errs...)
}

// removeAll removes a file or directory tree that holds no mount any more.
func removeAll(p string) error {
	if mounts, err := mountsUnder([]string{p}); err == nil {
		for _, mp := range mounts {
			_ = unix.Unmount(mp, unix.MNT_DETACH)
		}
	}
	if err := os.RemoveAll(p); err != nil {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	return nil
}

// readLinks names the host's network links, sorted.
func readLinks() ([]string, error) {
	out, err := run(10*time.Second, "ip", "-o", "link", "show")
	if err != nil {
		return nil, err
	}
	var links []string
	for line := range strings.SplitSeq(out, "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			links = append(links, name)
		}
	}
	sort.Strings(links)
	return links, nil
}

// linksSettle is how long verify waits for the host's links to be as
// before: a pod's veth goes with its network namespace, which the kernel
// frees some time after the namespace's last process has ended (a node
// whose runtime ended before its pods were killed leaves them so).
const linksSettle = 10 * time.Second

// verify compares the host now with h (the host before) and returns each
// difference; extra are more directories under which no mount may be left.
func (h *hostState) verify(extra ...string) []error {
	for deadline := time.Now().Add(linksSettle); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if now, err := readLinks(); err != nil || slices.Equal(h.links, now) {
			break
		}
	}
	now, err := readHost(h.network, extra)
	if err != nil {
		return []error{err}
	}
	var errs []error
	diff := func(what string, before, after any) {
		errs = append(errs, fmt.Errorf("%s: before %v, now %v", what, before, after))
	}
	for _, s := range hostSysctls {
		if _, read := h.sysctls[s]; read && h.sysctls[s] != now.sysctls[s] {
			diff("sysctl "+strings.ReplaceAll(s, "/", "."), h.sysctls[s], now.sysctls[s])
		}
	}
	for t, l := range now.tables {
		if before, ok := h.tables[t]; !ok {
			diff("nftables table "+t, "absent", "\n"+l)
		} else if before != l {
			diff("nftables table "+t, "\n"+before, "\n"+l)
		}
	}
	for t := range h.tables {
		if _, ok := now.tables[t]; !ok {
			diff("nftables table "+t, "present", "absent")
		}
	}
	if !slices.Equal(h.links, now.links) {
		diff("network links", h.links, now.links)
	}
	if !slices.Equal(h.cgroups, now.cgroups) {
		diff("cgroups "+strings.Join(cgroupNames, ", "), h.cgroups, now.cgroups)
	}
	if !slices.Equal(h.mounts, now.mounts) {
		diff("mounts under "+strings.Join(append(slices.Clone(mountPrefixes), extra...), ", "), h.mounts, now.mounts)
	}
	for _, p := range hostPaths {
		if h.paths[p] != now.paths[p] {
			diff("path "+p, existence(h.paths[p]), existence(now.paths[p]))
		}
	}
	return errs
}

func existence(b bool) string {
	if b {
		return "present"
	}
	return "absent"
}
