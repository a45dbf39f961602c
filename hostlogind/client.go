package hostlogind

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// logind's names on the host's bus, and what nodeinit asks of it.
const (
	logindName   = "org.freedesktop.login1"
	logindPath   = dbus.ObjectPath("/org/freedesktop/login1")
	managerIface = "org.freedesktop.login1.Manager"
	prepare      = managerIface + ".PrepareForShutdown"
	busName      = "org.freedesktop.DBus"
	ownerChanged = busName + ".NameOwnerChanged"

	Who  = "nodeinit"
	Why  = "drain the node's pods"
	what = "shutdown"
	mode = "delay"
)

// Defaults of Options.
const (
	DefaultTimeout = 5 * time.Second
	firstRetry     = time.Second
	maxRetry       = 30 * time.Second
)

// Options configure the client.
type Options struct {
	// Address is the host's system bus (a D-Bus address).
	Address string
	// Timeout bounds the connect (with its handshake and Hello) and each
	// call; 0 is DefaultTimeout.
	Timeout time.Duration
	// NodeDelay, when set, is the node's own delay (the logind nodeinit
	// serves the kubelet), logged beside the host's when a lock is taken.
	NodeDelay func() time.Duration
}

// Client holds a shutdown delay lock on the host's logind for the node.
// Its methods may be called from any goroutine and return at once.
type Client struct {
	opts     Options
	shutdown chan bool
	ctx      context.Context
	cancel   context.CancelFunc
	done     chan struct{}
	owner    atomic.Pointer[string] // logind's unique name, "" unknown

	mu        sync.Mutex
	lock      int // the lock held now, -1 none
	draining  int // the lock held when PrepareForShutdown(true) came, until Release
	delay     time.Duration
	preparing bool // PrepareForShutdown(true) came, and no false since
	closed    bool
	failed    bool // a failure was logged at Info; the next ones at V(2)
}

// Start connects to the host's logind and takes the lock, in a goroutine
// of its own; it returns at once.
func Start(opts Options) *Client {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{opts: opts, shutdown: make(chan bool, 4), ctx: ctx, cancel: cancel, done: make(chan struct{}),
		lock: -1, draining: -1}
	empty := ""
	c.owner.Store(&empty)
	go c.run()
	return c
}

// Shutdown delivers the host's PrepareForShutdown: true when the host
// begins to shut down, false when that shutdown is cancelled.
func (c *Client) Shutdown() <-chan bool { return c.shutdown }

// Delay is the host's InhibitDelayMaxUSec as read when the lock was last
// taken: the longest the host's shutdown waits for the node. 0: unknown.
func (c *Client) Delay() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.delay
}

// Held says whether a lock is held on the host's logind now.
func (c *Client) Held() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lock >= 0 || c.draining >= 0
}

// Release lets the host's shutdown go on: it closes the lock that was held
// when PrepareForShutdown(true) came. It does nothing when there is none.
func (c *Client) Release() {
	if c.closeLock(&c.draining) {
		klog.InfoS("Released the shutdown delay lock on the host's logind: the host's shutdown goes on")
	}
}

// Close ends the connection and closes every lock; it waits at most a
// second for the goroutine.
func (c *Client) Close() {
	c.mu.Lock()
	c.closed = true
	fds := []int{c.lock, c.draining}
	c.lock, c.draining = -1, -1
	c.mu.Unlock()
	c.cancel()
	for _, fd := range fds {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
	}
	select {
	case <-c.done:
	case <-time.After(time.Second):
	}
}

// run keeps a connection to the host's bus, again and again while it
// fails, until Close.
func (c *Client) run() {
	defer close(c.done)
	wait := firstRetry
	for {
		began := time.Now()
		err := c.session()
		c.dropLock()
		if c.ctx.Err() != nil {
			return
		}
		if time.Since(began) > maxRetry {
			wait = firstRetry
		}
		c.fail(err, wait)
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, maxRetry)
	}
}

// fail logs why the host's shutdown cannot drain the node now: the first
// time at Info, then at V(2).
func (c *Client) fail(err error, retry time.Duration) {
	c.mu.Lock()
	first := !c.failed
	c.failed = true
	c.mu.Unlock()
	msg := "No shutdown delay lock on the host's logind: the host's shutdown will not drain the node until nodeinit holds one"
	kv := []any{"reason", err}
	if retry > 0 {
		kv = append(kv, "retry", retry)
	}
	if first {
		klog.InfoS(msg, kv...)
	} else {
		klog.V(2).InfoS(msg, kv...)
	}
}

