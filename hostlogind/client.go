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

	"github.com/nodeinit/nodeinit/bus/service"
	"github.com/nodeinit/nodeinit/bus/upstream"
	"github.com/nodeinit/nodeinit/logind"
)

// What nodeinit asks of the host's logind.
const (
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
	c := &Client{opts: opts, shutdown: make(chan bool), ctx: ctx, cancel: cancel, done: make(chan struct{}),
		lock: -1, draining: -1}
	empty := ""
	c.owner.Store(&empty)
	go c.run()
	return c
}

// Shutdown delivers the host's PrepareForShutdown: true when the host
// begins to shut down, false when that shutdown is cancelled. Each is
// delivered once the one before was received: a Release refers to the
// last true received.
func (c *Client) Shutdown() <-chan bool { return c.shutdown }

// Delay is the host's InhibitDelayMaxUSec as read when the host's
// shutdown began (or the lock was last taken): the longest the host's
// shutdown waits for the node. 0: unknown.
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
// when the last PrepareForShutdown(true) received came. It does nothing
// when there is none, or that shutdown was cancelled.
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

// wanted says which signals the connection hands over: logind's
// PrepareForShutdown from its owner, on its path, and the bus's
// NameOwnerChanged. The rest are dropped unread, their descriptors closed.
func (c *Client) wanted(sender, path, iface, member string) bool {
	switch {
	case iface == logind.ManagerIface && member == "PrepareForShutdown":
		return path == string(logind.ObjectPath) && sender != "" && sender == *c.owner.Load()
	case iface == service.BusName && member == "NameOwnerChanged":
		return sender == service.BusName
	}
	return false
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
	ctx := c.ctx
	conn, err := upstream.DialCaller(c.opts.Address, c.opts.Timeout, c.wanted)
	if err != nil {
		return fmt.Errorf("connect to the host's system bus %s: %w", c.opts.Address, err)
	}
	defer func() {
		conn.Close()
		if n := conn.Dropped(); n > 0 {
			klog.V(2).InfoS("Dropped messages from the host's system bus", "count", n)
		}
	}()
	// The rules come first: no shutdown and no new owner falls between
	// the lock and the watch.
	if err := c.call(ctx, func(ctx context.Context) error {
		if _, err := conn.Call(ctx, service.BusName, service.BusPath, service.BusName, "AddMatch",
			"type='signal',sender='"+logind.BusName+"',path='"+string(logind.ObjectPath)+"',interface='"+logind.ManagerIface+"',member='PrepareForShutdown'"); err != nil {
			return err
		}
		_, err := conn.Call(ctx, service.BusName, service.BusPath, service.BusName, "AddMatch",
			"type='signal',sender='"+service.BusName+"',interface='"+service.BusName+"',member='NameOwnerChanged',arg0='"+logind.BusName+"'")
		return err
	}); err != nil {
		return fmt.Errorf("add match rules on the host's system bus: %w", err)
	}
	// What fails while the bus is there (GetNameOwner, reading logind's
	// state, the lock) is tried again after 1 s, doubling to 30 s.
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
	again(c.follow(ctx, conn, "Took a shutdown delay lock on the host's logind: the host's shutdown drains the node"))
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-conn.Done():
			return fmt.Errorf("the connection to the host's system bus ended: %w", conn.Err())
		case <-retry:
			again(c.follow(ctx, conn, "Took a shutdown delay lock on the host's logind: the host's shutdown drains the node"))
		case m := <-conn.Signals():
			if took, err := c.handle(ctx, conn, m); took {
				again(err)
			}
		}
	}
}

// follow finds logind's owner, where it is not known, and then acts on
// logind's state (sync). No logind on the bus is logged once; its
// arrival (NameOwnerChanged) brings the lock.
func (c *Client) follow(ctx context.Context, conn *upstream.Caller, msg string) error {
	if *c.owner.Load() == "" {
		var owner string
		err := c.call(ctx, func(ctx context.Context) error {
			r, err := conn.Call(ctx, service.BusName, service.BusPath, service.BusName, "GetNameOwner", logind.BusName)
			if err != nil {
				return err
			}
			defer r.Close()
			return r.Store(&owner)
		})
		var derr *upstream.CallError
		if errors.As(err, &derr) && derr.Name == service.NameHasNoOwner {
			c.fail(errors.New("there is no logind on the host's system bus (no owner of "+logind.BusName+"); the lock is taken when one comes"), 0)
			return nil
		}
		if err != nil {
			return fmt.Errorf("the owner of %s on the host's bus: %w", logind.BusName, err)
		}
		c.owner.Store(&owner)
	}
	return c.sync(ctx, conn, msg)
}

// sync reads whether the host is shutting down, and its delay, and acts
// on what it missed while it did not follow logind (a lost connection, a
// logind restart): a shutdown under way takes no lock, which would only
// delay it, and is delivered; one cancelled unheard takes the lock again
// and is delivered as cancelled; otherwise a lock is taken.
func (c *Client) sync(ctx context.Context, conn *upstream.Caller, msg string) error {
	var preparing bool
	var delay time.Duration
	if err := c.call(ctx, func(ctx context.Context) error {
		if err := c.property(ctx, conn, "PreparingForShutdown", &preparing); err != nil {
			return err
		}
		var err error
		delay, err = c.readDelay(ctx, conn)
		return err
	}); err != nil {
		return fmt.Errorf("the host's logind: %w", err)
	}
	c.mu.Lock()
	c.delay = delay
	was := c.preparing
	c.mu.Unlock()
	switch {
	case preparing && was:
		return nil // the shutdown goes on; its lock waits for Release
	case preparing:
		c.begin("The host is shutting down already: draining the node")
		return nil
	case was:
		klog.InfoS("The host's shutdown was cancelled while nodeinit did not follow its logind")
		return c.cancelled(ctx, conn)
	}
	return c.take(ctx, conn, msg, delay)
}

