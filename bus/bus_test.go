package bus

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/bus/internal/wire"
	"github.com/nodeinit/nodeinit/bus/service"
)

// listen serves a bus in the test's temporary directory, closed at the end
// of the test, with the test process as its executor: the test's own
// connections go through the real admission, and pass it. tune, if given,
// changes the bus's tunables first.
func listen(t *testing.T, opts testOptions, tune ...func(*tunables)) *Bus {
	t.Helper()
	tun := defaultTunables()
	for _, f := range tune {
		f(&tun)
	}
	b, err := listenTest(filepath.Join(t.TempDir(), "bus"), opts, tun)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	if err := b.AdmitExecutor(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	return b
}

// waitInhibitors waits, at most 10s, until logind holds n inhibitors.
func waitInhibitors(t *testing.T, b *Bus, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(b.Status(), " inhibitors="+strconv.Itoa(n)+" ") {
		if time.Now().After(deadline) {
			t.Fatalf("not %d inhibitors within 10s: %s", n, b.Status())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// connect is a private godbus connection that has authenticated and said
// Hello, as dbus.SystemBus makes one.
func connect(t *testing.T, b *Bus) *dbus.Conn {
	t.Helper()
	conn, err := dbus.Connect(b.Address())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// raw is a client that speaks bytes: for what godbus would never send.
type raw struct {
	t *testing.T
	*net.UnixConn
	r *bufio.Reader
}

func dialRaw(t *testing.T, b *Bus) *raw {
	t.Helper()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: b.path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// Every read of a test is bounded.
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	return &raw{t, c, bufio.NewReader(c)}
}

func (c *raw) send(s string) {
	c.t.Helper()
	if _, err := c.Write([]byte(s)); err != nil {
		c.t.Fatal(err)
	}
}

func (c *raw) line() string {
	c.t.Helper()
	l, err := c.r.ReadString('\n')
	if err != nil {
		c.t.Fatalf("reading a line: %v", err)
	}
	return strings.TrimSuffix(l, "\r\n")
}

// auth authenticates as godbus does, with fd passing.
func (c *raw) auth() {
	c.t.Helper()
	c.send("\x00AUTH EXTERNAL " + hexID(strconv.Itoa(os.Getuid())) + "\r\nNEGOTIATE_UNIX_FD\r\nBEGIN\r\n")
	if l := c.line(); !strings.HasPrefix(l, "OK ") {
		c.t.Fatalf("auth: %q", l)
	}
	if l := c.line(); l != "AGREE_UNIX_FD" {
		c.t.Fatalf("negotiate: %q", l)
	}
}

// call sends a method call with the given serial.
func (c *raw) call(serial uint32, dest string, path dbus.ObjectPath, iface, member string, body ...any) {
	c.t.Helper()
	c.send(string(encodeCall(c.t, serial, dest, path, iface, member, body...)))
}

func encodeCall(t testing.TB, serial uint32, dest string, path dbus.ObjectPath, iface, member string, body ...any) []byte {
	t.Helper()
	m := wire.WithBody(&dbus.Message{Type: dbus.TypeMethodCall, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldDestination: dbus.MakeVariant(dest),
		dbus.FieldPath:        dbus.MakeVariant(path),
		dbus.FieldMember:      dbus.MakeVariant(member),
	}}, body...)
	if iface != "" {
		m.Headers[dbus.FieldInterface] = dbus.MakeVariant(iface)
	}
	data, _, err := wire.Encode(m, serial)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// message reads the next message.
func (c *raw) message() *dbus.Message {
	c.t.Helper()
	b, err := wire.ReadMessage(c.r)
	if err != nil {
		c.t.Fatalf("reading a message: %v", err)
	}
	m, err := wire.Decode(b)
	if err != nil {
		c.t.Fatal(err)
	}
	return m
}

// hello says Hello and reads the reply and NameAcquired.
func (c *raw) hello() string {
	c.t.Helper()
	c.call(1, service.BusName, service.BusPath, service.BusName, "Hello")
	reply := c.message()
	name, _ := reply.Body[0].(string)
	if acquired := c.message(); wire.Header(acquired, dbus.FieldMember) != "NameAcquired" || acquired.Body[0] != name ||
		wire.Header(acquired, dbus.FieldDestination) != name {
		c.t.Fatalf("after Hello: %v", acquired)
	}
	return name
}

// closedByServer waits (bounded by the read deadline) until the server
// closes the connection, reading whatever comes before.
func (c *raw) closedByServer() {
	c.t.Helper()
	_, err := io.Copy(io.Discard, c.r)
	if err != nil && !errors.Is(err, unix.ECONNRESET) {
		c.t.Fatalf("waiting for the server to close the connection: %v", err)
	}
}

// busGoroutines returns the stacks of the goroutines running the bus's
// code.
func busGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var found []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "nodeinit/bus.(*") || strings.Contains(g, "nodeinit/logind.(*") {
			found = append(found, g)
		}
	}
	return found
}

func TestAddressIsTheSocketForDBUS_SYSTEM_BUS_ADDRESS(t *testing.T) {
	b := listen(t, testOptions{})
	if want := "unix:path=" + b.path; b.Address() != want {
		t.Errorf("Address() = %q, want %q", b.Address(), want)
	}
	fi, err := os.Stat(b.path)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Mode().Type() != os.ModeSocket {
		t.Errorf("socket %v, %v; want a socket of mode 0600", fi.Mode(), err)
	}
}

func TestListenReplacesAStaleSocketButNoOtherFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bus")
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	b, err := Listen(path, Options{})
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	b.Close()

	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(file, Options{}); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("over a regular file: %v, want an error", err)
	}
}

