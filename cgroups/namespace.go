package cgroups

import (
	"fmt"
	"strings"
)

// checkNamespaceView refuses a layout in which a cgroup mount shows
// cgroups outside nodeinit's cgroup namespace: the container has a private
// cgroup namespace (podman's and Docker's default on cgroup v2) and the
// host's cgroup tree mounted in (-v /sys/fs/cgroup:/sys/fs/cgroup). There
// /proc/self/cgroup says "/" while the mount's top directory is the host's
// root cgroup, so every cgroup path nodeinit, the kubelet or cAdvisor reads
// from /proc means another directory than the same path below the mount,
// and a runtime outside the namespace (containerd on the host) means a
// third. The error is one line saying what the operator changes.
func checkNamespaceView(l Layout) error {
	var shown []string
	for _, h := range l.Hierarchies {
		if outsideNamespace(h.Root) {
			shown = append(shown, fmt.Sprintf("%s (cgroup %s)", h.Mountpoint, h.Root))
		}
	}
	if len(shown) == 0 {
		return nil
	}
	mounts := "the cgroup mount at " + shown[0] + " shows"
	if len(shown) > 1 {
		mounts = "the cgroup mounts at " + strings.Join(shown, ", ") + " show"
	}
	return fmt.Errorf("%s cgroups above or beside the root of nodeinit's private cgroup namespace: "+
		"the host's cgroup tree in a private cgroup namespace, where the kubelet here and the container runtime outside "+
		"disagree on every cgroup path; run the container with --cgroupns=host, or do not mount the host's /sys/fs/cgroup into it",
		mounts)
}
