package hostlogind

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

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
