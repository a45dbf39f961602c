package restrict

import (
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/cgroups"
	"github.com/nodeinit/nodeinit/config"
	"github.com/nodeinit/nodeinit/node"
)

// checkUserNamespace adapts the node to a user namespace (rootless podman,
// a userns-remapped engine): the kubelet's KubeletInUserNamespace gate
// (added where the kubelet's release has it off by default and nothing
// sets it), and a refusal when the cgroups the kubelet needs are not delegated.
// kube-proxy's sysctls are checkConntrack's: they follow from which of
// them this process may write.
func checkUserNamespace(p *Plan, ct *container, in Input) {
	if !ct.userNS || !isKubelet(in) {
		return
	}
	switch v, where := node.FeatureGate(in.Config.Executor.Args, in.Kubelet, userNamespaceGate); {
	case where == "" && node.UserNamespaceGateOnByDefault(in.KubeletVersion):
		// The kubelet has it on by itself: nothing to add.
	case where == "":
		p.KubeletArgs = append(p.KubeletArgs, "--feature-gates="+userNamespaceGate+"=true")
		p.adjust(config.CheckUserNamespace, "--feature-gates="+userNamespaceGate+"=true for the kubelet",
			"nodeinit runs in a user namespace (uid_map %q), where the kubelet cannot open /dev/kmsg or write the kernel's tunables and exits without this gate; "+
				"the kubelet merges it with the feature gates of its command line and configuration", ct.uidMap)
	case !v:
		p.warn("nodeinit runs in a user namespace (uid_map %q) and %s sets %s=false: the kubelet will exit on /dev/kmsg or the kernel's tunables; set it to true",
			ct.uidMap, where, userNamespaceGate)
	}
	checkDelegation(p, ct)
}

// The controllers the kubelet needs in a user namespace, delegated to the
// container's cgroup and writable there (kind and k3s refuse without them).
var delegated = []string{"cpu", "memory", "pids"}

// checkDelegation refuses a user namespace whose cgroup lacks a controller
// the kubelet needs, or that this process may not write.
func checkDelegation(p *Plan, ct *container) {
	l, err := cgroups.ReadLayout(ct.root)
	if err != nil {
		p.refuse("In a user namespace the kubelet needs the cgroups of the container: %v", err)
		return
	}
	var missing, readOnly []string
	for _, c := range delegated {
		var dir string
		for _, hier := range l.Hierarchies {
			if hier.Unified && l.Mode() == cgroups.V2 {
				ctrls, _ := os.ReadFile(filepath.Join(reachedDir(hier.Dir(ct.root, hier.Current)), "cgroup.controllers"))
				if slices.Contains(strings.Fields(string(ctrls)), c) {
					dir = reachedDir(hier.Dir(ct.root, hier.Current))
				}
			} else if slices.Contains(hier.Controllers, c) {
				dir = reachedDir(hier.Dir(ct.root, hier.Current))
			}
		}
		switch rel, _ := filepath.Rel(ct.root, dir); {
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

// reachedDir is the directory of Hierarchy.Dir, empty when the mount does
// not reach it.
func reachedDir(dir string, ok bool) string {
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
func checkNofile(p *Plan, ct *container, in Input) {
	if !ct.userNS || ct.nofile == 0 || ct.nofile >= nofileNeed {
		return
	}
	p.warn("RLIMIT_NOFILE is %d, below the %d a node in a user namespace needs: raise it for the container (podman --ulimit nofile=%d:%d, or the user's limits.conf)",
		ct.nofile, nofileNeed, nofileNeed*2, nofileNeed*2)
}
