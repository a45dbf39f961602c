// Package linux wraps the raw Linux system calls nodeinit makes itself. Each
// is wrapped once: retried when the kernel interrupts it with EINTR (a
// signal arrived while it waited), and failing with an *os.SyscallError or
// *os.PathError that names the call, so that the rest of nodeinit never
// handles a bare errno or writes a retry loop of its own.
package linux

import (
	"errors"
	"os"
	"syscall"
	"time"
	"unsafe"

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

// Kill is kill(2): one process (pid > 0), a process group (pid < 0), or
// every process the caller may signal (pid -1). kill does not fail with
// EINTR.
func Kill(pid int, sig unix.Signal) error {
	if err := unix.Kill(pid, sig); err != nil {
		return os.NewSyscallError("kill", err)
	}
	return nil
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

// RecvmsgN is recvmsg(2), once, returning the bytes and control bytes read
// and the message flags. EAGAIN from a non-blocking socket is wrapped like
// any error.
func RecvmsgN(fd int, p, oob []byte, flags int) (n, oobn, recvflags int, from unix.Sockaddr, err error) {
	for {
		n, oobn, recvflags, from, err = unix.Recvmsg(fd, p, oob, flags)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return n, oobn, recvflags, from, os.NewSyscallError("recvmsg", err)
	}
	return n, oobn, recvflags, from, nil
}

// SendAll writes all of p to the connected socket behind rc, with fds as
// SCM_RIGHTS on its first byte, by sendmsg(2) with MSG_NOSIGNAL: a peer that
// has gone makes the write fail with EPIPE and raises no SIGPIPE in
// nodeinit, which would pass it on to the executor. It waits for the socket
// in Go's poller, within rc's write deadline, never on a thread.
func SendAll(rc syscall.RawConn, p []byte, fds []int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	for len(p) > 0 {
		var n int
		var serr error
		err := rc.Write(func(fd uintptr) bool {
			n, serr = SendmsgN(int(fd), p, oob, nil, unix.MSG_NOSIGNAL|unix.MSG_DONTWAIT)
			return !errors.Is(serr, unix.EAGAIN)
		})
		if err != nil {
			return err
		}
		if serr != nil {
			return serr
		}
		// The fds went with the first byte sent.
		p, oob = p[n:], nil
	}
	return nil
}

// PeerCred is the pid, uid and gid of a unix socket's peer as the kernel
// recorded them when it connected (SO_PEERCRED).
func PeerCred(fd int) (unix.Ucred, error) {
	cred, err := retry2(func() (*unix.Ucred, error) { return unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED) })
	if err != nil {
		return unix.Ucred{}, os.NewSyscallError("getsockopt SO_PEERCRED", err)
	}
	return *cred, nil
}

// PeerPidfd is a pidfd of a unix socket's peer (SO_PEERPIDFD, Linux 6.5):
// the process that connected, which no later process can be mistaken for
// even when it reuses the pid. On an older kernel it fails with
// ENOPROTOOPT, which errors.Is finds.
func PeerPidfd(fd int) (int, error) {
	pidfd, err := retry2(func() (int, error) { return unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PEERPIDFD) })
	if err != nil {
		return -1, os.NewSyscallError("getsockopt SO_PEERPIDFD", err)
	}
	// The kernel makes it with O_CLOEXEC.
	return pidfd, nil
}

// PidfdOpen is pidfd_open(2) (Linux 5.3): a descriptor that refers to the
// process pid is now, and to no other process, whatever reuses the pid. A
// kernel without it fails with ENOSYS, which errors.Is finds.
func PidfdOpen(pid int) (int, error) {
	fd, err := retry2(func() (int, error) { return unix.PidfdOpen(pid, 0) })
	if err != nil {
		return -1, os.NewSyscallError("pidfd_open", err)
	}
	return fd, nil
}

