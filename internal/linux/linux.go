// Package linux wraps the raw Linux system calls nodeinit makes itself. Each
// is wrapped once: retried when the kernel interrupts it with EINTR (a
// signal arrived while it waited), and failing with an *os.SyscallError or
// *os.PathError that names the call, so that the rest of nodeinit never
// handles a bare errno or writes a retry loop of its own.
package linux

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// retry calls fn until it returns anything but EINTR.
func retry(fn func() error) error {
	for {
		if err := fn(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// retry2 is retry for a call that also returns a value.
func retry2[T any](fn func() (T, error)) (T, error) {
	for {
		v, err := fn()
		if !errors.Is(err, unix.EINTR) {
			return v, err
		}
	}
}

// Wait4 is wait4(2). ECHILD is returned as it is (unwrapped) so that callers
// can compare it: it is the normal end of reaping, not a failure.
func Wait4(pid int, ws *unix.WaitStatus, options int) (int, error) {
	wpid, err := retry2(func() (int, error) { return unix.Wait4(pid, ws, options, nil) })
	if err != nil && !errors.Is(err, unix.ECHILD) {
		return wpid, os.NewSyscallError("wait4", err)
	}
	return wpid, err
}

// Read is read(2). EAGAIN from a non-blocking descriptor is wrapped like any
// error; errors.Is(err, unix.EAGAIN) still finds it.
func Read(fd int, p []byte) (int, error) {
	n, err := retry2(func() (int, error) { return unix.Read(fd, p) })
	if err != nil {
		return n, os.NewSyscallError("read", err)
	}
	return n, nil
}

// Write is write(2), once: a short count is the caller's to handle.
func Write(fd int, p []byte) (int, error) {
	n, err := retry2(func() (int, error) { return unix.Write(fd, p) })
	if err != nil {
		return n, os.NewSyscallError("write", err)
	}
	return n, nil
}

// Poll is poll(2). An interrupted poll is started again with the whole
// timeout: callers wait for an event, not for a deadline.
func Poll(fds []unix.PollFd, timeoutMs int) (int, error) {
	n, err := retry2(func() (int, error) { return unix.Poll(fds, timeoutMs) })
	if err != nil {
		return n, os.NewSyscallError("poll", err)
	}
	return n, nil
}

// EpollWait is epoll_wait(2), restarted like Poll.
func EpollWait(epfd int, events []unix.EpollEvent, timeoutMs int) (int, error) {
	n, err := retry2(func() (int, error) { return unix.EpollWait(epfd, events, timeoutMs) })
	if err != nil {
		return n, os.NewSyscallError("epoll_wait", err)
	}
	return n, nil
}

// Unshare is unshare(2).
func Unshare(flags int) error {
	if err := retry(func() error { return unix.Unshare(flags) }); err != nil {
		return os.NewSyscallError("unshare", err)
	}
	return nil
}

// SetPropagation changes the propagation type of the mount at target
// (MS_SHARED, MS_SLAVE, MS_PRIVATE, with MS_REC for the whole subtree).
func SetPropagation(target string, flags uintptr) error {
	if err := retry(func() error { return unix.Mount("", target, "", flags, "") }); err != nil {
		return &os.PathError{Op: "mount", Path: target, Err: err}
	}
	return nil
}

// Exec is execve(2); it returns only on failure.
func Exec(path string, argv, env []string) error {
	err := retry(func() error { return unix.Exec(path, argv, env) })
	return &os.PathError{Op: "execve", Path: path, Err: err}
}

// SendmsgN is sendmsg(2), once: a short count is the caller's to handle.
// EAGAIN from a non-blocking socket is wrapped like any error.
func SendmsgN(fd int, p, oob []byte, to unix.Sockaddr, flags int) (int, error) {
	n, err := retry2(func() (int, error) { return unix.SendmsgN(fd, p, oob, to, flags) })
	if err != nil {
		return n, os.NewSyscallError("sendmsg", err)
	}
	return n, nil
}
