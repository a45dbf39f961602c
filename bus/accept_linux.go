package bus

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// The accept loops. The kubelet connects once and never retries, and its
// connect, like sd-bus's and Go's, does not wait: when the socket's listen
// backlog is full it fails with EAGAIN. Whoever can connect to the socket
// can fill the backlog, by connecting faster than the bus accepts; and a
// refused connection costs the bus about what it costs the process that
// made it (accept4 and close against socket, connect and close: some
// 25 µs each on a 2-core machine), so a process with more threads than the
// bus has loops, at the same priority, fills it (measured: four threads
// against the two loops of a 2-core machine, backlog 4096).
//
// So the loops win by priority, not by speed: each runs on an OS thread of
// its own at real-time priority (SCHED_FIFO 1; nice -20 where that is not
// allowed), one per processor nodeinit may use. A loop is woken by the
// first connection in the backlog and preempts every ordinary process on
// its processor until the backlog is empty again, so a process that
// connects in a loop gets a processor the loops share only while the
// backlog is empty, and cannot fill it: its connects wait for the
// accepts, not the other way round.
// Between two accepts a loop does only what cannot wait: SO_PEERCRED, and
// the refusals that need no walk (a process outside the pid namespace,
// one refused before and alive, every process once the executor has
// ended), each counted and never logged there (refusals). Every other
// connection goes to the checkers, ordinary goroutines that walk /proc
// (admit); when they are behind, the loop checks it itself rather than
// drop what may be the kubelet's. The kernel wakes one loop per
// connection (EPOLLEXCLUSIVE), not all of them.

const (
	// maxAcceptLoops bounds the accept loops, one per processor nodeinit
	// may use (GOMAXPROCS; a loop needs one to run Go code on): the
	// threads nodeinit keeps for them on a large machine.
	maxAcceptLoops = 16
	// maxChecking bounds the connections accepted and waiting for a
	// checker.
	maxChecking = 64
	// acceptRetry is the pause after a failed accept (EMFILE and the
	// like), so that a lasting failure does not spin.
	acceptRetry = 100 * time.Millisecond
)

// The messages of what a loop counts (refusals).
const (
	msgRefused       = "Refused a D-Bus connection from a process that may not use this bus"
	msgTooMany       = "Refused a D-Bus connection: too many open"
	msgNoCred        = "Could not tell who opened a D-Bus connection; closed it"
	msgAcceptFailed  = "Could not accept a D-Bus connection"
	msgScreenPanic   = "Screening a D-Bus connection failed; closed it"
	msgAcceptStopped = "Cannot accept D-Bus connections"
)

// startAccepting starts the accept loops and the checkers on the
// listener.
func (b *Bus) startAccepting() error {
	rc, err := b.ln.SyscallConn()
	if err != nil {
		return fmt.Errorf("bus: %w", err)
	}
	// The loops' own descriptor of the socket, which Close closes only
	// once they have ended: a descriptor closed under a loop could be
	// reused by another file before the loop's next accept4. It shares
	// O_NONBLOCK with the listener's.
	var derr error
	if err := rc.Control(func(fd uintptr) {
		b.lfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil || derr != nil {
		b.lfd = -1
		return fmt.Errorf("bus: %w", errors.Join(err, derr))
	}
	if b.stop, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		unix.Close(b.lfd)
		b.lfd, b.stop = -1, -1
		return fmt.Errorf("bus: %w", err)
	}
	var eps []int
	for range b.loopCount() {
		ep, err := b.acceptEpoll()
		if err != nil {
			for _, ep := range eps {
				unix.Close(ep)
			}
			unix.Close(b.lfd)
			unix.Close(b.stop)
			b.lfd, b.stop = -1, -1
			return fmt.Errorf("bus: %w", err)
		}
		eps = append(eps, ep)
	}
	b.checking = make(chan int, maxChecking)
	b.accepting = true
	b.loops.Add(len(eps))
	for i, ep := range eps {
		b.wg.Add(1)
		go b.acceptLoop(ep, i == 0)
		b.spawn(b.check)
	}
	b.spawn(func() {
		// The descriptors the loops use, once they have ended; and the
		// connections accepted that no checker took.
		b.loops.Wait()
		<-b.done // Close has woken them through b.stop, and is done with it
		unix.Close(b.lfd)
		unix.Close(b.stop)
		for {
			select {
			case fd := <-b.checking:
				unix.Close(fd)
			default:
				return
			}
		}
	})
	return nil
}

// acceptEpoll is an epoll set of a loop: the socket, woken for one loop
// per connection, and the stop event, for every loop.
func (b *Bus) acceptEpoll() (int, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return -1, err
	}
	err = unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, b.lfd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLEXCLUSIVE, Fd: int32(b.lfd)})
	if err == nil {
		err = unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, b.stop, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(b.stop)})
	}
	if err != nil {
		unix.Close(ep)
		return -1, err
	}
	return ep, nil
}

