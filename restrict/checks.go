package restrict

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/yaml"

	"github.com/nodeinit/nodeinit/cgroups"
	"github.com/nodeinit/nodeinit/config"
)

// isKubelet says whether the executor is a kubelet: its program is named
// kubelet, or it is given a kubelet configuration. The checks for the
// kubelet's sake, and the flags they add, apply to a kubelet only: another
// executor would not know the flags.
func isKubelet(in Input) bool {
	return filepath.Base(in.Config.Executor.Path) == "kubelet" || in.Kubelet.File != ""
}

// isKubeProxy says whether the proxy runs and is kube-proxy.
func isKubeProxy(in Input) bool {
	return in.Config.Proxy.Run && filepath.Base(in.Config.Proxy.Path) == "kube-proxy"
}

// The gate that lets the kubelet run in a user namespace: it then takes a
// /dev/kmsg it cannot open and kernel tunables it cannot write as warnings.
const userNamespaceGate = "KubeletInUserNamespace"

// checkCgroupfs remounts a read-only cgroupfs read-write (k0s does the
// same): the kubelet makes the pods' cgroups in it. Only with
// CAP_SYS_ADMIN; without, one line says what to give the container.
func checkCgroupfs(p *Plan, h *host, in Input) {
	if !isKubelet(in) {
		return
	}
	for _, m := range h.mounts {
		if (m.FSType != "cgroup" && m.FSType != "cgroup2") || !hasOption(m.Options, "ro") {
			continue
		}
		if !h.capSysAdmin {
			p.warn("The cgroupfs at %s is mounted read-only and nodeinit lacks CAP_SYS_ADMIN to remount it: the kubelet cannot make the pods' cgroups; "+
				"run the container with its cgroupfs read-write (privileged, or podman's --security-opt unmask=/sys/fs/cgroup)", m.Mountpoint)
			continue
		}
		// A bind remount changes this mount alone, keeping its other flags
		// (a user namespace may not drop nosuid, nodev or noexec).
		flags := uintptr(unix.MS_REMOUNT | unix.MS_BIND)
		for opt, f := range map[string]uintptr{"nosuid": unix.MS_NOSUID, "nodev": unix.MS_NODEV, "noexec": unix.MS_NOEXEC,
			"noatime": unix.MS_NOATIME, "nodiratime": unix.MS_NODIRATIME, "relatime": unix.MS_RELATIME} {
			if hasOption(m.Options, opt) {
				flags |= f
			}
		}
		p.mounts = append(p.mounts, mount{target: m.Mountpoint, flags: flags})
		p.adjust(config.CheckCgroupfs, "remount "+m.Mountpoint+" read-write",
			"the cgroupfs is mounted read-only and the kubelet makes the pods' cgroups in it; nodeinit has CAP_SYS_ADMIN")
	}
}

// checkUserNamespace adapts the node to a user namespace (rootless podman,
// a userns-remapped engine): the kubelet's KubeletInUserNamespace gate,
// and a refusal when the cgroups the kubelet needs are not delegated.
// kube-proxy's sysctls are checkConntrack's: they follow from which of
// them this process may write.
func checkUserNamespace(p *Plan, h *host, in Input) {
	if !h.userNS || !isKubelet(in) {
		return
	}
	switch v, where := featureGate(in, userNamespaceGate); {
	case where == "":
		p.KubeletArgs = append(p.KubeletArgs, "--feature-gates="+userNamespaceGate+"=true")
		p.adjust(config.CheckUserNamespace, "--feature-gates="+userNamespaceGate+"=true for the kubelet",
			"nodeinit runs in a user namespace (uid_map %q), where the kubelet cannot open /dev/kmsg or write the kernel's tunables and exits without this gate; "+
				"the kubelet merges it with the feature gates of its command line and configuration", h.uidMap)
	case !v:
		p.warn("nodeinit runs in a user namespace (uid_map %q) and %s sets %s=false: the kubelet will exit on /dev/kmsg or the kernel's tunables; set it to true",
			h.uidMap, where, userNamespaceGate)
	}
	checkDelegation(p, h)
}

