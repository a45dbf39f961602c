package mountns

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// The raw system calls of this package, each wrapped once: retried on EINTR
// where the kernel may return it, and returned as *os.SyscallError or
// *os.PathError so that callers never see a bare errno.

func unshare(flags int) error {
	for {
		err := unix.Unshare(flags)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return os.NewSyscallError("unshare", err)
		}
		return nil
	}
}

// setPropagation changes the propagation type of the mount at target.
func setPropagation(target string, flags uintptr) error {
	for {
		err := unix.Mount("", target, "", flags, "")
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "mount", Path: target, Err: err}
		}
		return nil
	}
}

// execve replaces the process image; it returns only on failure.
func execve(path string, argv, env []string) error {
	for {
		err := unix.Exec(path, argv, env)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return &os.PathError{Op: "execve", Path: path, Err: err}
	}
}