func TestUnexpectedCallsGetADBusErrorAndTheConnectionStays(t *testing.T) {
	b := listen(t, testOptions{})
	conn := connect(t, b)
	logind := conn.Object(logindName, logindPath)
	for _, tc := range []struct {
		name    string
		obj     dbus.BusObject
		method  string
		args    []any
		errName string
	}{
		{"logind's PowerOff", logind, managerIface + ".PowerOff", []any{false}, service.UnknownMethod},
		{"Inhibit with three arguments", logind, managerIface + ".Inhibit", []any{"shutdown", "me", "why"}, service.InvalidArgs},
		{"Inhibit sleep", logind, managerIface + ".Inhibit", []any{"sleep", "me", "why", "delay"}, service.NotSupported},
		{"Inhibit shutdown and sleep", logind, managerIface + ".Inhibit", []any{"shutdown:sleep", "me", "why", "delay"}, service.NotSupported},
		{"Inhibit block", logind, managerIface + ".Inhibit", []any{"shutdown", "me", "why", "block"}, service.NotSupported},
		{"Inhibit nonsense", logind, managerIface + ".Inhibit", []any{"reboot", "me", "why", "delay"}, service.InvalidArgs},
		{"Inhibit in an unknown mode", logind, managerIface + ".Inhibit", []any{"shutdown", "me", "why", "later"}, service.InvalidArgs},
		{"another property", logind, service.PropertiesIface + ".Get", []any{managerIface, "IdleHint"}, service.UnknownProperty},
		{"another interface's property", logind, service.PropertiesIface + ".Get", []any{"org.freedesktop.login1.Session", "Id"}, service.UnknownInterface},
		{"Set", logind, service.PropertiesIface + ".Set", []any{managerIface, "InhibitDelayMaxUSec", dbus.MakeVariant(uint64(1))}, service.PropertyReadOnly},
		{"another object", conn.Object(logindName, "/org/freedesktop/login1/session/self"), service.PropertiesIface + ".Get", []any{"org.freedesktop.login1.Session", "Id"}, service.UnknownObject},
		{"another service", conn.Object("org.example.Nobody", "/"), "org.example.Nobody.Hi", nil, errServiceUnknown},
		{"systemd", conn.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1"), "org.freedesktop.systemd1.Manager.KillUnit", []any{"containerd.service", "all", int32(1)}, errNoSuchUnit},
		{"a second Hello", conn.BusObject(), service.BusName + ".Hello", nil, service.Failed},
		{"a bus method it does not offer", conn.BusObject(), service.BusName + ".UpdateActivationEnvironment", []any{map[string]string{}}, service.UnknownMethod},
		{"another bus interface", conn.BusObject(), "org.freedesktop.DBus.Monitoring.BecomeMonitor", []any{[]string{}, uint32(0)}, service.UnknownMethod},
		{"an invalid match rule", conn.BusObject(), service.BusName + ".AddMatch", []any{"type='bogus'"}, errMatchRuleInvalid},
		{"AddMatch without a rule", conn.BusObject(), service.BusName + ".AddMatch", []any{int32(1)}, service.InvalidArgs},
		{"removing a rule never added", conn.BusObject(), service.BusName + ".RemoveMatch", []any{"member='Nothing'"}, errMatchRuleNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.obj.Call(tc.method, 0, tc.args...).Err
			if got := dbusErrorName(err); got != tc.errName {
				t.Errorf("%s: %v (%s), want %s", tc.method, err, got, tc.errName)
			}
		})
	}
	if _, err := (kubelet{conn}).currentInhibitDelay(); err != nil {
		t.Errorf("the connection does not work after the errors: %v", err)
	}
	// A rule added can be removed, once.
	rule := []dbus.MatchOption{dbus.WithMatchMember("PrepareForShutdown")}
	if err := conn.AddMatchSignal(rule...); err != nil {
		t.Fatal(err)
	}
	if err := conn.RemoveMatchSignal(rule...); err != nil {
		t.Errorf("RemoveMatch of an added rule: %v", err)
	}
	if err := conn.RemoveMatchSignal(rule...); dbusErrorName(err) != errMatchRuleNotFound {
		t.Errorf("RemoveMatch twice: %v", err)
	}
}

