package node

import "fmt"

// RequireSystemBus refuses a kubelet whose cgroup driver is systemd where
// there is no system bus (noBus says why; nil means there is one): the
// kubelet reaches systemd there for every pod's cgroup, and nodeinit's
// login1 bus, which the kubelet takes for the system bus, has no systemd
// of its own to pass those calls to. driver is the one the kubelet will
// run with: the runtime's where it reports one and the kubelet takes it
// (cgroups.Result.KubeletCgroupDriver), else its own (CgroupDriver).
// socket is where a system bus listens (bus/upstream.SystemBusSocket), for
// the operator to mount.
func RequireSystemBus(driver string, noBus error, socket string) error {
	if noBus == nil || driver != "systemd" {
		return nil
	}
	return fmt.Errorf("the kubelet's cgroup driver is systemd, which it reaches on the system bus, and this container has none (%v): "+
		"mount the host's %s into the container, or set the kubelet's cgroupDriver to cgroupfs", noBus, socket)
}