// HungUp reports whether fd's peer has hung up (POLLHUP, or an error): for
// the read end of a pipe, whether every write end is closed, whatever data
// is still in the pipe. It does not wait, and reads nothing.
func HungUp(fd int) (bool, error) {
	fds := []unix.PollFd{{Fd: int32(fd)}}
	if _, err := Poll(fds, 0); err != nil {
		return false, err
	}
	return fds[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0, nil
}

// Open is open(2) with O_CLOEXEC added: a descriptor nodeinit opens is its
// own, never a child's.
func Open(path string, flags int, mode uint32) (int, error) {
	fd, err := retry2(func() (int, error) { return unix.Open(path, flags|unix.O_CLOEXEC, mode) })
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, nil
}

// Openat is openat(2) with O_CLOEXEC added; name is relative to the
// directory dirfd.
func Openat(dirfd int, name string, flags int, mode uint32) (int, error) {
	fd, err := retry2(func() (int, error) { return unix.Openat(dirfd, name, flags|unix.O_CLOEXEC, mode) })
	if err != nil {
		return -1, &os.PathError{Op: "openat", Path: name, Err: err}
	}
	return fd, nil
}

// Renameat2 is renameat2(2) within one directory: old and new are names in
// dirfd. flags is 0 or RENAME_NOREPLACE; a file system that does not know
// the flag fails with EINVAL.
func Renameat2(dirfd int, old, new string, flags uint) error {
	if err := retry(func() error { return unix.Renameat2(dirfd, old, dirfd, new, flags) }); err != nil {
		return &os.LinkError{Op: "renameat2", Old: old, New: new, Err: err}
	}
	return nil
}

// Unlinkat is unlinkat(2): it removes the entry name of dirfd (a symbolic
// link itself, never what it points to).
func Unlinkat(dirfd int, name string, flags int) error {
	if err := retry(func() error { return unix.Unlinkat(dirfd, name, flags) }); err != nil {
		return &os.PathError{Op: "unlinkat", Path: name, Err: err}
	}
	return nil
}

// Fstat is fstat(2).
func Fstat(fd int, st *unix.Stat_t) error {
	if err := retry(func() error { return unix.Fstat(fd, st) }); err != nil {
		return os.NewSyscallError("fstat", err)
	}
	return nil
}

// Fstatat is fstatat(2); with AT_SYMLINK_NOFOLLOW it describes a symbolic
// link itself.
func Fstatat(dirfd int, name string, st *unix.Stat_t, flags int) error {
	if err := retry(func() error { return unix.Fstatat(dirfd, name, st, flags) }); err != nil {
		return &os.PathError{Op: "fstatat", Path: name, Err: err}
	}
	return nil
}

// Fstatfs is fstatfs(2).
func Fstatfs(fd int, st *unix.Statfs_t) error {
	if err := retry(func() error { return unix.Fstatfs(fd, st) }); err != nil {
		return os.NewSyscallError("fstatfs", err)
	}
	return nil
}

// Ftruncate is ftruncate(2).
func Ftruncate(fd int, size int64) error {
	if err := retry(func() error { return unix.Ftruncate(fd, size) }); err != nil {
		return os.NewSyscallError("ftruncate", err)
	}
	return nil
}

// SetNonblock sets or clears O_NONBLOCK on fd.
func SetNonblock(fd int, nonblocking bool) error {
	if err := retry(func() error { return unix.SetNonblock(fd, nonblocking) }); err != nil {
		return os.NewSyscallError("fcntl", err)
	}
	return nil
}

// Pipe2 is pipe2(2) with O_CLOEXEC added: fds[0] is the read end.
func Pipe2(fds *[2]int, flags int) error {
	if err := retry(func() error { return unix.Pipe2(fds[:], flags|unix.O_CLOEXEC) }); err != nil {
		return os.NewSyscallError("pipe2", err)
	}
	return nil
}

// ReadDirNames returns the names in the directory open as dirfd, read with
// getdents(2) through a descriptor of its own (so that the offset of dirfd,
// which others may share, never moves), without "." and "..".
func ReadDirNames(dirfd int) ([]string, error) {
	fd, err := Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var names []string
	buf := make([]byte, 8<<10)
	for {
		n, err := retry2(func() (int, error) { return unix.Getdents(fd, buf) })
		if err != nil {
			return nil, os.NewSyscallError("getdents64", err)
		}
		if n == 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

// SetPipeSize asks for a pipe's capacity with fcntl(F_SETPIPE_SZ) and
// returns the capacity the kernel gave, at least size.
func SetPipeSize(fd, size int) (int, error) {
	n, err := retry2(func() (int, error) { return unix.FcntlInt(uintptr(fd), unix.F_SETPIPE_SZ, size) })
	if err != nil {
		return 0, os.NewSyscallError("fcntl F_SETPIPE_SZ", err)
	}
	return n, nil
}

// Sigset is the kernel's signal set holding sigs.
func Sigset(sigs ...unix.Signal) (set unix.Sigset_t) {
	for _, sig := range sigs {
		set.Val[(sig-1)/64] |= 1 << ((sig - 1) % 64)
	}
	return set
}

// TakePending takes one signal of set that is pending for the calling
// thread or the process, without waiting: rt_sigtimedwait(2) with a zero
// timeout. ok is false when none is pending.
func TakePending(set *unix.Sigset_t) (sig unix.Signal, ok bool) {
	var zero unix.Timespec
	n, err := retry2(func() (uintptr, error) {
		r, _, errno := unix.RawSyscall6(unix.SYS_RT_SIGTIMEDWAIT, uintptr(unsafe.Pointer(set)), 0,
			uintptr(unsafe.Pointer(&zero)), unsafe.Sizeof(set.Val[0]), 0, 0)
		if errno != 0 {
			return 0, errno
		}
		return r, nil
	})
	return unix.Signal(n), err == nil // EAGAIN: none is pending
}

// Mount is mount(2).
func Mount(source, target, fstype string, flags uintptr, data string) error {
	if err := retry(func() error { return unix.Mount(source, target, fstype, flags, data) }); err != nil {
		return &os.PathError{Op: "mount", Path: target, Err: err}
	}
	return nil
}

// NamespaceOwner identifies the user namespace that owns the namespace at
// path (a /proc/PID/ns file): ioctl(NS_GET_USERNS), then fstat of what it
// returns, as device and inode, which compare with a stat of
// /proc/PID/ns/user.
func NamespaceOwner(path string) (dev, ino uint64, err error) {
	fd, err := Open(path, unix.O_RDONLY, 0)
	if err != nil {
		return 0, 0, err
	}
	defer unix.Close(fd)
	owner, err := retry2(func() (int, error) { return unix.IoctlRetInt(fd, unix.NS_GET_USERNS) })
	if err != nil {
		return 0, 0, &os.PathError{Op: "ioctl NS_GET_USERNS", Path: path, Err: err}
	}
	defer unix.Close(owner)
	var st unix.Stat_t
	if err := Fstat(owner, &st); err != nil {
		return 0, 0, err
	}
	return st.Dev, st.Ino, nil
}

// GetsockoptBytes is getsockopt(2) into buf, for options whose value is a
// structure the kernel fills (iptables' IPT_SO_GET_INFO, _ENTRIES); it
// returns the length the kernel wrote. buf's first bytes are the request.
func GetsockoptBytes(fd, level, opt int, buf []byte) (int, error) {
	n := uint32(len(buf))
	err := retry(func() error {
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt),
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		if e != 0 {
			return e
		}
		return nil
	})
	if err != nil {
		return 0, os.NewSyscallError("getsockopt", err)
	}
	return int(n), nil
}

// Socket is socket(2) with SOCK_CLOEXEC added: a descriptor nodeinit opens
// is its own, never a child's.
func Socket(domain, typ, proto int) (int, error) {
	fd, err := unix.Socket(domain, typ|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	return fd, nil
}

// Bind is bind(2).
func Bind(fd int, sa unix.Sockaddr) error {
	if err := unix.Bind(fd, sa); err != nil {
		return os.NewSyscallError("bind", err)
	}
	return nil
}

// SetReceiveTimeout bounds each blocking receive on fd (SO_RCVTIMEO): one
// that waits longer fails with EAGAIN.
func SetReceiveTimeout(fd int, d time.Duration) error {
	tv := unix.NsecToTimeval(d.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return os.NewSyscallError("setsockopt SO_RCVTIMEO", err)
	}
	return nil
}

// Sendto is sendto(2), once.
func Sendto(fd int, p []byte, flags int, to unix.Sockaddr) error {
	if err := retry(func() error { return unix.Sendto(fd, p, flags, to) }); err != nil {
		return os.NewSyscallError("sendto", err)
	}
	return nil
}

// Recvfrom is recvfrom(2), retried on EINTR.
func Recvfrom(fd int, p []byte, flags int) (int, error) {
	n, err := retry2(func() (int, error) {
		n, _, err := unix.Recvfrom(fd, p, flags)
		return n, err
	})
	if err != nil {
		return n, os.NewSyscallError("recvfrom", err)
	}
	return n, nil
}
