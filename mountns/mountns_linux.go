// Package mountns owns the mount namespace nodeinit and its children live
// in: entering a private namespace whose "/" is a recursive slave of the
// host's (host mounts still propagate in, the node's own mounts do not leak
// out), or making "/" recursively shared so that a kubelet can propagate
// volume mounts.
package mountns

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/internal/linux"
	"github.com/nodeinit/nodeinit/internal/procstatus"
)

// MarkerEnv is the environment variable that tells a re-executed nodeinit it
// already runs inside the namespace Enter made. Its value is the mount
// namespace the process left and the process's mark (ValidMarker), so a
// marker inherited from outside, stale or set by hand, is not taken for
// it. Enter removes it before anything can start a child; ForgetMarker
// does where Enter is not called.
const MarkerEnv = "NODEINIT_MOUNTNS_FROM"

// selfExe is the running binary, reachable even when its path on disk is
// not visible or has been replaced.
const selfExe = "/proc/self/exe"

var inPrivate bool

// The process's own facts, as variables so that nothing is read at
// package init and a test can name them.
var (
	pid      = os.Getpid
	ppid     = os.Getppid
	readlink = os.Readlink
)

// Enter moves the whole process into a new mount namespace whose "/" is
// MS_SLAVE|MS_REC, keeping its pid.
//
// A mount namespace belongs to one OS thread until exec, and Go runs
// goroutines on many threads, so Enter unshares on its own locked thread,
// changes the propagation of "/", and re-executes /proc/self/exe there with
// the same arguments: after execve every thread and every later child is
// inside (docs/design.md, rule 4). On success the first call therefore
// never returns. In the
// re-executed process Enter finds the marker, removes it from the
// environment and returns nil. Call it first thing in main, before any
// child is started. beforeExec, when set, is called right before the
// execve and returns more environment for the new image (what nodeinit
// knew of signals, say).
func Enter(beforeExec func() []string) error {
	from, marked := os.LookupEnv(MarkerEnv)
	if marked {
		// Unset first: whatever happens next, no child may see the marker.
		if err := os.Unsetenv(MarkerEnv); err != nil {
			return fmt.Errorf("remove %s from the environment: %w", MarkerEnv, err)
		}
	}
	current, err := Current()
	if err != nil {
		return fmt.Errorf("enter a private mount namespace: %w", err)
	}
	if marked && ValidMarker(from) {
		inPrivate = true
		return nil
	}
	mark, err := marker(current)
	if err != nil {
		return fmt.Errorf("enter a private mount namespace: %w", err)
	}

	// Never unlocked: this thread either execs or the process exits on the
	// error, and a thread with a namespace of its own must not run other
	// goroutines.
	runtime.LockOSThread()
	if err := linux.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("enter a private mount namespace: %w%s", err, permissionHint(err))
	}
	if err := linux.SetPropagation("/", unix.MS_SLAVE|unix.MS_REC); err != nil {
		return fmt.Errorf("make / a recursive slave in the new mount namespace: %w%s", err, permissionHint(err))
	}
	env := append(os.Environ(), MarkerEnv+"="+mark)
	if beforeExec != nil {
		env = append(env, beforeExec()...)
	}
	if err := linux.Exec(selfExe, os.Args, env); err != nil {
		return fmt.Errorf("re-execute nodeinit inside the new mount namespace: %w", err)
	}
	return nil
}

// InPrivate reports whether Enter found this process already re-executed
// into its private mount namespace.
func InPrivate() bool { return inPrivate }

// MakeRShared makes "/" and every mount below it shared (MS_SHARED|MS_REC) in
// the current mount namespace, so that mounts a kubelet makes below a
// volume path propagate to the runtime that needs to see them.
func MakeRShared() error {
	if err := linux.SetPropagation("/", unix.MS_SHARED|unix.MS_REC); err != nil {
		return fmt.Errorf("make / recursively shared: %w%s", err, permissionHint(err))
	}
	return nil
}

// Current returns the mount namespace of the calling thread, as
// "mnt:[INODE]".
func Current() (string, error) {
	ns, err := os.Readlink("/proc/thread-self/ns/mnt")
	if err != nil {
		return "", fmt.Errorf("read the current mount namespace: %w", err)
	}
	return ns, nil
}

// permissionHint explains an EPERM in one clause: the usual causes are a
// missing CAP_SYS_ADMIN (not root, or a container without the capability)
// and a seccomp profile that forbids unshare or mount.
func permissionHint(err error) string {
	if !errors.Is(err, unix.EPERM) {
		if errors.Is(err, unix.ENOSPC) {
			return " (too many mount namespaces: see /proc/sys/user/max_mnt_namespaces)"
		}
		return ""
	}
	status, serr := procstatus.Read("/proc/self/status")
	if serr != nil {
		return " (needs root or CAP_SYS_ADMIN)"
	}
	return " (" + explainEPERM(status) + ")"
}

// explainEPERM names the likely cause of an EPERM from the fields of
// /proc/self/status.
func explainEPERM(status procstatus.Status) string {
	if has, known := status.Effective(unix.CAP_SYS_ADMIN); known && !has {
		return "needs root or CAP_SYS_ADMIN"
	}
	if mode := status["Seccomp"]; mode != "" && mode != "0" {
		return "CAP_SYS_ADMIN is present, so a seccomp profile forbids it: run with one that allows unshare and mount"
	}
	return "CAP_SYS_ADMIN is present but not over this namespace: is nodeinit in a user namespace it does not own?"
}
