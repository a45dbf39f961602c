package testenv

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// InPrivateMountNamespace runs fn on an OS thread of its own in a new,
// private mount namespace, as nodeinit's is: the mounts fn makes are seen
// there only. The thread is thrown away afterwards (never unlocked), so no
// other goroutine runs in that namespace. It needs root.
func InPrivateMountNamespace(tb testing.TB, fn func() error) error {
	tb.Helper()
	RequireRoot(tb)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS); err != nil {
			done <- err
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_PRIVATE|unix.MS_REC, ""); err != nil {
			done <- err
			return
		}
		done <- fn()
	}()
	return <-done
}
