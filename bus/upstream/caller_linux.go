package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/bus/internal/wire"
	"github.com/nodeinit/nodeinit/internal/clientlog"
	"github.com/nodeinit/nodeinit/internal/linux"
)

// Limits of a Caller.
const (
	// maxCallerMessage bounds a message a Caller reads whole; a larger one
	// is read through the reader's buffer and dropped, its descriptors
	// closed (a reply to a call answers it with an error).
	maxCallerMessage = wire.MaxMessage
	// maxCallerSignals is the queue of signals Signals hands over; one
	// that finds it full is dropped.
	maxCallerSignals = 16
	// scmMaxFD is the most descriptors the kernel passes with one write
	// (SCM_MAX_FD): a Caller's control buffer holds that many, so that the
	// kernel never truncates what a sender attaches, and the count a
	// message claims always finds its descriptors.
	scmMaxFD = 253
)

// Caller is a connection of nodeinit's own to a system bus (the host's,
// for package hostlogind): it calls methods and follows the signals it
// is given a filter for, on one reader goroutine.
//
// Anyone on that bus may send it a signal, with descriptors (the stock
// policy allows any signal to any unique name), so the Caller owns every
// descriptor that comes, and keeps none it was not asked for: those of a
// reply are the caller's of Call (Reply.TakeFD), or closed when nobody
// waits for that reply any more (it came after its call's timeout, or
// answers no call); those of signals, method calls and anything else are
// closed as the message is read. What a sender costs it is bounded: a
// message of at most 64 KiB is read whole (a larger one through a 4 KiB
// buffer), signals the filter does not take are neither decoded nor
// logged, only counted (Dropped), and those it takes wait in a queue of
// 16, the rest dropped.
type Caller struct {
	link
	timeout time.Duration
	want    func(sender, path, iface, member string) bool
	signals chan *dbus.Message
	done    chan struct{}

	writeMu sync.Mutex

	mu      sync.Mutex
	serial  uint32
	pending map[uint32]chan answer // calls waiting for their reply
	dropped int
	closed  bool
	err     error
}

// answer is a reply or error as the reader hands it to its call.
type answer struct {
	f   *frame
	fds []int
}

// DialCaller connects to the bus at address as this process (EXTERNAL,
// with unix fd passing, which it requires) and says Hello, within timeout,
// which also bounds each write. Signals that want takes (by sender, path,
// interface and member, before anything else of them is read) are handed
// over by Signals.
func DialCaller(address string, timeout time.Duration, want func(sender, path, iface, member string) bool) (*Caller, error) {
	// Room for all a sender can attach to one write; more than two
	// writes' worth held unclaimed breaks the protocol. A bus passes on
	// at most its max_message_unix_fds (16 by default), and the reader
	// claims each message's as it reads it, so few are ever held.
	l, err := dial(address, timeout, true, scmMaxFD, 2*scmMaxFD)
	if err == nil && !l.unixFD {
		l.nc.Close()
		l.fds.Close()
		err = errors.New("the bus does not pass file descriptors")
	}
	if err != nil {
		return nil, err
	}
	c := &Caller{link: l, timeout: timeout, want: want, signals: make(chan *dbus.Message, maxCallerSignals),
		done: make(chan struct{}), serial: 1, pending: map[uint32]chan answer{}}
	go c.readLoop()
	return c, nil
}

// Signals hands over the signals the filter took, decoded.
func (c *Caller) Signals() <-chan *dbus.Message { return c.signals }

// Done is closed when the connection has ended; Err says why.
func (c *Caller) Done() <-chan struct{} { return c.done }

// Err is why the connection ended, nil while it is open.
func (c *Caller) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Dropped counts the messages read and not handed over: signals the
// filter did not take or that found the queue full, method calls, replies
// to no call waiting, messages over the size bound.
func (c *Caller) Dropped() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropped
}

// Close ends the connection and closes every descriptor it holds.
func (c *Caller) Close() { c.end(errors.New("closed")) }

// Reply is the body of a method return and the descriptors that came with
// it, which are the receiver's until TakeFD hands one over or Close
// closes them.
type Reply struct {
	Body []any
	fds  []int
}

// Store stores the body's values into v, as dbus.Store does.
func (r *Reply) Store(v ...any) error { return dbus.Store(r.Body, v...) }

// TakeFD hands over the descriptor that the 'h' argument i names: the
// caller owns it, and Close leaves it open.
func (r *Reply) TakeFD(i int) (int, error) {
	if i >= len(r.Body) {
		return -1, fmt.Errorf("the reply has %d values, no %d", len(r.Body), i+1)
	}
	idx, ok := r.Body[i].(dbus.UnixFDIndex)
	if !ok {
		return -1, fmt.Errorf("the reply's value %d is a %T, not a descriptor", i+1, r.Body[i])
	}
	if int(idx) >= len(r.fds) || r.fds[idx] < 0 {
		return -1, fmt.Errorf("the reply names descriptor %d of the %d that came", idx, len(r.fds))
	}
	fd := r.fds[idx]
	r.fds[idx] = -1
	return fd, nil
}

// Close closes the descriptors of the reply that were not taken.
func (r *Reply) Close() {
	for i, fd := range r.fds {
		if fd >= 0 {
			_ = unix.Close(fd)
			r.fds[i] = -1
		}
	}
}

