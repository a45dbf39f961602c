package upstream

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"
	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/bus/internal/wire"
	"github.com/nodeinit/nodeinit/bus/service"
	"github.com/nodeinit/nodeinit/internal/clientlog"
)

// Limits of the pass-through.
const (
	// dialTimeout bounds opening the connection: the dial, the handshake and
	// Hello, while the client's call waits.
	dialTimeout = 5 * time.Second
	// maxPending bounds the client's calls that wait for the upstream's
	// reply.
	maxPending = 256
)

// Kind is the kind of reply a call that went up waits for.
type Kind int

const (
	// Plain replies go down as they come.
	Plain Kind = iota
	// ListNames replies get the bus's services' names added.
	ListNames
)

// Client is the bus's connection of one client, as its pass-through sees
// it.
type Client interface {
	// Name is the client's unique name on the bus.
	Name() string
	// Pid is the client's process, for the log.
	Pid() int32
	// Pass queues a message from the system bus for the client when the
	// client's queue has room for it beside what it keeps for the bus's
	// own messages; wait says whether it may wait (until stop closes) for
	// that room. It reports whether o was queued; o's fds are Pass's.
	Pass(o wire.Outgoing, wait bool, stop <-chan struct{}) bool
	// Wants reports whether a match rule of the client's asks for the
	// signal m, from a sender of one of the names senders.
	Wants(m *dbus.Message, senders []string) bool
	// Ended tells the bus that the pass-through has ended, and reports
	// whether the client's connection is closing anyway.
	Ended() (closing bool)
	// Close closes the client's connection.
	Close()
}

// Host is the bus, as a pass-through sees it.
type Host interface {
	// LocalName reports whether a name is one only the bus has (its
	// unique names, its services' own names): the system bus's
	// NameOwnerChanged about it is dropped.
	LocalName(name string) bool
	// LocalSignal reports whether a signal of interface iface from path
	// can only be one of the bus's services': one from the system bus is
	// dropped (a logind of the host must not tell the kubelet to shut
	// down).
	LocalSignal(iface, path string) bool
	// ServiceNames are the bus's services' names, for ListNames.
	ServiceNames() []string
	// Serial is the bus's next serial, for a message of its own.
	Serial() uint32
	// Go runs f on one of the bus's goroutines.
	Go(f func())
	// Log bounds what clients make nodeinit log.
	Log() *clientlog.Log
}

// Options are the same for every pass-through of a bus.
type Options struct {
	// Address is the system bus's D-Bus address (Address).
	Address string
	// MaxMessage bounds a message from the system bus that is passed
	// on: a larger one is read and dropped.
	MaxMessage uint64
	// WriteTimeout bounds each write to the system bus.
	WriteTimeout time.Duration
	// Now is the clock.
	Now func() time.Time
	// Hook, when set, is called by the reader for each message it has
	// read ("reading") and by the writer before each write ("writing"):
	// the tests' way into those goroutines.
	Hook func(during string)
}

// Conn is one connection to the system bus, for one client.
type Conn struct {
	link
	c    Client
	h    Host
	opts *Options

	mu      sync.Mutex
	queue   wire.Outbox
	pending map[uint32]Kind // the client's serials waiting for a reply
	closed  bool
	dropped int // messages from the upstream bus not passed on

	wake chan struct{}
	done chan struct{}
}

// Dial connects to the system bus at o.Address for the client c of the
// bus h, authenticates as nodeinit (EXTERNAL, with unix fd passing when
// unixFD, the client has it) and says Hello, within dialTimeout. Start starts
// passing messages.
func Dial(c Client, h Host, o *Options, unixFD bool) (*Conn, error) {
	// What comes down is held within the bounds of what a client sends.
	l, err := dial(o.Address, dialTimeout, unixFD, wire.MaxHeldFDs, wire.MaxHeldFDs)
	if err != nil {
		return nil, err
	}
	return &Conn{link: l, c: c, h: h, opts: o, pending: map[uint32]Kind{}, wake: make(chan struct{}, 1), done: make(chan struct{})}, nil
}

