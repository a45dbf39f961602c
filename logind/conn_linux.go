package logind

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/internal/linux"
)

// Limits of one connection.
const (
	// writeTimeout bounds each write to a peer. A peer that has not read
	// for this long while its socket buffer is full is dropped.
	writeTimeout = 10 * time.Second
	// maxQueued and maxQueuedBytes bound what waits for a peer that does
	// not read: beyond either, the connection is dropped.
	maxQueued      = 64
	maxQueuedBytes = 256 << 10
)

// handshakeTimeout bounds the authentication exchange, from accept to
// BEGIN: a local exchange of four lines. A variable for the tests.
var handshakeTimeout = 10 * time.Second

// outgoing is one encoded message waiting for the writer; fds go with it as
// SCM_RIGHTS and are the bus's own, closed once sent or dropped.
type outgoing struct {
	data []byte
	fds  []int
}

// conn is one client connection. A reader goroutine (serve) authenticates
// the peer, then reads and answers its messages; a writer goroutine
// (writeLoop) sends what is queued. Nothing else touches the socket, so no
// caller of the Bus ever waits on a peer.
type conn struct {
	bus  *Bus
	nc   *net.UnixConn
	raw  syscall.RawConn
	id   uint64
	cred unix.Ucred // set by serve before anything else reads it

	// unixFD: the peer agreed to unix fd passing. Reader goroutine only.
	unixFD bool
	// px is the pass-through to the system bus (upstream_linux.go).
	px passThrough

	mu     sync.Mutex
	name   string      // the unique name, from Hello on
	rules  []matchRule // from AddMatch
	queue  []outgoing
	queued int // bytes in queue
	closed bool

	wake chan struct{} // the queue has something (capacity 1)
	done chan struct{} // closed by close
}

func newConn(b *Bus, nc *net.UnixConn, id uint64) (*conn, error) {
	raw, err := nc.SyscallConn()
	if err != nil {
		return nil, err
	}
	return &conn{bus: b, nc: nc, raw: raw, id: id, wake: make(chan struct{}, 1), done: make(chan struct{})}, nil
}

// serve runs the connection to its end.
func (c *conn) serve() {
	defer c.bus.wg.Done()
	defer c.bus.forget(c)
	defer c.close()
	cred, err := peerCred(c.raw)
	if err != nil {
		klog.ErrorS(err, "Could not read a D-Bus peer's credentials; closing its connection", "socket", c.bus.path)
		return
	}
	c.cred = cred
	if !c.bus.opts.Allow(cred) {
		klog.InfoS("Refused a D-Bus connection from a process that may not use this bus", "socket", c.bus.path, "pid", cred.Pid, "uid", cred.Uid, "gid", cred.Gid)
		return
	}
	r := bufio.NewReaderSize(c.clientReader(), 4096)
	if err := c.authenticate(r); err != nil {
		c.ended("authentication", err)
		return
	}
	klog.V(1).InfoS("D-Bus client connected", "pid", cred.Pid, "uid", cred.Uid, "unixFD", c.unixFD)
	c.bus.wg.Add(1)
	go c.writeLoop()
	for {
		raw, err := readMessage(r)
		if err == nil {
			var m *dbus.Message
			if m, err = decodeMessage(raw); err == nil {
				err = c.handle(m)
			}
		}
		if err != nil {
			c.ended("reading", err)
			return
		}
	}
}

// authenticate runs the handshake within handshakeTimeout, writing its
// replies directly: the writer goroutine starts after it.
func (c *conn) authenticate(r *bufio.Reader) error {
	deadline := time.Now().Add(handshakeTimeout)
	if err := c.nc.SetDeadline(deadline); err != nil {
		return err
	}
	a := &auth{uid: c.cred.Uid, guid: c.bus.guid}
	err := a.run(r, func(line []byte) error { return sendAll(c.raw, line, nil) })
	if err != nil {
		return err
	}
	c.unixFD = a.unixFD
	return c.nc.SetDeadline(time.Time{})
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
	default:
		klog.InfoS("Dropped a D-Bus connection", append(kv, "err", err)...)
	}
}

