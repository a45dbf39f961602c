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

	"github.com/nodeinit/nodeinit/config"
	"github.com/nodeinit/nodeinit/internal/cmdline"
	"github.com/nodeinit/nodeinit/node"
)

// isKubelet says whether the executor is a kubelet: its program is named
// kubelet, or it is given a kubelet configuration. The checks for the
// kubelet's sake, and the flags they add, apply to a kubelet only: another
// executor would not know the flags.
func isKubelet(in Input) bool {
	return filepath.Base(in.Config.Executor.Path) == "kubelet" || in.Kubelet.File != ""
}

// kmsgStandIn is the mount of /dev/null over /dev/kmsg, made first where
// it is missing: a stand-in file, mounted through descriptors (bindfile).
func kmsgStandIn(missing bool) mount {
	return mount{source: os.DevNull, target: "/dev/kmsg", flags: unix.MS_BIND, create: missing, standIn: true}
}

// isKubeProxy says whether the proxy runs and is kube-proxy.
func isKubeProxy(in Input) bool {
	return in.Config.Proxy.Run && filepath.Base(in.Config.Proxy.Path) == "kube-proxy"
}

// The gate that lets the kubelet run in a user namespace (node.UserNamespaceGate).
const userNamespaceGate = node.UserNamespaceGate

// checkCgroupfs remounts a read-only cgroupfs read-write (k0s does the
// same): the kubelet makes the pods' cgroups in it. Only with
// CAP_SYS_ADMIN, and only a mount of the container's own cgroups (see
// ownCgroupMount): a read-only mount of the host's whole tree (a container
// without a cgroup namespace of its own on cgroup v2) is refused in one
// line, since making it writable would open every cgroup of the host to
// the container. Without CAP_SYS_ADMIN, one line says what to give the
// container.
func checkCgroupfs(p *Plan, ct *container, in Input) {
	if !isKubelet(in) {
		return
	}
	for _, m := range ct.mounts {
		if (m.FSType != "cgroup" && m.FSType != "cgroup2") || !hasOption(m.Options, "ro") {
			continue
		}
		if !ct.capSysAdmin {
			p.warn("The cgroupfs at %s is mounted read-only and nodeinit lacks CAP_SYS_ADMIN to remount it: the kubelet cannot make the pods' cgroups; "+
				"run the container with its cgroupfs read-write (privileged, or podman's --security-opt unmask=/sys/fs/cgroup)", m.Mountpoint)
			continue
		}
		if own, why := ct.ownCgroupMount(m); !own {
			p.refuse("The cgroupfs at %s is mounted read-only and %s: nodeinit does not make it writable; "+
				"mount it read-write (a privileged container's is: --privileged, or -v /sys/fs/cgroup:/sys/fs/cgroup:rw), or, where the container runtime runs inside the container too, give it a cgroup namespace of its own", m.Mountpoint, why)
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
			"the cgroupfs is mounted read-only and the kubelet makes the pods' cgroups in it; it shows the container's own cgroups (%s), and nodeinit has CAP_SYS_ADMIN",
			ct.cgroupMountRoot(m))
	}
}

// checkKmsg binds /dev/null over a /dev/kmsg the container lacks or cannot
// read: the kubelet's OOM watcher opens it and the kubelet exits when it
// cannot. Never /dev/console: kind linked that and removed it again for
// the loop it made with journald. In a user namespace the gate does it.
func checkKmsg(p *Plan, ct *container, in Input) {
	if !isKubelet(in) {
		return
	}
	if ct.userNS && userNamespaceGateOn(in) {
		return
	}
	const kmsg = "/dev/kmsg"
	var missing bool
	f, err := os.OpenFile(ct.path(kmsg), os.O_RDONLY|unix.O_NONBLOCK, 0)
	switch {
	case err == nil:
		f.Close()
		return
	case errors.Is(err, fs.ErrNotExist):
		missing = true
	case !errors.Is(err, fs.ErrPermission):
		return
	}
	p.mounts = append(p.mounts, kmsgStandIn(missing))
	what := "missing"
	if !missing {
		what = "not readable"
	}
	p.adjust(config.CheckKmsg, "bind /dev/null over /dev/kmsg (over the file itself, never through a link; a shared mount under it is detached from its peers first)",
		"/dev/kmsg is %s in this container and the kubelet exits when it cannot open it", what)
	p.warn("The kubelet sees no kernel OOM events: /dev/kmsg is /dev/null in this container; pass the host's /dev/kmsg to the container (--device /dev/kmsg) to have them")
}

// userNamespaceGateOn says the kubelet will run with userNamespaceGate on:
// set on, or left unset where its release turns it on by default or
// checkUserNamespace adds it.
func userNamespaceGateOn(in Input) bool {
	v, where := node.FeatureGate(in.Config.Executor.Args, in.Kubelet, userNamespaceGate)
	if where != "" {
		return v
	}
	return node.UserNamespaceGateOnByDefault(in.KubeletVersion) || !in.Config.ContainerChecks.Skips(config.CheckUserNamespace)
}

