package bus

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/bus/internal/wire"
	"github.com/nodeinit/nodeinit/init/proctree"
	"github.com/nodeinit/nodeinit/internal/linux"
)

// Who may use the bus: the executor and the processes below it, and nobody
// before the executor runs or after it has ended. The kernel says who a
// peer is (SO_PEERCRED, and SO_PEERPIDFD where it has it); what the peer
// sends does not count.
//
// The check runs on the accept loop, before the connection costs the bus a
// goroutine, a slot or a buffer. It does not block: it reads a few
// /proc/PID/stat files (which never wait for the process they describe),
// at most one per generation up to the executor or init, and polls pidfds
// with a zero timeout. A process refused once is remembered by its pidfd
// for as long as it lives, so that one that connects in a loop costs a
// poll per connection, not a walk: a process outside the executor's tree
// never comes into it (when its parent ends, the kernel gives it to a
// subreaper above it or to init, never to a process below the executor).
// A new executor (AdmitExecutor) starts the memory afresh.

// Limits per peer process: they keep one process, or a handful, from
// taking what the kubelet needs.
const (
	// maxConnsPerPeer bounds the connections of one process. The kubelet
	// keeps one.
	maxConnsPerPeer = 4
	// maxRemembered bounds the refused processes remembered, each by a
	// pidfd the bus holds.
	maxRemembered = 16
)

// executor is the process whose tree may use the bus.
type executor struct {
	pid   int
	pidfd int // -1 where the kernel has no pidfd_open (before Linux 5.3)
}

// AdmitExecutor lets the process pid, the executor, and every process below
// it use the bus, from now on and until it ends: nodeinit calls it once the
// executor runs, and until then the bus admits nobody. It holds a pidfd of
// the executor, so an executor that has ended admits nobody even when
// another process gets its pid. A second call replaces the first.
func (b *Bus) AdmitExecutor(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("bus: no executor to admit: pid %d", pid)
	}
	pidfd, err := linux.PidfdOpen(pid)
	if errors.Is(err, unix.ENOSYS) {
		pidfd, err = -1, nil
	}
	if err != nil {
		return fmt.Errorf("bus: the executor %d: %w", pid, err)
	}
	b.mu.Lock()
	pidfds := b.forgetPidfds()
	if b.closed {
		// Close has let go of the executor already.
		if pidfd >= 0 {
			pidfds = append(pidfds, pidfd)
		}
	} else {
		b.executor = executor{pid: pid, pidfd: pidfd}
	}
	b.knowExecutor()
	b.mu.Unlock()
	wire.CloseFDs(pidfds)
	return nil
}

// forgetPidfds lets go of the executor and of the refused processes, and
// returns their pidfds for the caller to close once it has let go of b.mu.
func (b *Bus) forgetPidfds() []int {
	var pidfds []int
	if b.executor.pidfd >= 0 {
		pidfds = append(pidfds, b.executor.pidfd)
	}
	b.executor = executor{pidfd: -1}
	for pid, fd := range b.refused {
		pidfds = append(pidfds, fd)
		delete(b.refused, pid)
	}
	return pidfds
}

// errNoExecutorYet is admitted's reason while AdmitExecutor has not been
// called: a connection that comes then waits for it (admitLater).
const errNoExecutorYet = "the executor has not started"

// admitted decides whether the peer of the connection fd, cred, may use
// the bus; when not, it says why, for the log.
func (b *Bus) admitted(fd int, cred unix.Ucred) (bool, string) {
	pid := int(cred.Pid)
	b.mu.Lock()
	exe := b.executor.pid
	why := b.refusal(cred)
	if exe == 0 {
		why = errNoExecutorYet
	}
	b.mu.Unlock()
	if why != "" {
		return false, why
	}
	pidfd, err := b.tun.peerPidfd(fd)
	switch {
	case errors.Is(err, unix.ENOPROTOOPT):
		// Before Linux 6.5: the pid alone, checked as well as it can be.
		pidfd = -1
	case err != nil:
		return false, err.Error()
	default:
		defer func() {
			if pidfd >= 0 {
				unix.Close(pidfd)
			}
		}()
	}
	in, err := proctree.Within(b.tun.procRoot, pid, exe)
	if err != nil {
		return false, err.Error()
	}
	// The walk read pids. If the peer still lives, its pid was its own
	// through the walk, and no other process's.
	if pidfd >= 0 && exited(pidfd) {
		return false, "the process ended before it was checked"
	}
	if !in {
		if pidfd >= 0 {
			b.remember(pid, pidfd)
			pidfd = -1
		}
		return false, "the process is not the executor or below it"
	}
	return true, ""
}