// dropLock closes the lock held when a connection ends: with no
// connection, nobody would hear the shutdown it delays. A lock held for a
// shutdown under way waits for Release.
func (c *Client) dropLock() {
	c.closeLock(&c.lock)
	empty := ""
	c.owner.Store(&empty)
}

// closeLock takes the lock held (c.lock or c.draining) out of c under its
// mutex, and closes it; it says whether one was held.
func (c *Client) closeLock(held *int) bool {
	c.mu.Lock()
	fd := *held
	*held = -1
	c.mu.Unlock()
	if fd < 0 {
		return false
	}
	_ = unix.Close(fd)
	return true
}

// signalQueue takes godbus's signals without ever blocking its reader:
// only logind's PrepareForShutdown from its owner and the bus's
// NameOwnerChanged, the rest dropped, and those too when the queue is full.
type signalQueue struct {
	ch    chan *dbus.Signal
	owner *atomic.Pointer[string]
}

func (q signalQueue) DeliverSignal(_, _ string, s *dbus.Signal) {
	switch {
	case s.Name == prepare && s.Path == logindPath && s.Sender != "" && s.Sender == *q.owner.Load():
	case s.Name == ownerChanged && s.Sender == busName:
	default:
		return
	}
	select {
	case q.ch <- s:
	default:
	}
}