// featureGate is the value the kubelet takes for gate, and where it is
// set: its --feature-gates flags (repeats merge, the last wins) over its
// configuration's featureGates; where is empty when neither sets it.
func featureGate(in Input, gate string) (value bool, where string) {
	if v, ok := in.Kubelet.FeatureGates[gate]; ok {
		value, where = v, "the kubelet's configuration "+strings.Join(in.Kubelet.Files, " ")
	}
	args := in.Config.Executor.Args
	for i := 0; i < len(args) && args[i] != "--"; i++ {
		a := strings.TrimLeft(args[i], "-")
		list, ok := strings.CutPrefix(a, "feature-gates=")
		if !ok && a == "feature-gates" && i+1 < len(args) {
			i++
			list, ok = args[i], true
		}
		if !ok {
			continue
		}
		for kv := range strings.SplitSeq(list, ",") {
			k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
			if k == gate {
				b, _ := strconv.ParseBool(v)
				value, where = b, "the kubelet's --feature-gates"
			}
		}
	}
	return value, where
}

// The controllers the kubelet needs in a user namespace, delegated to the
// container's cgroup and writable there (kind and k3s refuse without them).
var delegated = []string{"cpu", "memory", "pids"}

// checkDelegation refuses a user namespace whose cgroup lacks a controller
// the kubelet needs, or that this process may not write.
func checkDelegation(p *Plan, h *host) {
	l, err := cgroups.ReadLayout(h.root)
	if err != nil {
		p.refuse("In a user namespace the kubelet needs the cgroups of the container: %v", err)
		return
	}
	var missing, readOnly []string
	for _, c := range delegated {
		var dir string
		for _, hier := range l.Hierarchies {
			if hier.Unified && l.Mode() == cgroups.V2 {
				ctrls, _ := os.ReadFile(filepath.Join(must(hier.Dir(h.root, hier.Current)), "cgroup.controllers"))
				if slices.Contains(strings.Fields(string(ctrls)), c) {
					dir = must(hier.Dir(h.root, hier.Current))
				}
			} else if slices.Contains(hier.Controllers, c) {
				dir = must(hier.Dir(h.root, hier.Current))
			}
		}
		switch rel, _ := filepath.Rel(h.root, dir); {
		case dir == "":
			missing = append(missing, c)
		case unix.Access(dir, unix.W_OK) != nil:
			readOnly = append(readOnly, "/"+rel)
		}
	}
	switch {
	case len(missing) > 0:
		p.refuse("In a user namespace the kubelet needs the %s controllers delegated to the container's cgroup; %s %s not: "+
			"delegate them (systemd: Delegate=cpu cpuset io memory pids for the user's service; cgroup v2 with --cgroupns=private)",
			strings.Join(delegated, ", "), strings.Join(missing, ", "), map[bool]string{true: "is", false: "are"}[len(missing) == 1])
	case len(readOnly) > 0:
		slices.Sort(readOnly)
		readOnly = slices.Compact(readOnly)
		p.refuse("In a user namespace the kubelet needs to write the container's cgroup, and %s %s not writable: "+
			"delegate the cgroup to the container's user (systemd: Delegate=yes), or run the container with a writable cgroupfs",
			strings.Join(readOnly, " "), map[bool]string{true: "is", false: "are"}[len(readOnly) == 1])
	}
}

// must is the directory of Hierarchy.Dir, empty when the mount does not
// reach it.
func must(dir string, ok bool) string {
	if !ok {
		return ""
	}
	return dir
}

// nofileNeed is the open-file limit below which a node in a user namespace
// is warned about (kind's rootless check).
const nofileNeed = 64000

// checkNofile warns about a low RLIMIT_NOFILE in a user namespace, where
// the container's user cannot raise it for the kubelet and the pods.
func checkNofile(p *Plan, h *host, in Input) {
	if !h.userNS || h.nofile == 0 || h.nofile >= nofileNeed {
		return
	}
	p.warn("RLIMIT_NOFILE is %d, below the %d a node in a user namespace needs: raise it for the container (podman --ulimit nofile=%d:%d, or the user's limits.conf)",
		h.nofile, nofileNeed, nofileNeed*2, nofileNeed*2)
}

// conntrackSetting is one of kube-proxy's conntrack settings that write
// a sysctl: unset, kube-proxy writes its default there.
type conntrackSetting struct {
	flag   string // kube-proxy's flag
	field  string // in its KubeProxyConfiguration's conntrack
	sysctl string // below /proc/sys/net/netfilter
	def    string // kube-proxy's default
	zero   string // the value that leaves the kernel's alone
	value  func(config.Conntrack) (string, bool)
}