// property reads one of logind's Manager properties into v.
func (c *Client) property(ctx context.Context, conn *upstream.Caller, name string, v any) error {
	r, err := conn.Call(ctx, logind.BusName, logind.ObjectPath, service.PropertiesIface, "Get", logind.ManagerIface, name)
	if err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	defer r.Close()
	var variant dbus.Variant
	if err := r.Store(&variant); err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	if err := variant.Store(v); err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	return nil
}

// readDelay reads the host's InhibitDelayMaxUSec.
func (c *Client) readDelay(ctx context.Context, conn *upstream.Caller) (time.Duration, error) {
	var usec uint64
	if err := c.property(ctx, conn, "InhibitDelayMaxUSec", &usec); err != nil {
		return 0, err
	}
	return time.Duration(min(usec, uint64(1<<63-1)/1000)) * time.Microsecond, nil
}

// handle follows one signal of logind's or about it. took says whether
// it asked for a lock, and err why it has none.
func (c *Client) handle(ctx context.Context, conn *upstream.Caller, m *dbus.Message) (took bool, err error) {
	if member, _ := m.Headers[dbus.FieldMember].Value().(string); member == "NameOwnerChanged" {
		var name, old, owner string
		if err := dbus.Store(m.Body, &name, &old, &owner); err != nil || name != logind.BusName {
			return false, nil
		}
		c.owner.Store(&owner)
		if owner == "" {
			klog.InfoS("The host's logind has left the bus; its lock is kept for its return", "was", old)
			return true, nil // nothing to ask again until it is back
		}
		return true, c.sync(ctx, conn, "The host's logind has a new owner: took a new shutdown delay lock there")
	}
	var start bool
	if err := dbus.Store(m.Body, &start); err != nil {
		return false, nil
	}
	c.mu.Lock()
	was := c.preparing
	c.mu.Unlock()
	switch {
	case start == was:
		return false, nil // what sync has found already
	case start:
		// The delay as it is now: a reload of logind's configuration
		// changes it with no signal. logind has just spoken, so it is
		// asked briefly; the last known value stands in.
		rctx, cancel := context.WithTimeout(ctx, min(c.opts.Timeout, time.Second))
		if delay, err := c.readDelay(rctx, conn); err == nil {
			c.mu.Lock()
			c.delay = delay
			c.mu.Unlock()
		}
		cancel()
		c.begin("The host is shutting down: draining the node")
		return false, nil
	}
	klog.InfoS("The host's shutdown was cancelled")
	return true, c.cancelled(ctx, conn)
}

// begin follows the host's shutdown: the lock held becomes the one
// Release lets go, and true is delivered. The lock moves before the
// delivery, which waits for the receiver: a Release that follows the
// receipt finds it, and one for an earlier shutdown cannot come after it.
func (c *Client) begin(msg string) {
	c.mu.Lock()
	c.preparing = true
	if c.draining < 0 {
		c.draining, c.lock = c.lock, -1
	}
	held := c.draining >= 0
	delay := c.delay
	c.mu.Unlock()
	klog.InfoS(msg, "hostLockHeld", held, "hostDelay", delay)
	c.deliver(true)
}

// cancelled follows a cancelled shutdown: a new lock, then the old one
// goes, as the kubelet does (the host is never left unlocked between the
// two), and false is delivered.
func (c *Client) cancelled(ctx context.Context, conn *upstream.Caller) error {
	c.mu.Lock()
	c.preparing = false
	c.mu.Unlock()
	var err error
	if delay, derr := c.readDelay(ctx, conn); derr != nil {
		err = fmt.Errorf("the host's logind: %w", derr)
	} else {
		err = c.take(ctx, conn, "Took a new shutdown delay lock on the host's logind after the cancelled shutdown", delay)
	}
	c.closeLock(&c.draining)
	c.deliver(false)
	return err
}

// deliver hands a shutdown's start or cancel to the receiver of Shutdown,
// and returns once it has it (or at Close).
func (c *Client) deliver(start bool) {
	select {
	case c.shutdown <- start:
	case <-c.ctx.Done():
	}
}

// take takes a new lock, then closes the one it replaces. Not while the
// host is shutting down: a new lock would only delay it.
func (c *Client) take(ctx context.Context, conn *upstream.Caller, msg string, delay time.Duration) error {
	c.mu.Lock()
	preparing := c.preparing
	c.mu.Unlock()
	if preparing {
		return nil
	}
	fd := -1
	err := c.call(ctx, func(ctx context.Context) error {
		r, err := conn.Call(ctx, logind.BusName, logind.ObjectPath, logind.ManagerIface, "Inhibit", what, Who, Why, mode)
		if err != nil {
			return fmt.Errorf("call Inhibit: %w", err)
		}
		defer r.Close()
		if fd, err = r.TakeFD(0); err != nil {
			return fmt.Errorf("call Inhibit: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("the host's logind: %w", err)
	}
	c.mu.Lock()
	old := c.lock
	c.lock, c.delay, c.failed = fd, delay, false
	closed := c.closed
	if closed {
		c.lock = -1
	}
	c.mu.Unlock()
	if old >= 0 {
		_ = unix.Close(old)
	}
	if closed {
		_ = unix.Close(fd)
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
