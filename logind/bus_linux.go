package logind

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// DefaultInhibitDelayMax is the delay reported when Options leave it unset:
// logind's own default InhibitDelayMaxSec.
const DefaultInhibitDelayMax = 5 * time.Second

// Limits of the bus as a whole.
const (
	// maxConns bounds the connections open at once. The kubelet keeps one
	// (godbus's shared system bus connection).
	maxConns = 32
	// maxInhibitors bounds the delay locks held at once. The kubelet holds
	// one, two for a moment when it takes a new one before releasing the
	// old.
	maxInhibitors = 64
	// acceptRetry is the pause after a failed accept (EMFILE and the
	// like), so that a lasting failure does not spin.
	acceptRetry = 100 * time.Millisecond
	// closeWait bounds how long Close waits for the bus's goroutines,
	// which all end as soon as their descriptors are closed.
	closeWait = time.Second
)

// Options configure a Bus.
type Options struct {
	// InhibitDelayMax is reported as logind's InhibitDelayMaxUSec: the
	// longest a delay inhibitor may hold shutdown back, and so the longest
	// the caller should wait for the channel PrepareForShutdown returns.
	// The kubelet wants it at least as long as its shutdownGracePeriod
	// (the sum of shutdownGracePeriodByPodPriority); shorter, it raises it
	// with a logind drop-in and a reload (InhibitDelayMax is then the
	// delay in force). Zero means DefaultInhibitDelayMax.
	InhibitDelayMax time.Duration
	// Allow decides, from the credentials the kernel gives for a new
	// connection (SO_PEERCRED: pid, uid and gid at connect time), whether
	// that process may use the bus. It is required. It runs on the bus's
	// goroutines, possibly several at once, and may take its time: no
	// caller of the Bus waits for it.
	Allow func(unix.Ucred) bool
	// ConfigRoot is the root under which logind's configuration
	// (etc/systemd/logind.conf and the logind.conf.d drop-ins) is read
	// when a client reloads logind; "" is "/".
	ConfigRoot string
	// Upstream is the D-Bus address of the system bus to pass through to
	// (UpstreamAddress): every call not for logind and not answered by
	// the bus itself goes there. "" means none.
	Upstream string
}

// Bus is a listening bus. Its methods may be called from any goroutine and
// return at once.
type Bus struct {
	path   string
	opts   Options
	ln     *net.UnixListener
	guid   string
	serial atomic.Uint32
	logind *logindState // the delay in force, changed by a reload

	wg   sync.WaitGroup // every goroutine of the bus
	done chan struct{}  // closed by Close

	mu            sync.Mutex
	closed        bool
	conns         map[*conn]struct{}
	connID        uint64
	inhibitors    map[*inhibitor]struct{}
	inhibitorID   uint64
	drained       chan struct{} // made by the first PrepareForShutdown
	drainedClosed bool
	preparedAt    time.Time

	// afterRelease, when set (by tests), is called after an inhibitor is
	// released.
	afterRelease func()
}

// Listen creates the unix socket at path (replacing a socket left there by
// an earlier run, never another kind of file), makes it reachable by its
// owner only, and serves the bus on it until Close.
func Listen(path string, opts Options) (*Bus, error) {
	if opts.Allow == nil {
		return nil, errors.New("logind: Options.Allow is required: it decides which processes may use the bus")
	}
	if opts.InhibitDelayMax <= 0 {
		opts.InhibitDelayMax = DefaultInhibitDelayMax
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("logind: %w", err)
	}
	// The peer credentials decide who may use the bus; the mode keeps
	// other users from even connecting.
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("logind: %w", err)
	}
	b := newBus(path, opts)
	b.ln = ln
	b.wg.Add(1)
	go b.accept()
	klog.V(1).InfoS("Serving logind's shutdown inhibitors on a D-Bus socket", "socket", path, "inhibitDelayMax", opts.InhibitDelayMax)
	return b, nil
}

func newBus(path string, opts Options) *Bus {
	return &Bus{
		path:       path,
		opts:       opts,
		logind:     newLogindState(opts),
		guid:       fmt.Sprintf("%016x%016x", rand.Uint64(), rand.Uint64()),
		done:       make(chan struct{}),
		conns:      make(map[*conn]struct{}),
		inhibitors: make(map[*inhibitor]struct{}),
	}
}

func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("logind: %w", err)
	case fi.Mode().Type() != fs.ModeSocket:
		return fmt.Errorf("logind: %s exists and is not a socket", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("logind: removing the stale socket: %w", err)
	}
	return nil
}

// Address is the bus's D-Bus address, the value for the executor's
// DBUS_SYSTEM_BUS_ADDRESS.
func (b *Bus) Address() string {
	return "unix:path=" + dbus.EscapeBusAddressValue(b.path)
}

func (b *Bus) accept() {
	defer b.wg.Done()
	for {
		nc, err := b.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			klog.ErrorS(err, "Could not accept a D-Bus connection", "socket", b.path)
			t := time.NewTimer(acceptRetry)
			select {
			case <-t.C:
			case <-b.done:
				t.Stop()
				return
			}
			continue
		}
		b.admit(nc)
	}
}