// warnCgroupV1 says in one line that the kubelet will exit at start on
// this cgroup v1 host (node.CgroupV1Refusal), which it decides as the
// kubelet does: /sys/fs/cgroup is not a cgroup2 mount (the topmost mount
// there, as statfs sees it; none at all is the file system below, not
// cgroup2 either). nodeinit never sets failCgroupV1 itself.
func warnCgroupV1(p *Plan, ct *container, in Input) {
	if !isKubelet(in) {
		return
	}
	v2 := false
	for _, m := range ct.mounts {
		if m.Mountpoint == "/sys/fs/cgroup" {
			v2 = m.FSType == "cgroup2"
		}
	}
	if v2 {
		return
	}
	if line := node.CgroupV1Refusal(in.Config.Executor.Args, in.Kubelet, in.KubeletVersion); line != "" {
		p.warn("%s", line)
	}
}

// checkSwap refuses to start a kubelet that would exit on swap: swap is on
// and its failSwapOn is unset (true) or true.
func checkSwap(p *Plan, ct *container, in Input) {
	if !isKubelet(in) {
		return
	}
	b, err := os.ReadFile(ct.path("/proc/swaps"))
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
	on, where, fix := kubeletFailSwapOn(in)
	if !on {
		return
	}
	p.refuse("Swap is on (%s) and %s, so the kubelet would exit: %s, or turn swap off",
		strings.Join(swaps, ", "), where, fix)
}

// kubeletFailSwapOn is the kubelet's failSwapOn, where it comes from, and
// how to turn it off. The kubelet parses its flags again over its
// configuration file, so its --fail-swap-on (the last one; bare, it means
// true) wins over failSwapOn; without either the default is true.
func kubeletFailSwapOn(in Input) (on bool, where, fix string) {
	files := strings.Join(in.Kubelet.Files, " ")
	flag, set, err := cmdline.Bool(in.Config.Executor.Args, "fail-swap-on")
	switch {
	case err != nil:
		// The kubelet refuses the flag itself, and says so.
		return false, "", ""
	case set && in.Kubelet.FailSwapOn != nil && *in.Kubelet.FailSwapOn != flag:
		where = fmt.Sprintf("the kubelet's --fail-swap-on=%t, which it takes over failSwapOn: %t in %s", flag, *in.Kubelet.FailSwapOn, files)
		return flag, where, "pass the kubelet --fail-swap-on=false"
	case set:
		return flag, fmt.Sprintf("the kubelet's --fail-swap-on=%t", flag), "pass the kubelet --fail-swap-on=false"
	case in.Kubelet.FailSwapOn != nil:
		return *in.Kubelet.FailSwapOn, fmt.Sprintf("failSwapOn is %t in %s", *in.Kubelet.FailSwapOn, files), "set failSwapOn: false in " + files
	}
	file := in.Kubelet.File
	if file == "" {
		file = "the kubelet's configuration"
	}
	return true, "failSwapOn is unset (the kubelet's default is true)", "set failSwapOn: false in " + file
}

// cadvisorFSTypes are the file systems the kubelet's cAdvisor finds a
// directory's device on (cadvisor fs.processMounts); ext* and nfs* too.
var cadvisorFSTypes = []string{"btrfs", "overlay", "tmpfs", "xfs", "zfs"}

// checkRootfsDevice refuses to start a kubelet whose root directory is on
// a file system its cAdvisor cannot find ("failed to get rootfs info"):
// not one of the types it knows, and not from a device under /dev.
func checkRootfsDevice(p *Plan, ct *container, in Input) {
	if !isKubelet(in) {
		return
	}
	dir, _ := cmdline.Value(in.Config.Executor.Args, "root-dir")
	if dir == "" {
		dir = "/var/lib/kubelet"
	}
	// The kubelet makes its root dir: look at where it will be made.
	at := filepath.Clean(dir)
	var st unix.Stat_t
	for unix.Stat(ct.path(at), &st) != nil {
		if at == "/" {
			return
		}
		at = filepath.Dir(at)
	}
	major, minor := int(unix.Major(st.Dev)), int(unix.Minor(st.Dev))
	seen := map[string]bool{}
	for _, m := range ct.mounts {
		known := strings.HasPrefix(m.FSType, "ext") || strings.HasPrefix(m.FSType, "nfs") || slices.Contains(cadvisorFSTypes, m.FSType)
		if !known || (seen[m.Source] && m.FSType != "tmpfs") {
			continue
		}
		seen[m.Source] = true
		if m.Major == major && m.Minor == minor {
			return
		}
	}
	m := ct.cadvisorMount(at)
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
func checkInotify(p *Plan, ct *container, in Input) {
	if !isKubelet(in) {
		return
	}
	for _, s := range inotifyNeeds {
		file := "/proc/sys/" + strings.ReplaceAll(s.sysctl, ".", "/")
		have, ok := ct.readInt(file)
		if !ok || have >= s.need {
			continue
		}
		switch {
		case in.Config.ContainerChecks.RaiseInotifyLimits && ct.writable(file):
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
func checkResolvConf(p *Plan, ct *container, in Input) {
	if !isKubelet(in) || in.Kubelet.ResolvConf != nil {
		return
	}
	if _, set := cmdline.Value(in.Config.Executor.Args, "resolv-conf"); set {
		return
	}
	servers, ok := ct.nameservers("/etc/resolv.conf")
	if !ok || len(servers) == 0 || slices.ContainsFunc(servers, func(s string) bool { return !isLoopback(s) }) {
		return
	}
	if up, _ := ct.nameservers(systemdResolvConf); slices.ContainsFunc(up, func(s string) bool { return !isLoopback(s) }) {
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
