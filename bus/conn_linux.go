package bus

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/bus/internal/wire"
	"github.com/nodeinit/nodeinit/internal/clientlog"
	"github.com/nodeinit/nodeinit/internal/linux"
)

// Limits of one connection.
const (
	// wire.MaxQueued and wire.MaxQueuedBytes bound the replies and
	// signals waiting for a peer. While they are reached the bus reads
	// nothing more from the peer (its calls wait in its socket), so a
	// client that sends many calls before it reads the replies is slowed,
	// not dropped; one that does not read at all is dropped by the
	// writer's timeout.
	// repliesPerCall and maxReplyBytes bound what answering one message
	// adds to the queue: Hello's reply and NameAcquired; an error text is
	// clipped to clientlog.MaxErrorText.
	repliesPerCall = 2
	maxReplyBytes  = 4 << 10
	// maxBroadcasts is what may come on top of a full queue: the one
	// PrepareForShutdown.
	maxBroadcasts = 1
)

// conn is one client connection. A reader goroutine (serve) authenticates
// the peer, then reads and answers its messages; a writer goroutine
// (writeLoop) sends what is queued. Nothing else touches the socket, so no
// caller of the Bus ever waits on a peer.
type conn struct {
	bus      *Bus
	nc       *net.UnixConn
	raw      syscall.RawConn
	id       uint64
	cred     unix.Ucred // the peer, from SO_PEERCRED at accept
	accepted time.Time

	// unixFD: the peer agreed to unix fd passing. Reader goroutine only.
	unixFD bool
	// px is the pass-through to the system bus (passthrough_linux.go).
	px passThrough

	mu    sync.Mutex
	name  string      // the unique name, from Hello on
	rules []matchRule // from AddMatch
	// addsUp are the client's AddMatch calls gone up to the system bus
	// and not answered yet, by serial: a rule the system bus refuses is
	// undone here (refusedUpstream).
	addsUp map[uint32]matchRule
	queue  wire.Outbox
	closed bool

	wake chan struct{} // the queue has something (capacity 1)
	room chan struct{} // the writer took something (capacity 1), for the reader
	// passRoom is room again for what comes from the system bus
	// (capacity 1), for the pass-through's reader.
	passRoom chan struct{}
	done     chan struct{} // closed by close
}

func newConn(b *Bus, nc *net.UnixConn, raw syscall.RawConn, id uint64, cred unix.Ucred, accepted time.Time) *conn {
	return &conn{bus: b, nc: nc, raw: raw, id: id, cred: cred, accepted: accepted,
		wake: make(chan struct{}, 1), room: make(chan struct{}, 1), passRoom: make(chan struct{}, 1), done: make(chan struct{})}
}

// serve runs the connection to its end.
func (c *conn) serve() {
	defer c.bus.wg.Done()
	defer c.bus.forget(c)
	defer c.Close()
	defer c.recovered("reading")
	r := bufio.NewReaderSize(c.clientReader(), 4096)
	// The handshake and Hello, within helloTimeout of the accept.
	if err := c.nc.SetDeadline(c.accepted.Add(c.bus.tun.helloTimeout)); err != nil {
		c.ended("authentication", err)
		return
	}
	if err := c.authenticate(r); err != nil {
		c.ended("authentication", err)
		return
	}
	klog.V(1).InfoS("D-Bus client connected", "pid", c.cred.Pid, "uid", c.cred.Uid, "unixFD", c.unixFD)
	c.bus.wg.Add(1)
	go c.writeLoop()
	for {
		if !c.waitRoom() {
			return
		}
		if err := c.setReadDeadline(); err != nil {
			c.ended("reading", err)
			return
		}
		raw, err := wire.ReadMessage(r)
		if err == nil {
			var m *dbus.Message
			if m, err = wire.Decode(raw); err == nil {
				err = c.handle(m, raw)
			}
		}
		if err != nil {
			c.ended("reading", err)
			return
		}
	}
}

