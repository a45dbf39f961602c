package mountns

import (
	"path/filepath"
	"strconv"
)

// Own reports whether nodeinit's mount namespace is its own, so that a mount
// it makes there (the node's machine-id) touches no other process's view.
// It is Enter's private namespace; or nodeinit is a container's PID 1; or
// its namespace differs from that of PID 1 of its pid namespace. In a
// container that shares the host's pid namespace, PID 1 is the host's init,
// in the host's mount namespace, so a namespace shared with the host is seen
// there. The parent counts only when PID 1's namespace cannot be read: a
// parent in another namespace says nothing where PID 1 shares nodeinit's
// (`nsenter -t 1 -m -- nodeinit` from a pod with the host's pid namespace
// runs nodeinit in the host's mount namespace under a parent in the pod's).
// Where neither can be read, it says no.
func Own() bool { return InPrivate() || own("/proc", pid(), ppid()) }

// own is Own's rule over a /proc at proc, for a process pid whose parent
// is ppid.
func own(proc string, pid, ppid int) bool {
	// PID 1 whose /proc is its pid namespace's: a container's init, whose
	// runtime mounted that /proc in the container's mount namespace. PID 1
	// of a pid namespace made without one (unshare --pid --fork alone)
	// still sees the host's /proc, where it is not 1.
	if pid == 1 {
		me, err := readlink(filepath.Join(proc, "self"))
		return err == nil && me == "1"
	}
	self, err := readlink(filepath.Join(proc, "self", "ns", "mnt"))
	if err != nil {
		return false
	}
	other, err := readlink(filepath.Join(proc, "1", "ns", "mnt"))
	if err != nil {
		other, err = readlink(filepath.Join(proc, strconv.Itoa(ppid), "ns", "mnt"))
	}
	return err == nil && other != self
}