var conntrackSettings = []conntrackSetting{
	{"conntrack-max-per-core", "maxPerCore", "nf_conntrack_max", "32768 per core, at least 131072", "0",
		func(c config.Conntrack) (string, bool) { return optional(c.MaxPerCore) }},
	{"conntrack-tcp-timeout-established", "tcpEstablishedTimeout", "nf_conntrack_tcp_timeout_established", "24h", "0s",
		func(c config.Conntrack) (string, bool) {
			if c.TCPTimeoutEstablished == nil {
				return "", false
			}
			return c.TCPTimeoutEstablished.String(), true
		}},
	{"conntrack-tcp-timeout-close-wait", "tcpCloseWaitTimeout", "nf_conntrack_tcp_timeout_close_wait", "1h", "0s",
		func(config.Conntrack) (string, bool) { return "", false }},
}

func optional(n *int32) (string, bool) {
	if n == nil {
		return "", false
	}
	return strconv.Itoa(int(*n)), true
}

// checkConntrack keeps kube-proxy off conntrack sysctls it cannot write.
// Since Linux 5.12.2 nf_conntrack_max is read-only outside the host's
// network namespace, and no sysctl of a network namespace is writable
// from a user namespace that does not own it; kube-proxy v1.34 exits when
// it cannot write a value it wants. A setting left unset there is passed
// as 0 (kube-proxy then leaves the kernel's value alone, as kind and k3s
// do); one the operator set is left as it is, with a warning.
func checkConntrack(p *Plan, h *host, in Input) {
	if !isKubeProxy(in) {
		return
	}
	if h.foreignNetns {
		p.warn("kube-proxy cannot program this network namespace: it belongs to a user namespace outside the container's, where the container's root " +
			"has no CAP_NET_ADMIN (iptables: \"Permission denied (you must be root)\"); give the container a network namespace of its own " +
			"(rootless podman's default), or run no proxy (--run-proxy=false)")
		return
	}
	px := in.Config.Proxy
	file := config.ProxyConfigFile(px.Args)
	var fileConntrack map[string]any
	if file != "" {
		fileConntrack = proxyFileConntrack(h, file)
	}
	for _, s := range conntrackSettings {
		sysctl := "/proc/sys/net/netfilter/" + s.sysctl
		if h.writable(sysctl) {
			continue
		}
		why := sysctl + " is read-only in this network namespace"
		if _, err := os.Stat(h.path(sysctl)); errors.Is(err, fs.ErrNotExist) {
			why = sysctl + " does not exist (no nf_conntrack in this kernel or namespace)"
		}
		if file != "" {
			v, set := fileConntrack[s.field]
			if !set || v == nil {
				p.warn("%s, and kube-proxy takes its settings from %s, which leaves conntrack.%s to kube-proxy's default (%s): "+
					"kube-proxy will exit when it cannot write it; set conntrack.%s: 0 there", why, file, s.field, s.def, s.field)
			} else if !isZero(v) {
				p.warn("%s, and %s sets conntrack.%s: %v, which kube-proxy will exit on when it cannot write it; set it to 0", why, file, s.field, v)
			}
			continue
		}
		v, set := s.value(px.Conntrack)
		if a, ok := flagOf(px.Args, s.flag); ok {
			v, set = a, true
		}
		if s.flag == "conntrack-max-per-core" && !set {
			// A floor alone is the operator's wish for a limit too.
			if m, ok := optional(px.Conntrack.Min); ok {
				v, set = "unset, with --conntrack-min="+m, m != "0"
			}
			if a, ok := flagOf(px.Args, "conntrack-min"); ok {
				v, set = "unset, with --conntrack-min="+a, !isZero(a)
			}
		}
		switch {
		case !set:
			p.ProxyArgs = append(p.ProxyArgs, "--"+s.flag+"="+s.zero)
			p.adjust(config.CheckConntrack, "--"+s.flag+"="+s.zero+" for kube-proxy",
				"%s, and kube-proxy exits when it cannot write its default (%s) there; %s leaves the kernel's value alone", why, s.def, s.zero)
		case !isZero(v):
			p.warn("%s, and kube-proxy's --%s is %s (the operator's setting, kept): kube-proxy will exit when it cannot write it; set it to 0", why, s.flag, v)
		}
	}
}

// isZero says whether a conntrack value means "leave the kernel alone":
// 0, "0s" or another zero duration.
func isZero(v any) bool {
	s := strings.TrimSpace(fmt.Sprint(v))
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		return n == 0
	}
	return strings.Trim(s, "0hms.") == ""
}