// admit starts serving nc, unless the bus is closed or full.
func (b *Bus) admit(nc *net.UnixConn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		nc.Close()
		return
	}
	if len(b.conns) >= maxConns {
		nc.Close()
		klog.InfoS("Refused a D-Bus connection: too many open", "socket", b.path, "connections", len(b.conns))
		return
	}
	b.connID++
	c, err := newConn(b, nc, b.connID)
	if err != nil {
		nc.Close()
		klog.ErrorS(err, "Could not serve a D-Bus connection", "socket", b.path)
		return
	}
	b.conns[c] = struct{}{}
	b.wg.Add(1)
	go c.serve()
}

func (b *Bus) forget(c *conn) {
	b.mu.Lock()
	delete(b.conns, c)
	b.mu.Unlock()
}

func (b *Bus) nextSerial() uint32 {
	for {
		// Serial 0 is invalid; skip it when the counter wraps.
		if s := b.serial.Add(1); s != 0 {
			return s
		}
	}
}

// PrepareForShutdown emits logind's PrepareForShutdown(true) to every
// connection with a match rule for it, and returns a channel that is closed
// once every delay inhibitor is released: at once when none is held.
//
// From the first call on, Inhibit is refused with
// org.freedesktop.login1.OperationInProgress, as logind refuses a delay
// lock for an operation already under way: a lock taken now would promise a
// delay that the shutdown in progress does not give, and a client that kept
// taking new ones could hold the channel open for ever. So the channel
// waits for exactly the inhibitors held at the first call.
//
// Later calls emit nothing and return the same channel. The caller bounds
// its wait itself, with Options.InhibitDelayMax as logind does; Close
// releases every inhibitor, so the channel is closed after Close too.
func (b *Bus) PrepareForShutdown() <-chan struct{} {
	b.mu.Lock()
	if b.drained != nil {
		ch := b.drained
		b.mu.Unlock()
		return ch
	}
	b.drained = make(chan struct{})
	b.preparedAt = time.Now()
	held := len(b.inhibitors)
	if held == 0 {
		close(b.drained)
		b.drainedClosed = true
	}
	var conns []*conn
	if !b.closed {
		for c := range b.conns {
			conns = append(conns, c)
		}
	}
	ch := b.drained
	b.mu.Unlock()

	sig := newSignal(logindOwner, logindPath, managerIface, "PrepareForShutdown", true)
	data, _, err := encodeMessage(sig, b.nextSerial())
	if err != nil {
		// A constant message: this cannot fail short of a bug.
		klog.ErrorS(err, "Could not encode PrepareForShutdown")
		return ch
	}
	sent := 0
	for _, c := range conns {
		if c.wants(sig, logindOwner) && c.enqueue(outgoing{data: data}) {
			sent++
		}
	}
	klog.InfoS("Sent PrepareForShutdown(true) on the D-Bus socket", "connections", sent, "delayInhibitors", held)
	return ch
}

// Status is one line for nodeinit's status report: the connections, each
// inhibitor held (who, why, pid, for how long), and whether
// PrepareForShutdown was sent.
func (b *Bus) Status() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	var s strings.Builder
	fmt.Fprintf(&s, "connections=%d inhibitors=%d", len(b.conns), len(b.inhibitors))
	held := make([]*inhibitor, 0, len(b.inhibitors))
	for in := range b.inhibitors {
		held = append(held, in)
	}
	slices.SortFunc(held, func(x, y *inhibitor) int { return cmp.Compare(x.id, y.id) })
	for _, in := range held {
		fmt.Fprintf(&s, " [who=%q why=%q mode=delay pid=%d held=%s]", in.who, in.why, in.pid, now.Sub(in.since).Round(time.Second))
	}
	if b.drained == nil {
		s.WriteString(" prepareForShutdown=not-sent")
	} else {
		fmt.Fprintf(&s, " prepareForShutdown=sent-%s-ago", now.Sub(b.preparedAt).Round(time.Millisecond))
	}
	return s.String()
}

// Close stops the bus: the socket is removed, every connection closed and
// every inhibitor released. It waits at most closeWait for the bus's
// goroutines, which end as soon as their descriptors are closed.
func (b *Bus) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	close(b.done)
	var conns []*conn
	for c := range b.conns {
		conns = append(conns, c)
	}
	var held []*inhibitor
	for in := range b.inhibitors {
		held = append(held, in)
	}
	b.mu.Unlock()

	var err error
	if b.ln != nil {
		err = b.ln.Close()
	}
	for _, c := range conns {
		c.close()
	}
	for _, in := range held {
		in.r.Close()
	}
	ended := make(chan struct{})
	go func() {
		b.wg.Wait()
		close(ended)
	}()
	t := time.NewTimer(closeWait)
	defer t.Stop()
	select {
	case <-ended:
	case <-t.C:
		err = errors.Join(err, fmt.Errorf("logind: the bus's goroutines still run %v after Close", closeWait))
	}
	return err
}