func TestInhibitNeedsFDPassing(t *testing.T) {
	b := listen(t, testOptions{})
	c := dialRaw(t, b)
	c.send("\x00AUTH EXTERNAL\r\nDATA\r\nBEGIN\r\n")
	if l := c.line(); l != "DATA" {
		t.Fatal(l)
	}
	if l := c.line(); !strings.HasPrefix(l, "OK ") {
		t.Fatal(l)
	}
	c.hello()
	c.call(2, logindName, logindPath, managerIface, "Inhibit", "shutdown", "me", "test", "delay")
	if m := c.message(); m.Type != dbus.TypeError || wire.Header(m, dbus.FieldErrorName) != service.NotSupported {
		t.Errorf("Inhibit without fd passing: %v", m)
	}
	if s := b.Status(); !strings.Contains(s, "inhibitors=0") {
		t.Errorf("status: %s", s)
	}
}

func TestGarbageEndsOnlyThatConnection(t *testing.T) {
	b := listen(t, testOptions{})
	auth := "\x00AUTH EXTERNAL " + hexID(strconv.Itoa(os.Getuid())) + "\r\nBEGIN\r\n"
	big := make([]byte, 16)
	copy(big, "l\x01\x00\x01")
	binary.LittleEndian.PutUint32(big[4:], 1<<30) // a body of 1 GiB
	for name, input := range map[string]string{
		"HTTP instead of D-Bus":     "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"a message without auth":    string(encodeCall(t, 1, service.BusName, service.BusPath, service.BusName, "Hello")),
		"a wrong byte order":        auth + strings.Repeat("x", 64),
		"protocol version 2":        auth + "l\x01\x00\x02" + strings.Repeat("\x00", 60),
		"a message of 1 GiB":        auth + string(big),
		"a header that lies":        auth + "l\x01\x00\x01\x00\x00\x00\x00\x01\x00\x00\x00\x08\x00\x00\x00" + strings.Repeat("\xff", 8),
		"a call before Hello":       auth + string(encodeCall(t, 1, logindName, logindPath, managerIface, "Inhibit", "shutdown", "a", "b", "delay")),
		"a string that claims 3GiB": auth + string(withHugeString(t)),
	} {
		t.Run(name, func(t *testing.T) {
			c := dialRaw(t, b)
			c.send(input)
			c.closedByServer()
		})
	}
	// The bus still serves.
	if _, err := (kubelet{connect(t, b)}).currentInhibitDelay(); err != nil {
		t.Error(err)
	}
}