// proxyFileConntrack is the conntrack section of kube-proxy's own
// configuration file; nil when it has none or cannot be read (kube-proxy
// then says why itself).
func proxyFileConntrack(h *host, file string) map[string]any {
	b, err := os.ReadFile(h.path(file))
	if err != nil {
		return nil
	}
	var doc struct {
		Conntrack map[string]any `json:"conntrack"`
	}
	if yaml.Unmarshal(b, &doc) != nil {
		return nil
	}
	return doc.Conntrack
}

// checkKmsg binds /dev/null over a /dev/kmsg the container lacks or cannot
// read: the kubelet's OOM watcher opens it and the kubelet exits when it
// cannot. Never /dev/console: kind linked that and removed it again for
// the loop it made with journald. In a user namespace the gate does it.
func checkKmsg(p *Plan, h *host, in Input) {
	if !isKubelet(in) {
		return
	}
	if v, where := featureGate(in, userNamespaceGate); h.userNS && (where == "" || v) && !in.Config.ContainerChecks.Skips(config.CheckUserNamespace) {
		return
	}
	const kmsg = "/dev/kmsg"
	m := mount{source: os.DevNull, target: kmsg, flags: unix.MS_BIND}
	f, err := os.Open(h.path(kmsg))
	switch {
	case err == nil:
		f.Close()
		return
	case errors.Is(err, fs.ErrNotExist):
		m.create = true
	case !errors.Is(err, fs.ErrPermission):
		return
	}
	p.mounts = append(p.mounts, m)
	what := "missing"
	if !m.create {
		what = "not readable"
	}
	p.adjust(config.CheckKmsg, "bind /dev/null over /dev/kmsg", "/dev/kmsg is %s in this container and the kubelet exits when it cannot open it", what)
	p.warn("The kubelet sees no kernel OOM events: /dev/kmsg is /dev/null in this container; pass the host's /dev/kmsg to the container (--device /dev/kmsg) to have them")
}

// checkSwap refuses to start a kubelet that would exit on swap: swap is on
// and its failSwapOn is unset (true) or true.
func checkSwap(p *Plan, h *host, in Input) {
	if !isKubelet(in) {
		return
	}
	b, err := os.ReadFile(h.path("/proc/swaps"))
	if err != nil {
		return
	}
	var swaps []string
	for i, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); i > 0 && len(f) > 0 {
			swaps = append(swaps, f[0])
		}
	}
	if len(swaps) == 0 {
		return
	}
	where := "failSwapOn is unset (the kubelet's default is true)"
	if in.Kubelet.FailSwapOn != nil {
		where = fmt.Sprintf("failSwapOn is %t in %s", *in.Kubelet.FailSwapOn, strings.Join(in.Kubelet.Files, " "))
		if !*in.Kubelet.FailSwapOn {
			return
		}
	}
	if v, ok := flagOf(in.Config.Executor.Args, "fail-swap-on"); ok {
		on, err := strconv.ParseBool(v)
		if v != "" && err == nil && !on {
			return
		}
		where = "the kubelet's --fail-swap-on is true"
	}
	file := in.Kubelet.File
	if file == "" {
		file = "the kubelet's configuration"
	}
	p.refuse("Swap is on (%s) and %s, so the kubelet would exit: set failSwapOn: false in %s, or turn swap off",
		strings.Join(swaps, ", "), where, file)
}

// cadvisorFSTypes are the file systems the kubelet's cAdvisor finds a
// directory's device on (cadvisor fs.processMounts); ext* and nfs* too.
var cadvisorFSTypes = []string{"btrfs", "overlay", "tmpfs", "xfs", "zfs"}