// refusedAtOnce says why the peer cred may not use the bus, where that
// needs no walk; "" when it may, or a walk must tell, or the executor is
// not known yet. It is the accept loop's check (screen).
func (b *Bus) refusedAtOnce(cred unix.Ucred) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.executor.pid == 0 {
		return ""
	}
	return b.refusal(cred)
}

// refusal is refusedAtOnce with b.mu held, once the executor is known.
func (b *Bus) refusal(cred unix.Ucred) string {
	switch {
	case b.executor.pidfd >= 0 && exited(b.executor.pidfd):
		return "the executor has ended"
	case cred.Pid <= 0:
		// SO_PEERCRED says 0 for a process in a pid namespace this one
		// cannot see.
		return "the process is outside nodeinit's pid namespace"
	case b.isRemembered(int(cred.Pid)):
		return "the process was refused before"
	}
	return ""
}

// isRemembered reports whether the process pid is one refused before and
// still alive. b.mu is held.
func (b *Bus) isRemembered(pid int) bool {
	fd, ok := b.refused[pid]
	if !ok {
		return false
	}
	if !exited(fd) {
		// Alive: the pid has been that process's all along.
		return true
	}
	unix.Close(fd)
	delete(b.refused, pid)
	return false
}

// remember keeps pidfd as that of the refused process pid; it takes
// pidfd.
func (b *Bus) remember(pid, pidfd int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		unix.Close(pidfd)
		return
	}
	if len(b.refused) >= maxRemembered {
		for pid, fd := range b.refused {
			if exited(fd) {
				unix.Close(fd)
				delete(b.refused, pid)
			}
		}
	}
	if len(b.refused) >= maxRemembered {
		// All alive: forget one; it costs a walk if it comes back.
		for pid, fd := range b.refused {
			unix.Close(fd)
			delete(b.refused, pid)
			break
		}
	}
	if old, ok := b.refused[pid]; ok {
		unix.Close(old)
	}
	b.refused[pid] = pidfd
}

// exited reports whether a pidfd's process has ended; a pidfd that cannot
// be polled counts as ended, so that it admits nobody.
func exited(pidfd int) bool { return pidfdExited(pidfd) }

// knowExecutor wakes the connections waiting for the executor to be
// known. b.mu is held.
func (b *Bus) knowExecutor() {
	select {
	case <-b.executorKnown:
	default:
		close(b.executorKnown)
	}
}

// maxWaiting bounds the connections that wait for the executor to be
// known.
const maxWaiting = maxConns

// admitLater waits, on a goroutine of its own, for AdmitExecutor (at most
// helloTimeout after the accept) and then admits the connection fd as
// admit would. The executor runs before nodeinit learns its pid (the fork
// returns once it has exec'd), so a fast one can connect first: refused
// then, a kubelet would never try again and the node would not drain. It
// reports false, leaving fd to the caller, when too many wait already.
func (b *Bus) admitLater(fd int, accepted time.Time) bool {
	b.mu.Lock()
	if b.closed || b.waiting >= maxWaiting {
		b.mu.Unlock()
		return false
	}
	b.waiting++
	b.wg.Add(1)
	b.mu.Unlock()
	go func() {
		defer b.wg.Done()
		t := time.NewTimer(max(accepted.Add(b.tun.helloTimeout).Sub(b.tun.now()), 0))
		defer t.Stop()
		closing := false
		select {
		case <-b.executorKnown:
		case <-t.C:
		case <-b.done:
			closing = true
		}
		b.mu.Lock()
		b.waiting--
		b.mu.Unlock()
		if closing {
			unix.Close(fd)
			return
		}
		b.admitWith(fd, accepted, false)
	}()
	return true
}