// withHugeString is a Hello whose string argument claims 3 GiB: godbus
// v5.1 would allocate all of it before finding the message short.
func withHugeString(t *testing.T) []byte {
	m := encodeCall(t, 1, service.BusName, service.BusPath, service.BusName, "Hello", "abcd")
	binary.LittleEndian.PutUint32(m[len(m)-9:], 3<<30)
	return m
}

func TestAHugeStringIsNotAllocated(t *testing.T) {
	m := withHugeString(t)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := wire.Decode(m)
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatal("decoded a message whose string is longer than the message")
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Errorf("decoding a %d-byte message allocated %d bytes", len(m), n)
	}
}

func TestAHandshakeThatNeverEndsIsDropped(t *testing.T) {
	b := listen(t, testOptions{}, func(tun *tunables) { tun.helloTimeout = 100 * time.Millisecond })
	c := dialRaw(t, b)
	c.send("\x00AUTH\r\n")
	if l := c.line(); l != "REJECTED EXTERNAL" {
		t.Fatal(l)
	}
	c.closedByServer()
}

func TestAClientThatDoesNotReadIsDropped(t *testing.T) {
	b := listen(t, testOptions{}, func(tun *tunables) { tun.writeTimeout = 500 * time.Millisecond })
	c := dialRaw(t, b)
	c.auth()
	c.hello()
	// Calls whose replies are never read: the socket's buffers fill, then
	// the bus's queue; the bus stops reading, its write times out, it drops
	// the connection, and the writes here fail.
	get := encodeCall(t, 2, logindName, logindPath, service.PropertiesIface, "Get", managerIface, "InhibitDelayMaxUSec")
	if err := c.SetWriteDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if _, err := c.Write(get); err != nil {
			if !errors.Is(err, unix.EPIPE) && !errors.Is(err, unix.ECONNRESET) {
				t.Fatalf("after %d calls: %v, want the connection dropped", i, err)
			}
			break
		}
	}
	if _, err := (kubelet{connect(t, b)}).currentInhibitDelay(); err != nil {
		t.Errorf("the bus does not serve others: %v", err)
	}
}

func TestPrepareForShutdownWithoutInhibitorsIsDrainedAtOnce(t *testing.T) {
	b := listen(t, testOptions{})
	k := kubelet{connect(t, b)}
	events, err := k.monitorShutdown()
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-loginOf(b).PrepareForShutdown():
	default:
		t.Fatal("not drained at once with no inhibitor held")
	}
	select {
	case sig := <-events:
		if sig.Body[0] != true {
			t.Errorf("signal %v", sig)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no PrepareForShutdown within 10s")
	}
}

func TestPrepareForShutdownGoesOnlyWhereAMatchRuleWantsIt(t *testing.T) {
	b := listen(t, testOptions{})
	watching, other := dialRaw(t, b), dialRaw(t, b)
	for _, c := range []*raw{watching, other} {
		c.auth()
		c.hello()
	}
	watching.call(2, service.BusName, service.BusPath, service.BusName, "AddMatch", "type='signal',member='PrepareForShutdown'")
	other.call(2, service.BusName, service.BusPath, service.BusName, "AddMatch", "type='signal',member='PrepareForSleep'")
	for _, c := range []*raw{watching, other} {
		if m := c.message(); m.Type != dbus.TypeMethodReply {
			t.Fatalf("AddMatch: %v", m)
		}
	}
	loginOf(b).PrepareForShutdown()
	if m := watching.message(); wire.Header(m, dbus.FieldMember) != "PrepareForShutdown" {
		t.Errorf("got %v", m)
	}
	// The other connection gets nothing: its next message is the reply to
	// a call made after the signal went out.
	other.call(3, logindName, logindPath, service.PropertiesIface, "Get", managerIface, "InhibitDelayMaxUSec")
	if m := other.message(); m.Type != dbus.TypeMethodReply || m.Headers[dbus.FieldReplySerial].Value() != uint32(3) {
		t.Errorf("the connection without a rule for it got %v", m)
	}
}