// checkRootfsDevice refuses to start a kubelet whose root directory is on
// a file system its cAdvisor cannot find ("failed to get rootfs info"):
// not one of the types it knows, and not from a device under /dev.
func checkRootfsDevice(p *Plan, h *host, in Input) {
	if !isKubelet(in) {
		return
	}
	dir, _ := flagOf(in.Config.Executor.Args, "root-dir")
	if dir == "" {
		dir = "/var/lib/kubelet"
	}
	// The kubelet makes its root dir: look at where it will be made.
	at := filepath.Clean(dir)
	var st unix.Stat_t
	for unix.Stat(h.path(at), &st) != nil {
		if at == "/" {
			return
		}
		at = filepath.Dir(at)
	}
	major, minor := int(unix.Major(st.Dev)), int(unix.Minor(st.Dev))
	seen := map[string]bool{}
	for _, m := range h.mounts {
		known := strings.HasPrefix(m.FSType, "ext") || strings.HasPrefix(m.FSType, "nfs") || slices.Contains(cadvisorFSTypes, m.FSType)
		if !known || (seen[m.Source] && m.FSType != "tmpfs") {
			continue
		}
		seen[m.Source] = true
		if m.Major == major && m.Minor == minor {
			return
		}
	}
	m := h.mountOf(at)
	if m != nil && strings.HasPrefix(m.Source, "/dev/") {
		return
	}
	source, fstype := "an unknown mount", "unknown"
	if m != nil {
		source, fstype = m.Source, m.FSType
	}
	p.refuse("The kubelet's root dir %s is on %s (%s, device %d:%d), where the kubelet cannot find its file system (\"failed to get rootfs info\"): "+
		"pass the device it is on to the container under /dev, or mount an ext4, xfs, btrfs, zfs, overlay or tmpfs volume at %s",
		dir, source, fstype, major, minor, dir)
}

// What a node needs of the inotify limits (kind's known issues; one node's
// containers use up max_user_instances=128, k0s #8113).
var inotifyNeeds = []struct {
	sysctl string
	need   int64
}{
	{"fs.inotify.max_user_instances", 512},
	{"fs.inotify.max_user_watches", 524288},
}

// checkInotify warns about inotify limits below a node's needs, or raises
// them when the configuration allows it and they are writable.
func checkInotify(p *Plan, h *host, in Input) {
	if !isKubelet(in) {
		return
	}
	for _, s := range inotifyNeeds {
		file := "/proc/sys/" + strings.ReplaceAll(s.sysctl, ".", "/")
		have, ok := h.readInt(file)
		if !ok || have >= s.need {
			continue
		}
		switch {
		case in.Config.ContainerChecks.RaiseInotifyLimits && h.writable(file):
			p.sysctls = append(p.sysctls, sysctlWrite{file, strconv.FormatInt(s.need, 10)})
			p.adjust(config.CheckInotify, fmt.Sprintf("%s=%d", s.sysctl, s.need),
				"it was %d, below what a node's kubelet and containers use up; raising it was asked for (--raise-inotify-limits)", have)
		case in.Config.ContainerChecks.RaiseInotifyLimits:
			p.warn("%s is %d, below the %d a node needs, and is not writable here: run sysctl -w %s=%d on the host", s.sysctl, have, s.need, s.sysctl, s.need)
		default:
			p.warn("%s is %d, below the %d a node needs (pods fail with \"too many open files\"): run sysctl -w %s=%d on the host, or pass --raise-inotify-limits",
				s.sysctl, have, s.need, s.sysctl, s.need)
		}
	}
}

// systemdResolvConf is systemd-resolved's file with the upstream servers,
// which kubeadm and k3s hand the kubelet in place of a stub resolver's.
const systemdResolvConf = "/run/systemd/resolve/resolv.conf"

// checkResolvConf keeps the pods off a loopback resolver: CoreDNS and the
// pods would forward to themselves. The kubelet gets systemd-resolved's
// upstream file when it has real servers, unless its own resolvConf is set.
func checkResolvConf(p *Plan, h *host, in Input) {
	if !isKubelet(in) || in.Kubelet.ResolvConf != nil {
		return
	}
	if _, set := flagOf(in.Config.Executor.Args, "resolv-conf"); set {
		return
	}
	servers, ok := h.nameservers("/etc/resolv.conf")
	if !ok || len(servers) == 0 || slices.ContainsFunc(servers, func(s string) bool { return !isLoopback(s) }) {
		return
	}
	if up, _ := h.nameservers(systemdResolvConf); slices.ContainsFunc(up, func(s string) bool { return !isLoopback(s) }) {
		p.KubeletArgs = append(p.KubeletArgs, "--resolv-conf="+systemdResolvConf)
		p.adjust(config.CheckResolvConf, "--resolv-conf="+systemdResolvConf+" for the kubelet",
			"/etc/resolv.conf has only loopback nameservers (%s), which would loop in the pods; %s has the upstream ones (%s)",
			strings.Join(servers, " "), systemdResolvConf, strings.Join(up, " "))
		return
	}
	p.warn("/etc/resolv.conf has only loopback nameservers (%s): pods would get a resolver that loops; set the kubelet's resolvConf to a file with the upstream nameservers",
		strings.Join(servers, " "))
}

func isLoopback(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.IsLoopback()
}
