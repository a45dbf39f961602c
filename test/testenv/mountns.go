package testenv

import (
	"fmt"
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

// Tmpfs mounts a tmpfs of size bytes on a new directory, unmounted when the
// test ends: a small disk to fill. It needs root.
func Tmpfs(tb testing.TB, size int) string {
	tb.Helper()
	RequireRoot(tb)
	dir := tb.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
		tb.Fatalf("mount a tmpfs on %s: %v", dir, err)
	}
	tb.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			tb.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}
