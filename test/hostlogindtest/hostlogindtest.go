// Package hostlogindtest is a host for tests of package hostlogind and of
// nodeinit's drain on the host's shutdown: a real dbus-daemon with the
// stock system bus's policy, and a stand-in for the host's systemd-logind
// on it that owns org.freedesktop.login1, reports InhibitDelayMaxUSec,
// and PreparingForShutdown, answers Inhibit with the write end of a pipe
// and records when each lock is taken and released, and emits
// PrepareForShutdown.
package hostlogindtest

import (
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// Bus runs a real dbus-daemon with the system bus's policy, where
// org.freedesktop.login1 may be owned and called, and returns its address;
// it is stopped when the test ends.
func Bus(t testing.TB) string {
	t.Helper()
	address, _ := testenv.SystemBus(t, "org.freedesktop.login1")
	return address
}

// HostBus is Bus as a testenv.Bus, which the test may stop and start
// again on the same address, and whose policy it may change.
func HostBus(t testing.TB) *testenv.Bus {
	t.Helper()
	return testenv.NewSystemBus(t, "org.freedesktop.login1")
}

// Lock is one delay lock taken from the stand-in.
type Lock struct {
	Who, Why, What, Mode string
	Sender               string    // the unique name of the connection that took it
	Taken, Released      time.Time // Released is zero while it is held
}

// Logind is the stand-in for the host's logind.
type Logind struct {
	t     testing.TB
	conn  *dbus.Conn
	stop  sync.Once
	done  chan struct{} // closed by Stop, which ends serve
	delay time.Duration

	mu        sync.Mutex
	refuse    int           // Inhibit calls to refuse
	hold      time.Duration // how long the next holdN Inhibit replies wait
	holdN     int
	preparing bool // PreparingForShutdown
	locks     []*Lock
	changed   chan struct{} // closed and replaced on every change
}

// NewLogind connects to the bus at address, owns org.freedesktop.login1
// and serves until Stop or the test's end.
func NewLogind(t testing.TB, address string, delay time.Duration) *Logind {
	t.Helper()
	conn, err := dbus.Connect(address)
	if err != nil {
		t.Fatal(err)
	}
	l := &Logind{t: t, conn: conn, delay: delay, done: make(chan struct{}), changed: make(chan struct{})}
	t.Cleanup(l.Stop)
	// Serving before it owns the name, as logind does: a client that sees
	// the new owner finds its objects there.
	in := make(chan *dbus.Message, 64)
	conn.Eavesdrop(in)
	acquired := make(chan struct{})
	go l.serve(in, acquired)
	call := conn.BusObject().Call("org.freedesktop.DBus.RequestName", dbus.FlagNoReplyExpected, "org.freedesktop.login1", uint32(dbus.NameFlagDoNotQueue))
	if call.Err != nil {
		t.Fatal(call.Err)
	}
	select {
	case <-acquired:
	case <-time.After(5 * time.Second):
		t.Fatal("the stand-in logind did not get org.freedesktop.login1 within 5s")
	}
	return l
}

// Stop leaves the bus, as logind does when it stops; the locks stay held
// by whoever holds them.
//
// The eavesdropping channel is taken back from the connection before it
// closes: godbus's Close closes that channel but leaves it set, and its
// reader goroutine, still handing over a message it had read, then sends
// on the closed channel and panics. After Eavesdrop(nil) the reader sends
// nothing more; serve ends on done. (When the bus drops the connection,
// godbus's reader closes the channel itself, from its own goroutine, and
// serve ends there.)
func (l *Logind) Stop() {
	l.stop.Do(func() {
		l.conn.Eavesdrop(nil)
		l.conn.Close()
		close(l.done)
	})
}

// PrepareForShutdown emits the signal and returns when it was sent.
func (l *Logind) PrepareForShutdown(start bool) time.Time {
	l.t.Helper()
	now := time.Now()
	if err := l.conn.Emit("/org/freedesktop/login1", "org.freedesktop.login1.Manager.PrepareForShutdown", start); err != nil {
		l.t.Fatal(err)
	}
	return now
}

// Refuse makes the next n calls of Inhibit fail with AccessDenied, as a
// host's policy that refuses the caller does.
func (l *Logind) Refuse(n int) {
	l.mu.Lock()
	l.refuse = n
	l.mu.Unlock()
}

// SetDelay changes InhibitDelayMaxUSec, as a reload of logind's
// configuration does.
func (l *Logind) SetDelay(d time.Duration) {
	l.mu.Lock()
	l.delay = d
	l.mu.Unlock()
}

// SetPreparing sets PreparingForShutdown, which logind reports true
// between its PrepareForShutdown(true) and (false).
func (l *Logind) SetPreparing(p bool) {
	l.mu.Lock()
	l.preparing = p
	l.mu.Unlock()
}

// HoldReplies makes the replies to the next n Inhibit calls wait d after
// the lock is taken, as a logind slower than its client's timeout.
func (l *Logind) HoldReplies(n int, d time.Duration) {
	l.mu.Lock()
	l.hold, l.holdN = d, n
	l.mu.Unlock()
}

// held says how long the reply to an Inhibit call waits, 0 for none.
func (l *Logind) held() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holdN > 0 {
		l.holdN--
		return l.hold
	}
	return 0
}

