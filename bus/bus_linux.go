package bus

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/bus/internal/wire"
	"github.com/nodeinit/nodeinit/bus/service"
	"github.com/nodeinit/nodeinit/bus/upstream"
	"github.com/nodeinit/nodeinit/internal/clientlog"
	"github.com/nodeinit/nodeinit/internal/linux"
)

// Limits of the bus as a whole.
const (
	// maxConns bounds the connections open at once, those of the executor
	// process itself aside: the kubelet, when it is the executor, always
	// finds a slot for its one connection (godbus's shared system bus
	// connection), however many its descendants hold.
	maxConns = 32
	// closeWait bounds how long Close waits for the bus's goroutines,
	// which all end as soon as their descriptors are closed.
	closeWait = time.Second
)

// Options configure a Bus.
type Options struct {
	// Root is the root under which the machine ID (etc/machine-id) is
	// read for Peer.GetMachineId; "" is "/".
	Root string
	// Upstream is the D-Bus address of the system bus to pass through to
	// (UpstreamAddress): every call not for a service and not answered by
	// the bus itself goes there. "" means none.
	Upstream string
}

// tunables are the bus's timeouts and what it takes from its
// surroundings: Listen uses defaultTunables, the tests their own through
// listenWith.
type tunables struct {
	// helloTimeout bounds the time from accept to Hello answered: the
	// handshake (four local lines) and one call. A connection that has
	// not said Hello by then is dropped, so that a peer cannot hold a
	// slot by saying nothing.
	helloTimeout time.Duration
	// idleTimeout drops a connection that has no match rule and has sent
	// nothing for this long: it is waiting for nothing the bus would ever
	// send. The kubelet's connection has its rule for PrepareForShutdown.
	idleTimeout time.Duration
	// writeTimeout bounds each write to a peer. A peer that has not read
	// for this long while its socket buffer is full is dropped.
	writeTimeout time.Duration
	// logInterval is how often, at most, a kind of event a client causes
	// is logged at Info (see clientlog.Log).
	logInterval time.Duration
	// procRoot is the proc filesystem the admission walks.
	procRoot string
	// peerPidfd is the kernel's SO_PEERPIDFD (linux.PeerPidfd), which
	// kernels before 6.5 refuse with ENOPROTOOPT.
	peerPidfd func(fd int) (int, error)
	// now is the clock.
	now func() time.Time
	// upstreamHook, when set, is called by a pass-through's reader for
	// each message it has read ("reading") and by its writer before each
	// write ("writing"): the tests' way into those goroutines.
	upstreamHook func(during string)
}

func defaultTunables() tunables {
	return tunables{
		helloTimeout: 10 * time.Second,
		idleTimeout:  time.Minute,
		writeTimeout: 10 * time.Second,
		logInterval:  30 * time.Second,
		procRoot:     "/proc",
		peerPidfd:    linux.PeerPidfd,
		now:          time.Now,
	}
}

// Bus is a listening bus. Its methods may be called from any goroutine and
// return at once.
type Bus struct {
	path string
	opts Options
	tun  tunables
	log  *clientlog.Log
	ln   *net.UnixListener
	// The accept loops' (accept_linux.go): their descriptor of the
	// socket, the event that stops them, the connections they hand to
	// the checkers, and what they refuse.
	lfd       int
	stop      int
	accepting bool // the loops run
	closing   atomic.Bool
	loops     sync.WaitGroup
	checking  chan int
	refusals  *refusals
	guid      string
	serial    atomic.Uint32
	services  []*local
	upstream  upstream.Options // of every pass-through

	wg   sync.WaitGroup // every goroutine of the bus
	done chan struct{}  // closed by Close

	mu       sync.Mutex
	closed   bool
	executor executor
	refused  map[int]int // pid -> pidfd of processes refused before
	// executorKnown is closed by the first AdmitExecutor (or Close);
	// waiting counts the connections admitLater holds until then.
	executorKnown chan struct{}
	waiting       int
	conns         map[*conn]struct{}
	connsOf       map[int32]int // open connections by peer pid
	connID        uint64
}

// Listen creates the unix socket at path (replacing a socket left there by
// an earlier run, never another kind of file), makes it reachable by its
// owner only, and serves the bus on it until Close.
//
// The services (logind) answer for their names on it, from their own
// unique names. Nobody may use the bus until AdmitExecutor names the
// executor.
func Listen(path string, opts Options, services ...service.Service) (*Bus, error) {
	return listenWith(path, opts, defaultTunables(), services...)
}

func listenWith(path string, opts Options, tun tunables, services ...service.Service) (*Bus, error) {
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("bus: %w", err)
	}
	// The peer credentials decide who may use the bus; the mode keeps
	// other users from even connecting.
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("bus: %w", err)
	}
	b := newBus(path, opts, tun, services...)
	b.ln = ln
	if err := b.startAccepting(); err != nil {
		b.Close()
		return nil, err
	}
	klog.V(1).InfoS("Serving a D-Bus bus", "socket", path, "services", len(services))
	return b, nil
}

func newBus(path string, opts Options, tun tunables, services ...service.Service) *Bus {
	if opts.Root == "" {
		opts.Root = "/"
	}
	b := &Bus{
		path:          path,
		opts:          opts,
		tun:           tun,
		log:           clientlog.New(tun.logInterval),
		refusals:      newRefusals(tun.logInterval, path),
		lfd:           -1,
		stop:          -1,
		guid:          fmt.Sprintf("%016x%016x", rand.Uint64(), rand.Uint64()),
		done:          make(chan struct{}),
		executor:      executor{pidfd: -1},
		refused:       make(map[int]int),
		executorKnown: make(chan struct{}),
		conns:         make(map[*conn]struct{}),
		connsOf:       make(map[int32]int),
		// The services' unique names come first: connections are
		// numbered after them.
		connID: uint64(max(len(services), 1) - 1),
	}
	b.upstream = b.upstreamOptions()
	b.register(services)
	b.spawn(func() { b.refusals.report(b.done) })
	return b
}