// Call calls member of iface on the object path of dest with args, and
// waits for its reply until ctx ends. An error reply is a *CallError.
// The reply's descriptors are the caller's (Reply.Close); when ctx ends
// first, those of a reply that comes later are closed as it comes.
func (c *Caller) Call(ctx context.Context, dest string, path dbus.ObjectPath, iface, member string, args ...any) (*Reply, error) {
	m := wire.WithBody(&dbus.Message{Type: dbus.TypeMethodCall, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldDestination: dbus.MakeVariant(dest),
		dbus.FieldPath:        dbus.MakeVariant(path),
		dbus.FieldInterface:   dbus.MakeVariant(iface),
		dbus.FieldMember:      dbus.MakeVariant(member),
	}}, args...)
	ch := make(chan answer, 1)
	c.mu.Lock()
	if c.closed {
		err := c.err
		c.mu.Unlock()
		return nil, fmt.Errorf("the connection ended: %w", err)
	}
	if len(c.pending) >= maxPending {
		c.mu.Unlock()
		return nil, fmt.Errorf("%d calls already wait for their replies", maxPending)
	}
	c.serial++
	serial := c.serial
	c.pending[serial] = ch
	c.mu.Unlock()
	// Whatever ends the wait, the call stops waiting under the lock the
	// reader hands replies over under: a reply the reader has handed over
	// is in ch, and one that comes later answers nothing and is closed.
	defer func() {
		c.mu.Lock()
		delete(c.pending, serial)
		c.mu.Unlock()
		select {
		case a := <-ch:
			wire.CloseFDs(a.fds)
		default:
		}
	}()
	data, fds, err := wire.Encode(m, serial)
	if err != nil {
		return nil, err
	}
	if len(fds) > 0 {
		return nil, errors.New("a Caller sends no descriptors")
	}
	if err := c.write(ctx, data); err != nil {
		c.end(fmt.Errorf("writing: %w", err))
		return nil, err
	}
	select {
	case a := <-ch:
		return c.answer(a)
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.done:
		return nil, fmt.Errorf("the connection ended: %w", c.Err())
	}
}

// CallError is an error reply: its name and its text, clipped (the text
// is the answering peer's and may quote anything).
type CallError struct {
	Name string
	Text string
}

func (e *CallError) Error() string {
	return clientlog.Clip(e.Name) + ": " + clientlog.ClipTo(e.Text, clientlog.MaxErrorText)
}

// answer turns the reply a into Call's results.
func (c *Caller) answer(a answer) (*Reply, error) {
	f := a.f
	if f.raw == nil {
		wire.CloseFDs(a.fds)
		return nil, fmt.Errorf("a reply of %d bytes, more than the %d read", f.size, maxCallerMessage)
	}
	m, err := f.decode()
	if err != nil {
		wire.CloseFDs(a.fds)
		return nil, err
	}
	if f.typ == dbus.TypeError {
		wire.CloseFDs(a.fds)
		text := ""
		if len(m.Body) > 0 {
			text, _ = m.Body[0].(string)
		}
		return nil, &CallError{Name: f.header(dbus.FieldErrorName), Text: text}
	}
	return &Reply{Body: m.Body, fds: a.fds}, nil
}

// write sends one message within the Caller's timeout, or ctx's deadline
// when that is sooner.
func (c *Caller) write(ctx context.Context, data []byte) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	deadline := time.Now().Add(c.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := c.nc.SetWriteDeadline(deadline); err != nil {
		return err
	}
	return linux.SendAll(c.raw, data, nil)
}

// readLoop reads every message, hands over replies and the signals the
// filter takes, and closes the descriptors of the rest. A panic ends the
// connection, never the process.
func (c *Caller) readLoop() {
	defer func() {
		if p := recover(); p != nil {
			err := fmt.Errorf("panic: %v", p)
			klog.ErrorS(err, "Reading from the system bus failed; closed the connection", "stack", string(debug.Stack()))
			c.end(err)
		}
	}()
	for {
		f, err := readFrame(c.r, maxCallerMessage)
		var fds []int
		if err == nil {
			fds, err = c.fds.TakeN(f.uint32Field(dbus.FieldUnixFDs))
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the bus closed the connection")
			}
			c.end(fmt.Errorf("reading: %w", err))
			return
		}
		c.deliver(f, fds)
	}
}

// deliver hands the reply f to the call that waits for it, or the signal
// f to Signals when the filter takes it; it closes every other
// descriptor.
func (c *Caller) deliver(f *frame, fds []int) {
	switch f.typ {
	case dbus.TypeMethodReply, dbus.TypeError:
		serial := f.uint32Field(dbus.FieldReplySerial)
		c.mu.Lock()
		ch, ok := c.pending[serial]
		delete(c.pending, serial)
		if ok {
			ch <- answer{f: f, fds: fds} // its one reply, in a channel of 1
		} else {
			c.dropped++
		}
		c.mu.Unlock()
		if !ok {
			wire.CloseFDs(fds)
		}
		return
	case dbus.TypeSignal:
		// No signal this connection follows carries descriptors.
		wire.CloseFDs(fds)
		if f.raw != nil && c.want != nil && c.want(f.header(dbus.FieldSender), f.header(dbus.FieldPath), f.header(dbus.FieldInterface), f.header(dbus.FieldMember)) {
			if m, err := f.decode(); err == nil {
				select {
				case c.signals <- m:
					return
				default:
				}
			}
		}
	default:
		// A method call: this connection serves nothing.
		wire.CloseFDs(fds)
	}
	c.mu.Lock()
	c.dropped++
	c.mu.Unlock()
}

// end closes the connection once, for err, and every descriptor held.
func (c *Caller) end(err error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed, c.err = true, err
	c.mu.Unlock()
	c.nc.Close()
	c.fds.Close()
	close(c.done)
}