// send encodes m and queues it for the writer. fds are the bus's own
// descriptors that m's body names; send owns them from here on.
func (c *conn) send(m *dbus.Message, fds ...int) {
	data, sendFDs, err := encodeMessage(m, c.bus.nextSerial())
	if err != nil {
		// Only this package builds outgoing messages: a failure is a bug,
		// and a client waiting for a reply must not wait forever.
		closeFDs(fds)
		klog.ErrorS(err, "Could not encode a D-Bus message; dropping the connection", "pid", c.cred.Pid, "message", m.String())
		c.close()
		return
	}
	c.enqueue(outgoing{data: data, fds: sendFDs})
}

// enqueue hands o to the writer, or drops the connection when its queue is
// full. It never blocks.
func (c *conn) enqueue(o outgoing) bool {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		closeFDs(o.fds)
		return false
	}
	if len(c.queue) >= maxQueued || c.queued+len(o.data) > maxQueuedBytes {
		n, size, name := len(c.queue), c.queued, c.name
		c.mu.Unlock()
		closeFDs(o.fds)
		klog.InfoS("Dropped a D-Bus connection that does not read its messages", "pid", c.cred.Pid, "name", name, "queued", n, "bytes", size)
		c.close()
		return false
	}
	c.queue = append(c.queue, o)
	c.queued += len(o.data)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return true
}

// writeLoop sends queued messages in order until the connection closes or
// a write fails.
func (c *conn) writeLoop() {
	defer c.bus.wg.Done()
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		for {
			o, ok := c.pop()
			if !ok {
				break
			}
			err := c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
			if err == nil {
				err = sendAll(c.raw, o.data, o.fds)
			}
			closeFDs(o.fds)
			if err != nil {
				c.ended("writing", err)
				c.close()
				return
			}
		}
	}
}

func (c *conn) pop() (outgoing, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) == 0 || c.closed {
		return outgoing{}, false
	}
	o := c.queue[0]
	c.queue[0] = outgoing{}
	c.queue = c.queue[1:]
	c.queued -= len(o.data)
	return o, true
}

// close ends the connection: both goroutines return, and the fds of
// messages never sent are closed. It may be called any number of times,
// from any goroutine.
func (c *conn) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	q := c.queue
	c.queue, c.queued = nil, 0
	c.mu.Unlock()
	for _, o := range q {
		closeFDs(o.fds)
	}
	close(c.done)
	_ = c.nc.Close()
	c.closePassThrough()
}

// wants reports whether the connection has said Hello and has a match rule
// for the broadcast m from sender.
func (c *conn) wants(m *dbus.Message, sender string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.name == "" || c.closed {
		return false
	}
	for _, r := range c.rules {
		if r.matches(m, sender) {
			return true
		}
	}
	return false
}

// sendAll writes p, with fds as SCM_RIGHTS on its first byte, through the
// socket's raw descriptor: sendmsg with MSG_NOSIGNAL, so that a peer that
// went away makes the write fail with EPIPE and never raises SIGPIPE in
// nodeinit. The write waits for the socket in Go's poller, within the
// connection's write deadline.
func sendAll(rc syscall.RawConn, p []byte, fds []int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	for len(p) > 0 {
		var n int
		var serr error
		err := rc.Write(func(fd uintptr) bool {
			n, serr = linux.SendmsgN(int(fd), p, oob, nil, unix.MSG_NOSIGNAL|unix.MSG_DONTWAIT)
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

// peerCred is the peer's pid, uid and gid as the kernel recorded them when
// it connected (SO_PEERCRED): what it claims later cannot change them.
func peerCred(rc syscall.RawConn) (unix.Ucred, error) {
	var cred *unix.Ucred
	var gerr error
	err := rc.Control(func(fd uintptr) {
		cred, gerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err != nil {
		return unix.Ucred{}, err
	}
	if gerr != nil {
		return unix.Ucred{}, fmt.Errorf("SO_PEERCRED: %w", gerr)
	}
	return *cred, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}
