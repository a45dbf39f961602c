package cluster

import (
	"os"
	"slices"
	"strings"
)

// SystemdNodeImage is the systemd flavor's node image
// (images/systemd-node-runtime), built on systemdBaseImage's
// images/systemd-node.
const (
	SystemdNodeImage = "localhost/nodeinit/systemd-node-runtime:dev"
	systemdBaseImage = "localhost/nodeinit/systemd-node:dev"
	systemdRootImage = "localhost/nodeinit/systemd-node-root:dev"
)

// SystemdPackages are the systemd flavor's Debian root: the node's
// BasePackages and what the service manager needs, systemd (PID 1,
// journald, logind) and dbus, the bus the kubelet asks logind on.
var SystemdPackages = append(slices.Clone(BasePackages), "systemd", "dbus")

// kubeProxyArgs are kube-proxy's flags in a node of either flavor: what
// the node image's nodeinit gives it with the cluster's
// --proxy-arg=--cluster-cidr (images/node-runtime/config.yaml: iptables,
// the conntrack settings left to the kernel in the node's own network
// namespace). The systemd flavor's unit reads them from kube-proxy.env in
// the node's /etc/kubernetes.
var kubeProxyArgs = []string{"--v=0", "--proxy-mode=iptables", "--conntrack-max-per-core=0", "--conntrack-min=0",
	"--conntrack-tcp-timeout-established=0s", "--kubeconfig=/etc/kubernetes/kube-proxy.conf", "--cluster-cidr=" + PodCIDR}

// kubeProxyEnv is kube-proxy.env, the environment file of the systemd
// flavor's kube-proxy unit.
func kubeProxyEnv() string {
	return `KUBE_PROXY_ARGS="` + strings.Join(kubeProxyArgs, " ") + "\"\n"
}

// hostCgroupHierarchies are the mount points of the host's cgroup
// hierarchies below /sys/fs/cgroup (v1 controllers, name=systemd, the
// hybrid host's cgroup2 at unified).
func hostCgroupHierarchies() []string {
	var dirs []string
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(l)
		sep := slices.Index(f, "-")
		if sep < 0 || sep+1 >= len(f) || len(f) < 5 {
			continue
		}
		if fs := f[sep+1]; (fs == "cgroup" || fs == "cgroup2") && strings.HasPrefix(f[4], "/sys/fs/cgroup/") && !slices.Contains(dirs, f[4]) {
			dirs = append(dirs, f[4])
		}
	}
	return dirs
}

// SystemdCgroupArgs keep systemd, as PID 1 of a privileged container, off
// the host's cgroup hierarchies: the podman run arguments of a systemd node
// container on a cgroup v1 host, this cluster's and make bench-k8s's
// (test/k8s). What systemd does on a cgroup v1 host that is not systemd's
// (name=systemd and cgroup2 at unified, no systemd; podman 4.3, runc):
//   - in a private cgroup namespace (kind's --cgroupns=private), podman
//     mounts the name=systemd hierarchy at its root, not at the
//     container's cgroup, and systemd made its init.scope, system.slice
//     and kubelet.slice at the root of the host's hierarchy;
//   - given the host's /sys/fs/cgroup (-v), systemd remounted that tmpfs
//     read-only, for the host too (a remount changes the one superblock),
//     and made directories in it;
//   - it mounts every v1 controller the kernel has where it is not
//     mounted (here perf_event, net_cls,net_prio and hugetlb; it tries
//     cpu,cpuacct too, which the host mounts apart): that creates the
//     hierarchies for the whole machine, and what ran meanwhile made
//     cgroups in them (/kubepods) that kept them alive after the node.
//
// So: the host's cgroup namespace (systemd finds its own cgroup in every
// hierarchy, runc put it there, and stays below it), podman's own
// /sys/fs/cgroup, and an empty tmpfs where systemd would mount a
// controller the host has not mounted: it takes that for mounted.
func SystemdCgroupArgs() []string {
	mounted := map[string]bool{}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for l := range strings.SplitSeq(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], "/sys/fs/cgroup/") {
				mounted[strings.TrimPrefix(f[4], "/sys/fs/cgroup/")] = true
			}
		}
	}
	// systemd mounts cpu with cpuacct and net_cls with net_prio.
	joined := map[string]string{"cpu": "cpu,cpuacct", "cpuacct": "cpu,cpuacct", "net_cls": "net_cls,net_prio", "net_prio": "net_cls,net_prio"}
	var args []string
	seen := map[string]bool{}
	if b, err := os.ReadFile("/proc/cgroups"); err == nil {
		for l := range strings.SplitSeq(string(b), "\n") {
			f := strings.Fields(l)
			if len(f) != 4 || strings.HasPrefix(f[0], "#") || f[3] != "1" {
				continue
			}
			where := f[0]
			if j, ok := joined[where]; ok {
				where = j
			}
			if !mounted[where] && !seen[where] {
				seen[where] = true
				args = append(args, "--tmpfs", "/sys/fs/cgroup/"+where)
			}
		}
	}
	return args
}
