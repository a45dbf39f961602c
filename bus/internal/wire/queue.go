package wire

import "golang.org/x/sys/unix"

// Limits of a queue of messages for one peer.
const (
	MaxQueued      = 64
	MaxQueuedBytes = 256 << 10
)

// Outgoing is one encoded message waiting for the writer; fds go with it as
// SCM_RIGHTS and are the bus's own, closed once sent or dropped.
type Outgoing struct {
	Data []byte
	FDs  []int
}

// Outbox is the messages waiting for a writer, in order, and their bytes.
// Its owner's mutex guards it.
type Outbox struct {
	Msgs  []Outgoing
	Bytes int
}

// Fits reports whether n more messages of size bytes in all stay within
// at most msgs messages and bytes bytes.
func (q *Outbox) Fits(n, size, msgs, bytes int) bool {
	return len(q.Msgs)+n <= msgs && q.Bytes+size <= bytes
}

func (q *Outbox) Push(o Outgoing) {
	q.Msgs = append(q.Msgs, o)
	q.Bytes += len(o.Data)
}

func (q *Outbox) Pop() (Outgoing, bool) {
	if len(q.Msgs) == 0 {
		return Outgoing{}, false
	}
	o := q.Msgs[0]
	q.Msgs[0] = Outgoing{}
	q.Msgs = q.Msgs[1:]
	q.Bytes -= len(o.Data)
	return o, true
}

// take empties the Outbox and returns what was in it, for the caller to
// drop once it has let go of the owner's lock.
func (q *Outbox) Take() []Outgoing {
	msgs := q.Msgs
	q.Msgs, q.Bytes = nil, 0
	return msgs
}

// Drop closes the descriptors of messages that will never be sent.
func Drop(msgs []Outgoing) {
	for _, o := range msgs {
		CloseFDs(o.FDs)
	}
}

// Notify wakes the one goroutine that waits on ch (of capacity 1), now or
// when it next waits.
func Notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// CloseFDs closes descriptors that are no longer wanted.
func CloseFDs(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}
