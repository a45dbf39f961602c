package logind

import (
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// inhibitor is one delay lock: the read end of a pipe whose write end the
// client holds. The lock lasts while any copy of the write end is open, as
// logind's does; the bus learns it is released when its read returns EOF.
type inhibitor struct {
	id       uint64
	who, why string
	pid      int32
	uid      uint32
	since    time.Time
	r        *os.File // read end, non-blocking, in Go's poller
}

// maxLabel bounds the who and why kept for the status line.
const maxLabel = 128

// inhibit takes a shutdown delay lock for the peer cred and returns the
// write end of its pipe, which the caller sends to the client and then
// closes.
func (b *Bus) inhibit(cred unix.Ucred, who, why string) (int, *callError) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return -1, &callError{errFailed, fmt.Sprintf("Could not make the inhibitor's pipe: %v", err)}
	}
	// Non-blocking, the read end waits in Go's poller, not on a thread,
	// and Close unblocks it.
	if err := unix.SetNonblock(p[0], true); err != nil {
		closeFDs(p[:])
		return -1, &callError{errFailed, fmt.Sprintf("Could not make the inhibitor's pipe: %v", err)}
	}
	in := &inhibitor{who: label(who), why: label(why), pid: cred.Pid, uid: cred.Uid, since: time.Now(),
		r: os.NewFile(uintptr(p[0]), "inhibitor")}

	b.mu.Lock()
	var refused *callError
	switch {
	case b.closed:
		refused = &callError{errFailed, "The bus is closing"}
	case b.drained != nil:
		refused = &callError{errOperationInProgress, "The operation inhibition has been requested for is already running"}
	case len(b.inhibitors) >= maxInhibitors:
		refused = &callError{errLimitsExceeded, fmt.Sprintf("Too many inhibitors (%d), refusing", len(b.inhibitors))}
	}
	if refused != nil {
		b.mu.Unlock()
		in.r.Close()
		unix.Close(p[1])
		return -1, refused
	}
	b.inhibitorID++
	in.id = b.inhibitorID
	b.inhibitors[in] = struct{}{}
	n := len(b.inhibitors)
	b.wg.Add(1)
	b.mu.Unlock()

	go b.watch(in)
	klog.InfoS("Took a shutdown delay inhibitor", "who", in.who, "why", in.why, "pid", in.pid, "uid", in.uid, "inhibitors", n)
	return p[1], nil
}

// watch waits for the lock's release: EOF once the client's every copy of
// the write end is closed, or an error once Close closes the read end.
// Whatever a client writes into its end is read and ignored.
func (b *Bus) watch(in *inhibitor) {
	defer b.wg.Done()
	var buf [64]byte
	for {
		if _, err := in.r.Read(buf[:]); err != nil {
			break
		}
	}
	in.r.Close()
	b.release(in)
}

func (b *Bus) release(in *inhibitor) {
	b.mu.Lock()
	delete(b.inhibitors, in)
	n := len(b.inhibitors)
	if n == 0 && b.drained != nil && !b.drainedClosed {
		close(b.drained)
		b.drainedClosed = true
	}
	hook := b.afterRelease
	b.mu.Unlock()
	klog.InfoS("Released a shutdown delay inhibitor", "who", in.who, "pid", in.pid, "held", time.Since(in.since).Round(time.Millisecond), "inhibitors", n)
	if hook != nil {
		hook()
	}
}

// label keeps at most maxLabel bytes of a client's who or why, as valid
// UTF-8.
func label(s string) string {
	if len(s) > maxLabel {
		s = s[:maxLabel]
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