// session is one connection to the host's bus: it takes the lock and
// follows logind until the connection ends. A panic ends it.
func (c *Client) session() (err error) {
	defer func() {
		if p := recover(); p != nil {
			klog.ErrorS(fmt.Errorf("panic: %v", p), "Following the host's logind failed; connecting again", "stack", string(debug.Stack()))
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	q := signalQueue{ch: make(chan *dbus.Signal, 16), owner: &c.owner}
	// The handshake and Hello have no context of their own: the timer
	// closes the connection under them.
	timer := time.AfterFunc(c.opts.Timeout, cancel)
	conn, err := dbus.Connect(c.opts.Address, dbus.WithContext(ctx), dbus.WithSignalHandler(q))
	if !timer.Stop() {
		if conn != nil {
			conn.Close()
		}
		return fmt.Errorf("connect to the host's system bus %s: no answer within %v", c.opts.Address, c.opts.Timeout)
	}
	if err != nil {
		return fmt.Errorf("connect to the host's system bus %s: %w", c.opts.Address, err)
	}
	defer conn.Close()
	if !conn.SupportsUnixFDs() {
		return errors.New("the host's system bus does not pass file descriptors")
	}
	// The rules come first: no shutdown and no new owner falls between
	// the lock and the watch.
	if err := c.call(ctx, func(ctx context.Context) error {
		if err := conn.AddMatchSignalContext(ctx, dbus.WithMatchSender(logindName), dbus.WithMatchObjectPath(logindPath),
			dbus.WithMatchInterface(managerIface), dbus.WithMatchMember("PrepareForShutdown")); err != nil {
			return err
		}
		return conn.AddMatchSignalContext(ctx, dbus.WithMatchSender(busName), dbus.WithMatchInterface(busName),
			dbus.WithMatchMember("NameOwnerChanged"), dbus.WithMatchArg(0, logindName))
	}); err != nil {
		return fmt.Errorf("add match rules on the host's system bus: %w", err)
	}
	// A lock that could not be taken from a logind that is there is
	// asked for again, after 1 s, doubling to 30 s.
	var retry <-chan time.Time
	wait := firstRetry
	again := func(err error) {
		retry = nil
		if err == nil {
			wait = firstRetry
			return
		}
		c.fail(err, wait)
		retry = time.After(wait)
		wait = min(2*wait, maxRetry)
	}
	var owner string
	if err := c.call(ctx, func(ctx context.Context) error {
		return conn.BusObject().CallWithContext(ctx, busName+".GetNameOwner", 0, logindName).Store(&owner)
	}); err != nil {
		c.fail(fmt.Errorf("the host's logind: %w", err), 0)
	} else {
		c.owner.Store(&owner)
		again(c.take(ctx, conn, "Took a shutdown delay lock on the host's logind: the host's shutdown drains the node"))
	}
	for {
		select {
		case <-conn.Context().Done():
			return errors.New("the connection to the host's system bus ended")
		case <-retry:
			if *c.owner.Load() != "" {
				again(c.take(ctx, conn, "Took a shutdown delay lock on the host's logind: the host's shutdown drains the node"))
			}
		case s := <-q.ch:
			if took, err := c.handle(ctx, conn, s); took {
				again(err)
			}
		}
	}
}

// handle follows one signal of logind's or about it. took says whether
// it asked for a lock, and err why it has none.
func (c *Client) handle(ctx context.Context, conn *dbus.Conn, s *dbus.Signal) (took bool, err error) {
	if s.Name == ownerChanged {
		var name, old, owner string
		if err := dbus.Store(s.Body, &name, &old, &owner); err != nil || name != logindName {
			return false, nil
		}
		c.owner.Store(&owner)
		if owner == "" {
			klog.InfoS("The host's logind has left the bus; its lock is kept for its return", "was", old)
			return true, nil // nothing to ask again until it is back
		}
		return true, c.take(ctx, conn, "The host's logind has a new owner: took a new shutdown delay lock there")
	}
	var start bool
	if err := dbus.Store(s.Body, &start); err != nil {
		return false, nil
	}
	if start {
		c.mu.Lock()
		c.preparing = true
		if c.draining < 0 {
			c.draining, c.lock = c.lock, -1
		}
		held := c.draining >= 0
		c.mu.Unlock()
		klog.InfoS("The host is shutting down: draining the node", "hostLockHeld", held, "hostDelay", c.Delay())
	} else {
		c.mu.Lock()
		c.preparing = false
		c.mu.Unlock()
		klog.InfoS("The host's shutdown was cancelled")
		// A new lock, then the old one goes, as the kubelet does: the
		// host is never left unlocked between the two.
		took, err = true, c.take(ctx, conn, "Took a new shutdown delay lock on the host's logind after the cancelled shutdown")
		c.mu.Lock()
		old := c.draining
		c.draining = -1
		c.mu.Unlock()
		if old >= 0 {
			_ = unix.Close(old)
		}
	}
	select {
	case c.shutdown <- start:
	case <-ctx.Done():
	}
	return took, err
}

// take reads the host's delay and takes a new lock, then closes the one
// it replaces. Not while the host is shutting down: a new lock would only
// delay it.
func (c *Client) take(ctx context.Context, conn *dbus.Conn, msg string) error {
	c.mu.Lock()
	preparing := c.preparing
	c.mu.Unlock()
	if preparing {
		return nil
	}
	var usec uint64
	var fd dbus.UnixFD = -1
	err := c.call(ctx, func(ctx context.Context) error {
		logind := conn.Object(logindName, logindPath)
		var v dbus.Variant
		if err := logind.CallWithContext(ctx, "org.freedesktop.DBus.Properties.Get", 0, managerIface, "InhibitDelayMaxUSec").Store(&v); err != nil {
			return fmt.Errorf("read InhibitDelayMaxUSec: %w", err)
		}
		if err := v.Store(&usec); err != nil {
			return fmt.Errorf("read InhibitDelayMaxUSec: %w", err)
		}
		if err := logind.CallWithContext(ctx, managerIface+".Inhibit", 0, what, Who, Why, mode).Store(&fd); err != nil {
			return fmt.Errorf("call Inhibit: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("the host's logind: %w", err)
	}
	delay := time.Duration(min(usec, uint64(1<<63-1)/1000)) * time.Microsecond
	c.mu.Lock()
	old := c.lock
	c.lock, c.delay, c.failed = int(fd), delay, false
	closed := c.closed
	if closed {
		c.lock = -1
	}
	c.mu.Unlock()
	if old >= 0 {
		_ = unix.Close(old)
	}
	if closed {
		_ = unix.Close(int(fd))
		return nil
	}
	kv := []any{"hostDelay", delay}
	if c.opts.NodeDelay != nil {
		kv = append(kv, "delay", c.opts.NodeDelay())
	}
	klog.InfoS(msg, kv...)
	return nil
}

// call runs one call within the timeout.
func (c *Client) call(ctx context.Context, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	return f(ctx)
}