// Start passes messages both ways, on two goroutines of the bus's.
func (u *Conn) Start() {
	u.h.Go(u.readLoop)
	u.h.Go(u.writeLoop)
	klog.V(1).InfoS("Passing a D-Bus client's calls through to the system bus", "pid", u.c.Pid(), "name", u.c.Name(), "upstreamName", u.name)
}

// Send queues data, a client's message with the serial serial, for the
// system bus, with fds (Send's from here on), noting a call that waits for
// a reply of the kind kind. The error is what to answer the client's call
// with instead. A full queue ends the pass-through, as a full client
// queue ends the client.
func (u *Conn) Send(serial uint32, data []byte, fds []int, kind Kind) *service.Error {
	if !u.unixFD && len(fds) > 0 {
		wire.CloseFDs(fds)
		return &service.Error{Name: service.NotSupported, Text: "The system bus this bus passes through to did not agree to unix fd passing"}
	}
	wantsReply := dbus.Type(data[1]) == dbus.TypeMethodCall && dbus.Flags(data[2])&dbus.FlagNoReplyExpected == 0
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		wire.CloseFDs(fds)
		return nil
	}
	if wantsReply && len(u.pending) >= maxPending {
		u.mu.Unlock()
		wire.CloseFDs(fds)
		return &service.Error{Name: service.LimitsExceeded, Text: fmt.Sprintf("%d calls already wait for the system bus's replies", maxPending)}
	}
	if !u.queue.Fits(1, len(data), wire.MaxQueued, wire.MaxQueuedBytes) {
		u.mu.Unlock()
		wire.CloseFDs(fds)
		u.fail(errors.New("it does not take the client's messages"))
		return nil
	}
	if wantsReply {
		u.pending[serial] = kind
	}
	u.queue.Push(wire.Outgoing{Data: data, FDs: fds})
	u.mu.Unlock()
	wire.Notify(u.wake)
	return nil
}

// recovered, deferred in the upstream's reader and writer, turns a panic
// into the end of that pass-through and of the client's connection: a bug,
// logged with its stack, that must not end PID 1.
func (u *Conn) recovered(during string) {
	if p := recover(); p != nil {
		err := fmt.Errorf("panic: %v", p)
		u.fail(err)
		u.h.Log().Error(err, "A D-Bus client's pass-through to the system bus failed; closed its connection",
			"pid", u.c.Pid(), "during", during, "stack", string(debug.Stack()))
	}
}

func (u *Conn) writeLoop() {
	defer u.recovered("writing to the system bus")
	deadline := func() time.Time {
		if u.opts.Hook != nil {
			u.opts.Hook("writing")
		}
		return u.opts.Now().Add(u.opts.WriteTimeout)
	}
	if err := wire.Send(u.nc, u.raw, u.wake, u.done, u.pop, deadline); err != nil {
		u.fail(fmt.Errorf("writing: %w", err))
	}
}

func (u *Conn) pop() (wire.Outgoing, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return wire.Outgoing{}, false
	}
	return u.queue.Pop()
}

// fail ends the pass-through of this client and closes the client's
// connection (unless that is what ended it): the client's library
// connects again, and the new connection gets a new pass-through, where
// this one, its match rules and the names it asked for there are gone.
func (u *Conn) fail(err error) {
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return
	}
	u.closed = true
	pending, dropped := len(u.pending), u.dropped
	u.pending = nil
	q := u.queue.Take()
	u.mu.Unlock()
	close(u.done)
	u.nc.Close()
	u.fds.Close()
	wire.Drop(q)
	c := u.c
	if c.Ended() {
		if dropped > 0 {
			klog.V(1).InfoS("A D-Bus client's pass-through to the system bus ended", "pid", c.Pid(), "name", c.Name(), "dropped", dropped)
		}
		return
	}
	u.h.Log().Info("The pass-through to the system bus ended for a D-Bus client; closed its connection",
		"pid", c.Pid(), "waiting", pending, "dropped", dropped, "err", clientlog.ClipTo(err.Error(), clientlog.MaxErrorText))
	c.Close()
}

// Close ends the connection because the client's has ended.
func (u *Conn) Close() { u.fail(errors.New("the client's connection closed")) }