func (l *Logind) refused() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refuse > 0 {
		l.refuse--
		return true
	}
	return false
}

// Locks is every lock taken so far, in order.
func (l *Logind) Locks() []Lock {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Lock, len(l.locks))
	for i, k := range l.locks {
		out[i] = *k
	}
	return out
}

// Held is how many locks are held now.
func (l *Logind) Held() int { return held(l.Locks()) }

// Holding is a condition for WaitFor: n locks held now.
func Holding(n int) func([]Lock) bool {
	return func(locks []Lock) bool { return held(locks) == n }
}

// held is how many of locks are held.
func held(locks []Lock) int {
	n := 0
	for _, k := range locks {
		if k.Released.IsZero() {
			n++
		}
	}
	return n
}

// WaitFor waits up to d for cond on the locks, and fails the test
// otherwise.
func (l *Logind) WaitFor(d time.Duration, what string, cond func([]Lock) bool) {
	l.t.Helper()
	deadline := time.After(d)
	for {
		l.mu.Lock()
		ch := l.changed
		l.mu.Unlock()
		locks := l.Locks()
		if cond(locks) {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			l.t.Fatalf("%s: not within %v; locks: %+v", what, d, locks)
		}
	}
}

func (l *Logind) notify() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// serve answers the calls for logind from the connection's messages,
// which Eavesdrop hands it undispatched: so that a reply's descriptor can
// be closed here once the reply is out, as logind closes its copy of the
// write end.
func (l *Logind) serve(in <-chan *dbus.Message, acquired chan<- struct{}) {
	for {
		var m *dbus.Message
		select {
		case m = <-in:
		case <-l.done:
			return
		}
		if m == nil { // closed by godbus: the bus dropped the connection
			return
		}
		if m.Type == dbus.TypeSignal && len(m.Body) == 1 && m.Body[0] == "org.freedesktop.login1" {
			if member, _ := m.Headers[dbus.FieldMember].Value().(string); member == "NameAcquired" {
				close(acquired)
			}
		}
		if m.Type != dbus.TypeMethodCall {
			continue
		}
		member, _ := m.Headers[dbus.FieldMember].Value().(string)
		iface, _ := m.Headers[dbus.FieldInterface].Value().(string)
		var body []any
		var fd = -1
		var hold time.Duration
		switch {
		case iface == "org.freedesktop.DBus.Properties" && member == "Get" && len(m.Body) == 2:
			l.mu.Lock()
			delay, preparing := l.delay, l.preparing
			l.mu.Unlock()
			switch m.Body[1] {
			case "InhibitDelayMaxUSec":
				body = []any{dbus.MakeVariant(uint64(delay.Microseconds()))}
			case "PreparingForShutdown":
				body = []any{dbus.MakeVariant(preparing)}
			default:
				l.t.Errorf("the stand-in logind was asked for the property %v", m.Body[1])
				continue
			}
		case member == "Inhibit" && len(m.Body) == 4 && l.refused():
			l.conn.Send(&dbus.Message{Type: dbus.TypeError, Headers: map[dbus.HeaderField]dbus.Variant{
				dbus.FieldErrorName:   dbus.MakeVariant("org.freedesktop.DBus.Error.AccessDenied"),
				dbus.FieldReplySerial: dbus.MakeVariant(m.Serial()),
				dbus.FieldDestination: m.Headers[dbus.FieldSender],
				dbus.FieldSignature:   dbus.MakeVariant(dbus.SignatureOf("")),
			}, Body: []any{"Permission denied"}}, nil)
			continue
		case member == "Inhibit" && len(m.Body) == 4:
			var err error
			hold = l.held()
			sender, _ := m.Headers[dbus.FieldSender].Value().(string)
			if fd, err = l.inhibit(m.Body, sender); err != nil {
				l.t.Error(err)
				continue
			}
			body = []any{dbus.UnixFD(fd)}
		default:
			l.t.Errorf("the stand-in logind got an unexpected call %s.%s", iface, member)
			continue
		}
		reply := &dbus.Message{Type: dbus.TypeMethodReply, Headers: map[dbus.HeaderField]dbus.Variant{
			dbus.FieldReplySerial: dbus.MakeVariant(m.Serial()),
			dbus.FieldDestination: m.Headers[dbus.FieldSender],
			dbus.FieldSignature:   dbus.MakeVariant(dbus.SignatureOf(body...)),
		}, Body: body}
		if hold > 0 {
			go func() {
				time.Sleep(hold)
				l.conn.Send(reply, nil)
				unix.Close(fd)
			}()
			continue
		}
		l.conn.Send(reply, nil)
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// inhibit makes a lock's pipe, watches its read end for the hang-up that
// releases the lock, and returns the write end.
func (l *Logind) inhibit(args []any, sender string) (int, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return -1, err
	}
	k := &Lock{Taken: time.Now(), Sender: sender}
	k.What, _ = args[0].(string)
	k.Who, _ = args[1].(string)
	k.Why, _ = args[2].(string)
	k.Mode, _ = args[3].(string)
	l.mu.Lock()
	l.locks = append(l.locks, k)
	l.notify()
	l.mu.Unlock()
	go func() {
		var b [64]byte
		for {
			n, err := unix.Read(p[0], b[:])
			if n == 0 && err == nil || err != nil && err != unix.EINTR {
				break
			}
		}
		unix.Close(p[0])
		l.mu.Lock()
		k.Released = time.Now()
		l.notify()
		l.mu.Unlock()
	}()
	return p[1], nil
}

// Stranger is another connection on the host's bus, which anyone on the
// host may open.
type Stranger struct {
	t    testing.TB
	conn *dbus.Conn
}

// Impostor connects a Stranger to the bus at address.
func Impostor(t testing.TB, address string) *Stranger {
	t.Helper()
	conn, err := dbus.Connect(address)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &Stranger{t: t, conn: conn}
}

// PrepareForShutdown sends logind's signal, on logind's path, to every
// other connection of the bus by its unique name (the stock policy lets
// anyone send a signal to anyone) and as a broadcast.
func (m *Stranger) PrepareForShutdown(start bool) {
	m.t.Helper()
	var names []string
	if err := m.conn.BusObject().Call("org.freedesktop.DBus.ListNames", 0).Store(&names); err != nil {
		m.t.Fatal(err)
	}
	own := m.conn.Names()[0]
	for _, dest := range append(names, "") {
		if dest != "" && (dest[0] != ':' || dest == own) {
			continue
		}
		msg := &dbus.Message{Type: dbus.TypeSignal, Headers: map[dbus.HeaderField]dbus.Variant{
			dbus.FieldPath:      dbus.MakeVariant(dbus.ObjectPath("/org/freedesktop/login1")),
			dbus.FieldInterface: dbus.MakeVariant("org.freedesktop.login1.Manager"),
			dbus.FieldMember:    dbus.MakeVariant("PrepareForShutdown"),
			dbus.FieldSignature: dbus.MakeVariant(dbus.SignatureOf(start)),
		}, Body: []any{start}}
		if dest != "" {
			msg.Headers[dbus.FieldDestination] = dbus.MakeVariant(dest)
		}
		if call := m.conn.Send(msg, nil); call != nil && call.Err != nil {
			m.t.Fatal(call.Err)
		}
	}
}

// SendDescriptors sends n signals to the connection dest alone (the stock
// policy lets anyone send a signal to anyone), each carrying two
// descriptors (the ends of a pipe of its own): by turns as two 'h'
// arguments and inside a struct '(hh)', where godbus does not see them.
// It returns once the bus has taken them all.
func (m *Stranger) SendDescriptors(dest string, n int) {
	m.t.Helper()
	m.sendDescriptors(dest, n, dbus.TypeSignal)
}

// CallWithDescriptors is SendDescriptors with method calls that want no
// reply, where the bus's policy lets them through.
func (m *Stranger) CallWithDescriptors(dest string, n int) {
	m.t.Helper()
	m.sendDescriptors(dest, n, dbus.TypeMethodCall)
}

func (m *Stranger) sendDescriptors(dest string, n int, typ dbus.Type) {
	m.t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		m.t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	for i := range n {
		body := []any{dbus.UnixFD(p[0]), dbus.UnixFD(p[1])}
		if i%2 == 1 {
			body = []any{struct{ A, B dbus.UnixFD }{dbus.UnixFD(p[0]), dbus.UnixFD(p[1])}}
		}
		msg := &dbus.Message{Type: typ, Flags: dbus.FlagNoReplyExpected, Headers: map[dbus.HeaderField]dbus.Variant{
			dbus.FieldPath:        dbus.MakeVariant(dbus.ObjectPath("/org/example/Flood")),
			dbus.FieldInterface:   dbus.MakeVariant("org.example.Flood"),
			dbus.FieldMember:      dbus.MakeVariant("Descriptors"),
			dbus.FieldDestination: dbus.MakeVariant(dest),
			dbus.FieldSignature:   dbus.MakeVariant(dbus.SignatureOf(body...)),
		}, Body: body}
		if call := m.conn.Send(msg, nil); call != nil && call.Err != nil {
			m.t.Fatal(call.Err)
		}
	}
	// The bus handles a connection's messages in order: once it has
	// answered this call, it has passed every signal on to dest.
	if err := m.conn.BusObject().Call("org.freedesktop.DBus.GetId", 0).Err; err != nil {
		m.t.Fatal(err)
	}
}