// setReadDeadline bounds the wait for the next message: until Hello, the
// deadline set at accept; after it, idleTimeout for a connection without a
// match rule; none for one that waits for a signal.
func (c *conn) setReadDeadline() error {
	c.mu.Lock()
	hello, waiting := c.name != "", len(c.rules) > 0
	c.mu.Unlock()
	switch {
	case !hello:
		return nil
	case waiting:
		return c.nc.SetReadDeadline(time.Time{})
	default:
		return c.nc.SetReadDeadline(c.bus.tun.now().Add(c.bus.tun.idleTimeout))
	}
}

// waitRoom waits until the queue can take the answers to one more message,
// or the connection closes (false). Meanwhile nothing is read from the
// peer: that is the backpressure on a client that pipelines its calls.
func (c *conn) waitRoom() bool {
	for {
		c.mu.Lock()
		closed := c.closed
		room := c.queue.Fits(repliesPerCall, repliesPerCall*maxReplyBytes, wire.MaxQueued, wire.MaxQueuedBytes)
		c.mu.Unlock()
		if closed {
			return false
		}
		if room {
			return true
		}
		select {
		case <-c.room:
		case <-c.done:
			return false
		}
	}
}

// recovered, deferred in each goroutine of a connection, turns a panic
// into the end of that connection: a bug, logged with its stack, that
// must not end PID 1.
func (c *conn) recovered(during string) {
	if p := recover(); p != nil {
		c.Close()
		c.bus.log.Error(fmt.Errorf("panic: %v", p), "A D-Bus connection failed; closed it", "pid", c.cred.Pid, "during", during, "stack", string(debug.Stack()))
	}
}

// authenticate runs the handshake, within the deadline serve set, writing
// its replies directly: the writer goroutine starts after it, and sets a
// deadline of its own on each write.
func (c *conn) authenticate(r *bufio.Reader) error {
	a := &auth{uid: c.cred.Uid, guid: c.bus.guid}
	err := a.run(r, func(line []byte) error { return linux.SendAll(c.raw, line, nil) })
	if err != nil {
		return err
	}
	c.unixFD = a.unixFD
	return c.nc.SetWriteDeadline(time.Time{})
}

// ended logs why a connection ends: quietly for a peer that hung up or a
// bus that closes, loudly for a peer that broke the protocol.
func (c *conn) ended(during string, err error) {
	c.mu.Lock()
	closed, name := c.closed, c.name
	c.mu.Unlock()
	kv := []any{"pid", c.cred.Pid, "name", name, "during", during}
	switch {
	case closed || errors.Is(err, net.ErrClosed):
		klog.V(1).InfoS("D-Bus connection closed", kv...)
	case errors.Is(err, io.EOF) || errors.Is(err, unix.ECONNRESET):
		klog.V(1).InfoS("D-Bus client disconnected", kv...)
	case errors.Is(err, os.ErrDeadlineExceeded) && name == "":
		c.bus.log.Info("Dropped a D-Bus connection that did not say Hello in time", append(kv, "timeout", c.bus.tun.helloTimeout)...)
	case errors.Is(err, os.ErrDeadlineExceeded) && during == "reading":
		klog.V(1).InfoS("Dropped an idle D-Bus connection", append(kv, "timeout", c.bus.tun.idleTimeout)...)
	default:
		// The error may quote what the client sent.
		c.bus.log.Info("Dropped a D-Bus connection", append(kv, "err", clientlog.ClipTo(err.Error(), clientlog.MaxErrorText))...)
	}
}

// send encodes m and queues it for the writer. fds are the bus's own
// descriptors that m's body names; send owns them from here on.
func (c *conn) send(m *dbus.Message, fds ...int) {
	data, sendFDs, err := wire.Encode(m, c.bus.nextSerial())
	if err != nil {
		// Only this package builds outgoing messages: a failure is a bug,
		// and a client waiting for a reply must not wait forever.
		wire.CloseFDs(fds)
		c.bus.log.Error(err, "Could not encode a D-Bus message; dropping the connection", "pid", c.cred.Pid, "message", clientlog.ClipTo(m.String(), clientlog.MaxErrorText))
		c.Close()
		return
	}
	c.enqueue(wire.Outgoing{Data: data, FDs: sendFDs})
}

