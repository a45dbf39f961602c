// Package hostlogindtest is a host for tests of package hostlogind and of
// nodeinit's drain on the host's shutdown: a real dbus-daemon with the
// stock system bus's policy, and a stand-in for the host's systemd-logind
// on it that owns org.freedesktop.login1, reports InhibitDelayMaxUSec,
// answers Inhibit with the write end of a pipe and records when each lock
// is taken and released, and emits PrepareForShutdown.
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

// Lock is one delay lock taken from the stand-in.
type Lock struct {
	Who, Why, What, Mode string
	Taken, Released      time.Time // Released is zero while it is held
}

// Logind is the stand-in for the host's logind.
type Logind struct {
	t     testing.TB
	conn  *dbus.Conn
	delay time.Duration

	mu      sync.Mutex
	refuse  int // Inhibit calls to refuse
	locks   []*Lock
	changed chan struct{} // closed and replaced on every change
}

// NewLogind connects to the bus at address, owns org.freedesktop.login1
// and serves until Stop or the test's end.
func NewLogind(t testing.TB, address string, delay time.Duration) *Logind {
	t.Helper()
	conn, err := dbus.Connect(address)
	if err != nil {
		t.Fatal(err)
	}
	l := &Logind{t: t, conn: conn, delay: delay, changed: make(chan struct{})}
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
func (l *Logind) Stop() { l.conn.Close() }

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
func (l *Logind) Held() int {
	n := 0
	for _, k := range l.Locks() {
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
	for m := range in {
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
		switch {
		case iface == "org.freedesktop.DBus.Properties" && member == "Get":
			body = []any{dbus.MakeVariant(uint64(l.delay.Microseconds()))}
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
			if fd, err = l.inhibit(m.Body); err != nil {
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
		l.conn.Send(reply, nil)
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// inhibit makes a lock's pipe, watches its read end for the hang-up that
// releases the lock, and returns the write end.
func (l *Logind) inhibit(args []any) (int, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return -1, err
	}
	k := &Lock{Taken: time.Now()}
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
