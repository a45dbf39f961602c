package logind

import (
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/bus/service"
	"github.com/nodeinit/nodeinit/internal/clientlog"
	"github.com/nodeinit/nodeinit/internal/linux"
)

// inhibitor is one delay lock: the read end of a pipe whose write end the
// client holds. The lock lasts while any copy of the write end is open, as
// logind's does; the bus learns it is released when the pipe hangs up.
type inhibitor struct {
	id       uint64
	who, why string
	pid      int32
	uid      uint32
	since    time.Time
	r        *os.File // read end, non-blocking, in Go's poller
}

// Limits of the delay locks: they keep one process, or a handful, from
// taking what the kubelet needs.
const (
	// maxInhibitorsPerPeer bounds the delay locks one process takes. The
	// kubelet holds one, two for a moment when it takes a new one before
	// releasing the old.
	maxInhibitorsPerPeer = 4
	// maxInhibitors bounds the delay locks held at once, those of the
	// executor process itself aside.
	maxInhibitors = 64
)

// lockPipeSize is the capacity asked for an inhibitor's pipe: the least
// the kernel gives (a page). Nothing is ever read from it, so what a
// client writes into its end fills it and then blocks the client.
const lockPipeSize = 4096

// inhibit takes a shutdown delay lock for the peer cred and returns the
// write end of its pipe, which the caller sends to the client and then
// closes.
func (l *Logind) inhibit(cred unix.Ucred, who, why string) (int, *service.Error) {
	var p [2]int
	if err := linux.Pipe2(&p, 0); err != nil {
		return -1, &service.Error{Name: service.Failed, Text: fmt.Sprintf("Could not make the inhibitor's pipe: %v", err)}
	}
	// Non-blocking, the read end waits in Go's poller, not on a thread,
	// and Close unblocks it.
	if err := linux.SetNonblock(p[0], true); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return -1, &service.Error{Name: service.Failed, Text: fmt.Sprintf("Could not make the inhibitor's pipe: %v", err)}
	}
	// A smaller pipe only bounds sooner what a writer can put in; a
	// kernel that refuses keeps the default.
	_, _ = linux.SetPipeSize(p[0], lockPipeSize)
	in := &inhibitor{who: clientlog.Clip(who), why: clientlog.Clip(why), pid: cred.Pid, uid: cred.Uid, since: l.host.Now(),
		r: os.NewFile(uintptr(p[0]), "inhibitor")}

	executor := l.host.Executor()
	l.mu.Lock()
	var refused *service.Error
	own, held, others := int(cred.Pid) == executor, 0, 0
	for h := range l.inhibitors {
		switch {
		case h.pid == cred.Pid:
			held++
		case int(h.pid) != executor:
			others++
		}
	}
	if !own {
		others += held
	}
	switch {
	case l.closed:
		refused = &service.Error{Name: service.Failed, Text: "The bus is closing"}
	case l.drained != nil:
		refused = &service.Error{Name: errOperationInProgress, Text: "The operation inhibition has been requested for is already running"}
	case held >= maxInhibitorsPerPeer:
		refused = &service.Error{Name: service.LimitsExceeded, Text: fmt.Sprintf("This process holds %d inhibitors, the most one may hold", held)}
	case !own && others >= maxInhibitors:
		refused = &service.Error{Name: service.LimitsExceeded, Text: fmt.Sprintf("Too many inhibitors (%d), refusing", others)}
	}
	if refused != nil {
		l.mu.Unlock()
		in.r.Close()
		unix.Close(p[1])
		return -1, refused
	}
	l.inhibitorID++
	in.id = l.inhibitorID
	l.inhibitors[in] = struct{}{}
	n := len(l.inhibitors)
	l.mu.Unlock()

	l.host.Go(func() { l.watch(in) })
	l.host.Log().Info("Took a shutdown delay inhibitor", "who", in.who, "why", in.why, "pid", in.pid, "uid", in.uid, "inhibitors", n)
	return p[1], nil
}

// listedInhibitor is one element of ListInhibitors' answer, a(ssssuu).
type listedInhibitor struct {
	What, Who, Why, Mode string
	UID, PID             uint32
}

// listInhibitors answers ListInhibitors as logind does: every lock held,
// whoever holds it (logind asks no privilege for the list), with what,
// who, why (as clipped when taken), mode, uid and pid; in the order they
// were taken.
func (l *Logind) listInhibitors() []listedInhibitor {
	l.mu.Lock()
	held := l.held()
	l.mu.Unlock()
	list := make([]listedInhibitor, 0, len(held))
	for _, in := range held {
		list = append(list, listedInhibitor{"shutdown", in.who, in.why, "delay", in.uid, uint32(in.pid)})
	}
	return list
}

// watch waits for the lock's release: the pipe's hang-up once the client's
// every copy of the write end is closed, or an error once Close closes the
// read end. It never reads: what a client writes into its end stays there,
// and costs the bus one wake-up per write until the pipe is full, then
// none (logind, too, only waits for the hang-up). A panic releases the lock.
func (l *Logind) watch(in *inhibitor) {
	defer func() {
		if p := recover(); p != nil {
			l.host.Log().Error(fmt.Errorf("panic: %v", p), "Watching a shutdown delay inhibitor failed; released it", "pid", in.pid, "stack", string(debug.Stack()))
		}
	}()
	defer l.release(in)
	defer in.r.Close()
	rc, err := in.r.SyscallConn()
	if err != nil {
		return
	}
	// The poller calls this on every readiness of the pipe: new data or
	// the hang-up. Returning false waits for the next one.
	_ = rc.Read(func(fd uintptr) bool {
		gone, err := linux.HungUp(int(fd))
		return gone || err != nil
	})
}

func (l *Logind) release(in *inhibitor) {
	l.mu.Lock()
	delete(l.inhibitors, in)
	n := len(l.inhibitors)
	if n == 0 && l.drained != nil && !l.drainedClosed {
		close(l.drained)
		l.drainedClosed = true
	}
	l.mu.Unlock()
	l.host.Log().Info("Released a shutdown delay inhibitor", "who", in.who, "pid", in.pid, "held", l.host.Now().Sub(in.since).Round(time.Millisecond), "inhibitors", n)
}