// acceptLoop takes connections off the backlog until Close, on an OS
// thread of its own at the loops' priority. The thread is never given
// back: it ends with the loop, and its priority with it.
func (b *Bus) acceptLoop(ep int, first bool) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		// The main thread, which Go keeps, parked, when its locked
		// goroutine ends: it would keep the loops' priority. Another
		// goroutine takes the loop, started while this one holds the main
		// thread, and checks again.
		b.wg.Add(1)
		go b.acceptLoop(ep, first)
		runtime.UnlockOSThread()
		b.wg.Done()
		return
	}
	defer b.wg.Done()
	defer b.loops.Done()
	defer unix.Close(ep)
	prio, err := raisePriority()
	if first {
		if err != nil {
			klog.InfoS("The bus accepts connections at the priority of any process: one that connects in a loop from more threads than nodeinit has processors can fill its backlog, and a kubelet that connects then cannot use it",
				"socket", b.path, "err", err)
		} else {
			klog.V(1).InfoS("The bus accepts connections at a priority above any ordinary process", "socket", b.path, "scheduling", prio, "loops", b.loopCount())
		}
	}
	events := make([]unix.EpollEvent, 2)
	for !b.closing.Load() {
		fd, errno := accept4(b.lfd)
		switch errno {
		case 0:
			b.screen(fd)
		case unix.EAGAIN:
			// The backlog is empty: sleep until it is not, or Close.
			if _, err := unix.EpollWait(ep, events, -1); err != nil && !errors.Is(err, unix.EINTR) {
				b.refusals.add(msgAcceptStopped, err.Error(), false, unix.Ucred{})
				return
			}
		case unix.ECONNABORTED, unix.EINTR:
		default:
			b.refusals.add(msgAcceptFailed, os.NewSyscallError("accept4", errno).Error(), false, unix.Ucred{})
			t := time.NewTimer(acceptRetry)
			select {
			case <-t.C:
			case <-b.done:
				t.Stop()
			}
		}
	}
}

// loopCount is the number of accept loops.
func (b *Bus) loopCount() int { return min(max(runtime.GOMAXPROCS(0), 1), maxAcceptLoops) }

// screen refuses, on the loop, the connection fd whose peer can be
// refused without a walk, and hands every other to a checker. fd is
// screen's from here on.
func (b *Bus) screen(fd int) {
	defer func() {
		if p := recover(); p != nil {
			if fd >= 0 {
				closeFD(fd)
			}
			b.refusals.add(msgScreenPanic, fmt.Sprintf("panic: %v\n%s", p, debug.Stack()), false, unix.Ucred{})
		}
	}()
	cred, errno := peerCred(fd)
	if errno != 0 {
		closeFD(fd)
		fd = -1
		b.refusals.add(msgNoCred, os.NewSyscallError("getsockopt SO_PEERCRED", errno).Error(), false, unix.Ucred{})
		return
	}
	if why := b.refusedAtOnce(cred); why != "" {
		closeFD(fd)
		fd = -1
		b.refusals.add(msgRefused, why, true, cred)
		return
	}
	select {
	case b.checking <- fd:
	default:
		// The checkers are behind: this loop checks it, rather than
		// drop what may be the kubelet's.
		b.admit(fd)
	}
	fd = -1
}

// The loops' system calls. They are raw, and allocate nothing: each
// returns at once (accept4 on a non-blocking socket, getsockopt, close, a
// poll that does not wait), so the loop keeps its processor in Go's
// scheduler through them; and what a loop allocates is what makes Go's
// collector stop it, at the rate of the flood.

// accept4 takes a connection off the backlog, without its peer's address.
func accept4(lfd int) (int, unix.Errno) {
	for {
		fd, _, errno := unix.RawSyscall6(unix.SYS_ACCEPT4, uintptr(lfd), 0, 0, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
		if errno != unix.EINTR {
			return int(fd), errno
		}
	}
}

// peerCred is the connection's SO_PEERCRED.
func peerCred(fd int) (unix.Ucred, unix.Errno) {
	var cred unix.Ucred
	n := uint32(unix.SizeofUcred)
	_, _, errno := unix.RawSyscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERCRED, uintptr(unsafe.Pointer(&cred)), uintptr(unsafe.Pointer(&n)), 0)
	return cred, errno
}

// closeFD closes fd. A close that fails has closed it all the same.
func closeFD(fd int) { unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0) }

// pidfdExited reports whether the process of a pidfd has ended, without
// waiting; a pidfd that cannot be polled counts as ended.
func pidfdExited(pidfd int) bool {
	p := unix.PollFd{Fd: int32(pidfd), Events: unix.POLLIN}
	var zero unix.Timespec
	for {
		n, _, errno := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&p)), 1, uintptr(unsafe.Pointer(&zero)), 0, 0, 0)
		switch {
		case errno == unix.EINTR:
		case errno != 0:
			return true
		default:
			return n == 1 && p.Revents != 0
		}
	}
}

// check admits or refuses the connections the loops hand over, until
// Close.
func (b *Bus) check() {
	for {
		select {
		case fd := <-b.checking:
			b.admit(fd)
		case <-b.done:
			return
		}
	}
}

// raisePriority puts the calling thread above every ordinary process:
// real-time (SCHED_FIFO at its lowest priority), else nice -20. Either
// resets on fork, so nothing the thread would start inherits it. It fails
// without CAP_SYS_NICE, or for real-time in a cgroup given no real-time
// time (cgroup v1's cpu.rt_runtime_us), then nice -20 is tried.
func raisePriority() (string, error) {
	fifo := unix.SchedAttr{Policy: unix.SCHED_FIFO, Priority: 1, Flags: unix.SCHED_FLAG_RESET_ON_FORK}
	ferr := unix.SchedSetAttr(0, &fifo, 0)
	if ferr == nil {
		return "SCHED_FIFO 1", nil
	}
	nice := unix.SchedAttr{Policy: unix.SCHED_NORMAL, Nice: -20, Flags: unix.SCHED_FLAG_RESET_ON_FORK}
	nerr := unix.SchedSetAttr(0, &nice, 0)
	if nerr == nil {
		return "nice -20", nil
	}
	return "", fmt.Errorf("sched_setattr: SCHED_FIFO: %w; nice -20: %w", ferr, nerr)
}