// enqueue hands o to the writer. It never blocks: the reader leaves room
// for its replies before it reads a call (waitRoom), so only a broadcast
// can find the queue full, and the connection is dropped then, as its
// writer would drop it soon for not reading.
func (c *conn) enqueue(o wire.Outgoing) bool {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		wire.CloseFDs(o.FDs)
		return false
	}
	if !c.queue.Fits(1, len(o.Data), wire.MaxQueued+maxBroadcasts, wire.MaxQueuedBytes+maxReplyBytes) {
		n, size, name := len(c.queue.Msgs), c.queue.Bytes, c.name
		c.mu.Unlock()
		wire.CloseFDs(o.FDs)
		c.bus.log.Info("Dropped a D-Bus connection that does not read its messages", "pid", c.cred.Pid, "name", name, "queued", n, "bytes", size)
		c.Close()
		return false
	}
	c.queue.Push(o)
	c.mu.Unlock()
	wire.Notify(c.wake)
	return true
}

// writeLoop sends queued messages in order until the connection closes or
// a write fails.
func (c *conn) writeLoop() {
	defer c.bus.wg.Done()
	defer c.recovered("writing")
	deadline := func() time.Time { return c.bus.tun.now().Add(c.bus.tun.writeTimeout) }
	if err := wire.Send(c.nc, c.raw, c.wake, c.done, c.pop, deadline); err != nil {
		c.ended("writing", err)
		c.Close()
	}
}

func (c *conn) pop() (wire.Outgoing, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return wire.Outgoing{}, false
	}
	o, ok := c.queue.Pop()
	if !ok {
		return wire.Outgoing{}, false
	}
	wire.Notify(c.room)
	wire.Notify(c.passRoom)
	return o, true
}

// passedRoom is what the queue keeps for the bus's own messages while
// messages from the system bus wait in it: the replies to one call of the
// client's and one broadcast. So the system bus can never fill the queue
// that the client's own calls need (waitRoom), and a message from it is
// never a reason to drop the client.
const passedRoom = repliesPerCall + maxBroadcasts

// fitsPassed reports whether a message of size bytes from the system bus
// fits in the queue q beside passedRoom.
func fitsPassed(q *wire.Outbox, size int) bool {
	return q.Fits(1+passedRoom, size+passedRoom*maxReplyBytes, wire.MaxQueued, wire.MaxQueuedBytes)
}

// Pass queues a message from the system bus when the queue has room for
// it beside what it keeps for the bus's own (fitsPassed). Without room, a
// message that may wait (a reply the client is waiting for) waits until
// the writer makes room, the connection closes or stop closes; another is
// dropped. It reports whether o was queued; o's fds are Pass's.
func (c *conn) Pass(o wire.Outgoing, wait bool, stop <-chan struct{}) bool {
	c.refusedUpstream(o.Data)
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			wire.CloseFDs(o.FDs)
			return false
		}
		if fitsPassed(&c.queue, len(o.Data)) {
			c.queue.Push(o)
			c.mu.Unlock()
			wire.Notify(c.wake)
			return true
		}
		c.mu.Unlock()
		if !wait {
			wire.CloseFDs(o.FDs)
			return false
		}
		select {
		case <-c.passRoom:
		case <-c.done:
		case <-stop:
			wire.CloseFDs(o.FDs)
			return false
		}
	}
}

// Close ends the connection: both goroutines return, and the fds of
// messages never sent are closed. It may be called any number of times,
// from any goroutine.
func (c *conn) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	q := c.queue.Take()
	c.mu.Unlock()
	wire.Drop(q)
	close(c.done)
	_ = c.nc.Close()
	c.closePassThrough()
}

// Wants reports whether the connection has said Hello and has a match rule
// for the broadcast m from senders (matchRule.matches).
func (c *conn) Wants(m *dbus.Message, senders []string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.name == "" || c.closed {
		return false
	}
	for _, r := range c.rules {
		if r.matches(m, senders) {
			return true
		}
	}
	return false
}
