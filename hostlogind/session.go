package hostlogind

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/godbus/dbus/v5"
	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/bus/service"
	"github.com/nodeinit/nodeinit/bus/upstream"
	"github.com/nodeinit/nodeinit/logind"
)

// Following the host's logind: a connection to the host's bus, made
// again while it fails, the match rules, logind's owner and state, and
// its signals.

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

// call runs one call within the timeout.
func (c *Client) call(ctx context.Context, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	return f(ctx)
}