func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("bus: %w", err)
	case fi.Mode().Type() != fs.ModeSocket:
		return fmt.Errorf("bus: %s exists and is not a socket", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("bus: removing the stale socket: %w", err)
	}
	return nil
}

// Address is the bus's D-Bus address, the value for the executor's
// DBUS_SYSTEM_BUS_ADDRESS.
func (b *Bus) Address() string {
	return "unix:path=" + dbus.EscapeBusAddressValue(b.path)
}

// admit starts serving the connection fd if its peer may use the bus and
// has a slot left; else it closes fd. Nothing of the peer's is read
// before. fd is admit's from here on. A connection that comes before the
// executor is known waits for it (admitLater).
func (b *Bus) admit(fd int) { b.admitWith(fd, time.Time{}, true) }

// admitWith is admit for a connection accepted at accepted (zero: now),
// which may wait for the executor, or has waited already.
func (b *Bus) admitWith(fd int, accepted time.Time, mayWait bool) {
	defer func() {
		if fd >= 0 {
			unix.Close(fd)
		}
		if p := recover(); p != nil {
			b.log.Error(fmt.Errorf("panic: %v", p), "Admitting a D-Bus connection failed; closed it", "stack", string(debug.Stack()))
		}
	}()
	if accepted.IsZero() {
		accepted = b.tun.now()
	}
	cred, err := linux.PeerCred(fd)
	if err != nil {
		b.refusals.add(msgNoCred, err.Error(), false, unix.Ucred{})
		return
	}
	if ok, why := b.admitted(fd, cred); !ok {
		if why == errNoExecutorYet && mayWait && b.admitLater(fd, accepted) {
			fd = -1 // admitLater's now
			return
		}
		b.refusals.add(msgRefused, why, true, cred)
		return
	}

	// Into Go's poller, for the connection's reader and writer.
	f := os.NewFile(uintptr(fd), "dbus")
	fc, err := net.FileConn(f)
	f.Close()
	fd = -1
	if err != nil {
		b.log.Error(err, "Could not serve a D-Bus connection", "socket", b.path)
		return
	}
	nc := fc.(*net.UnixConn)
	rc, err := nc.SyscallConn()
	if err != nil {
		nc.Close()
		b.log.Error(err, "Could not serve a D-Bus connection", "socket", b.path)
		return
	}

	pid := cred.Pid
	why := ""
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		nc.Close()
		return
	}
	own := int(pid) == b.executor.pid
	switch {
	case b.connsOf[pid] >= maxConnsPerPeer:
		why = fmt.Sprintf("the process has %d open, the most one may have", b.connsOf[pid])
	case !own && len(b.conns)-b.connsOf[int32(b.executor.pid)] >= maxConns:
		why = fmt.Sprintf("%d are open, the most the bus serves", maxConns)
	}
	if why != "" {
		b.mu.Unlock()
		nc.Close()
		b.refusals.add(msgTooMany, why, true, cred)
		return
	}
	b.connID++
	c := newConn(b, nc, rc, b.connID, cred, accepted)
	b.conns[c] = struct{}{}
	b.connsOf[pid]++
	b.wg.Add(1)
	b.mu.Unlock()
	go c.serve()
}

func (b *Bus) forget(c *conn) {
	b.mu.Lock()
	if _, ok := b.conns[c]; ok {
		delete(b.conns, c)
		if b.connsOf[c.cred.Pid]--; b.connsOf[c.cred.Pid] <= 0 {
			delete(b.connsOf, c.cred.Pid)
		}
	}
	b.mu.Unlock()
}

// spawn runs f as one of the bus's goroutines, which Close waits for.
func (b *Bus) spawn(f func()) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		f()
	}()
}

func (b *Bus) nextSerial() uint32 {
	for {
		// Serial 0 is invalid; skip it when the counter wraps.
		if s := b.serial.Add(1); s != 0 {
			return s
		}
	}
}

// Status is one line for nodeinit's status report: the connections, each
// service's status (logind's inhibitors), and the connections refused.
func (b *Bus) Status() string {
	b.mu.Lock()
	conns := len(b.conns)
	b.mu.Unlock()
	refusals := b.refusals.Total()
	var s strings.Builder
	fmt.Fprintf(&s, "connections=%d", conns)
	for _, l := range b.services {
		s.WriteString(" " + l.Status())
	}
	fmt.Fprintf(&s, " refusedConnections=%d", refusals)
	return s.String()
}

// Close stops the bus: the socket is removed, every connection closed and
// every service closed (logind releases its inhibitors). It waits at most
// closeWait for the bus's goroutines, which end as soon as their
// descriptors are closed.
func (b *Bus) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	// The loops stop at closing; the event wakes those asleep. The
	// descriptors are closed once they have ended and done is closed.
	b.closing.Store(true)
	if b.accepting {
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		_, _ = unix.Write(b.stop, one[:])
	}
	close(b.done)
	var conns []*conn
	for c := range b.conns {
		conns = append(conns, c)
	}
	pidfds := b.forgetPidfds()
	b.mu.Unlock()
	wire.CloseFDs(pidfds)

	var err error
	if b.ln != nil {
		err = b.ln.Close()
	}
	for _, c := range conns {
		c.Close()
	}
	for _, l := range b.services {
		l.Close()
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
		err = errors.Join(err, fmt.Errorf("bus: the bus's goroutines still run %v after Close", closeWait))
	}
	b.log.Stop()
	return err
}