func TestDrainedOnlyWhenBothInhibitorsAreReleased(t *testing.T) {
	b := listen(t, testOptions{})
	var fds []uint32
	for range 2 {
		fd, err := (kubelet{connect(t, b)}).inhibitShutdown()
		if err != nil {
			t.Fatal(err)
		}
		fds = append(fds, fd)
	}
	if s := b.Status(); !strings.Contains(s, "connections=2 inhibitors=2") {
		t.Errorf("status: %s", s)
	}
	drained := loginOf(b).PrepareForShutdown()
	syscall.Close(int(fds[0]))
	waitInhibitors(t, b, 1)
	select {
	case <-drained:
		t.Fatal("drained with one inhibitor still held")
	default:
	}
	if s := b.Status(); !strings.Contains(s, "inhibitors=1 ") {
		t.Errorf("status after one release: %s", s)
	}
	syscall.Close(int(fds[1]))
	waitFor(t, drained, "drained after the second release")
}

// An inhibitor outlives the connection it was taken on, as a logind lock
// does: it is the fd that holds it.
func TestAnInhibitorOutlivesItsConnection(t *testing.T) {
	b := listen(t, testOptions{})
	conn := connect(t, b)
	fd, err := (kubelet{conn}).inhibitShutdown()
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	drained := loginOf(b).PrepareForShutdown()
	select {
	case <-drained:
		t.Fatal("drained while the fd is open")
	default:
	}
	syscall.Close(int(fd))
	waitFor(t, drained, "drained")
}

func TestCloseIsPromptAndLeavesNoGoroutine(t *testing.T) {
	b, err := Listen(filepath.Join(t.TempDir(), "bus"), Options{}, newLogind(testOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.AdmitExecutor(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	conns := []*dbus.Conn{connect(t, b), connect(t, b)}
	fd, err := (kubelet{conns[0]}).inhibitShutdown()
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(int(fd))
	half := dialRaw(t, b) // stopped in the middle of its handshake
	half.send("\x00AUTH\r\n")
	half.line()
	dialRaw(t, b) // connected, silent
	drained := loginOf(b).PrepareForShutdown()

	if g := busGoroutines(); len(g) < 7 {
		t.Errorf("%d goroutines of the bus before Close; want at least 7 (accept, 3 readers, 2 writers, 1 inhibitor)", len(g))
	}
	start := time.Now()
	if err := b.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if d := time.Since(start); d > closeWait {
		t.Errorf("Close took %v", d)
	}
	// Close has waited for every goroutine's deferred Done; one may still be
	// between that and its exit, which needs nothing but the CPU. Yield to
	// it, a bounded number of times.
	g := busGoroutines()
	for i := 0; i < 1000 && len(g) > 0; i++ {
		runtime.Gosched()
		g = busGoroutines()
	}
	if len(g) != 0 {
		t.Errorf("%d goroutines of the bus left after Close:\n%s", len(g), strings.Join(g, "\n\n"))
	}
	waitFor(t, drained, "drained after Close")
	for _, c := range conns {
		waitFor(t, c.Context().Done(), "a client disconnected by Close")
	}
	if _, err := os.Stat(b.path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket is still there after Close: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
	if s := b.Status(); !strings.HasPrefix(s, "connections=0 inhibitors=0") {
		t.Errorf("status after Close: %s", s)
	}
}

// waitFor waits, at most 10s, for ch to yield or close.
func waitFor[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not within 10s", what)
	}
}
