package bus

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/bus/internal/wire"
	"github.com/nodeinit/nodeinit/bus/service"
	"github.com/nodeinit/nodeinit/bus/upstream"
	"github.com/nodeinit/nodeinit/internal/linux"
	"github.com/nodeinit/nodeinit/logind"
	"github.com/nodeinit/nodeinit/test/testenv"
)

// systemBus is a real dbus-daemon with the system bus's policy, where the
// test's services may be owned and called.
func systemBus(t *testing.T) (address string, stop func()) {
	t.Helper()
	return testenv.SystemBus(t, "org.example.Echo", "org.freedesktop.systemd1")
}

// echo is a service on the system bus: it answers calls, passes
// descriptors both ways, and sends a signal.
type echo struct{ conn *dbus.Conn }

func (echo) Echo(s string) (string, *dbus.Error) { return "echo " + s, nil }

// Swap writes into the pipe it gets and answers with another pipe's read
// end, with "from the service" in it.
func (echo) Swap(w dbus.UnixFD) (dbus.UnixFD, *dbus.Error) {
	_, _ = unix.Write(int(w), []byte("to the service"))
	unix.Close(int(w))
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return 0, dbus.MakeFailedError(err)
	}
	_, _ = unix.Write(p[1], []byte("from the service"))
	unix.Close(p[1])
	return dbus.UnixFD(p[0]), nil
}

// Sender answers with the caller's unique name on the system bus.
func (echo) Sender(sender dbus.Sender) (string, *dbus.Error) { return string(sender), nil }

// Big answers with n bytes.
func (echo) Big(n uint32) (string, *dbus.Error) { return strings.Repeat("x", int(n)), nil }

func (e echo) Ping() *dbus.Error {
	if err := e.conn.Emit("/org/example/Echo", "org.example.Echo.Pinged", "pong"); err != nil {
		return dbus.MakeFailedError(err)
	}
	return nil
}

// serveEcho registers org.example.Echo on the system bus at address, on a
// connection of its own.
func serveEcho(t *testing.T, address string) *dbus.Conn {
	t.Helper()
	conn, err := dbus.Connect(address)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.Export(echo{conn}, "/org/example/Echo", "org.example.Echo"); err != nil {
		t.Fatal(err)
	}
	if reply, err := conn.RequestName("org.example.Echo", dbus.NameFlagDoNotQueue); err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("RequestName: %v, %v", reply, err)
	}
	return conn
}

// A client on nodeinit's bus reaches the system bus through it: the bus's
// own ListNames and GetId, a service another connection registered there
// (with descriptors both ways), and its signals through a match rule;
// logind answers on the same connection.
func TestCallsForTheSystemBusPassThrough(t *testing.T) {
	address, stopSystemBus := systemBus(t)
	echo := serveEcho(t, address)
	direct, err := dbus.Connect(address)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()

	b := listen(t, testOptions{InhibitDelayMax: 90 * time.Second, Upstream: address})
	conn := connect(t, b)
	var names []string
	if err := conn.BusObject().Call(service.BusName+".ListNames", 0).Store(&names); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"org.example.Echo", echo.Names()[0], logindName, logindOwner} {
		if !slices.Contains(names, want) {
			t.Errorf("ListNames %q lacks %s", names, want)
		}
	}
	var id, directID, owner string
	must(t, conn.BusObject().Call(service.BusName+".GetId", 0).Store(&id))
	must(t, direct.BusObject().Call(service.BusName+".GetId", 0).Store(&directID))
	if id != directID {
		t.Errorf("GetId = %s, the system bus's is %s", id, directID)
	}
	must(t, conn.BusObject().Call(service.BusName+".GetNameOwner", 0, "org.example.Echo").Store(&owner))
	if owner != echo.Names()[0] {
		t.Errorf("GetNameOwner(org.example.Echo) = %s, want %s", owner, echo.Names()[0])
	}
	must(t, conn.BusObject().Call(service.BusName+".GetNameOwner", 0, logindName).Store(&owner))
	if owner != logindOwner {
		t.Errorf("GetNameOwner(login1) = %s, want %s", owner, logindOwner)
	}

	var uid uint32
	if err := conn.BusObject().Call(service.BusName+".GetConnectionUnixUser", 0, echo.Names()[0]).Store(&uid); err != nil || int(uid) != os.Getuid() {
		t.Errorf("GetConnectionUnixUser of the service = %d, %v", uid, err)
	}
	// What would change the system bus is not passed on as nodeinit's.
	if err := conn.BusObject().Call(service.BusName+".UpdateActivationEnvironment", 0, map[string]string{"X": "1"}).Err; dbusErrorName(err) != service.UnknownMethod {
		t.Errorf("UpdateActivationEnvironment: %v, want %s", err, service.UnknownMethod)
	}

	obj := conn.Object("org.example.Echo", "/org/example/Echo")
	var s string
	if err := obj.Call("org.example.Echo.Echo", 0, "hi").Store(&s); err != nil || s != "echo hi" {
		t.Errorf("Echo = %q, %v", s, err)
	}
	var p [2]int
	must(t, unix.Pipe2(p[:], unix.O_CLOEXEC))
	defer unix.Close(p[0])
	var back dbus.UnixFD
	if err := obj.Call("org.example.Echo.Swap", 0, dbus.UnixFD(p[1])).Store(&back); err != nil {
		t.Fatalf("Swap: %v", err)
	}
	unix.Close(p[1])
	for fd, want := range map[int]string{p[0]: "to the service", int(back): "from the service"} {
		buf := make([]byte, 64)
		n, _ := unix.Read(fd, buf)
		if string(buf[:n]) != want {
			t.Errorf("read %q from a passed descriptor, want %q", buf[:n], want)
		}
	}
	unix.Close(int(back))

	must(t, conn.AddMatchSignal(dbus.WithMatchInterface("org.example.Echo"), dbus.WithMatchMember("Pinged")))
	signals := make(chan *dbus.Signal, 4)
	conn.Signal(signals)
	must(t, obj.Call("org.example.Echo.Ping", 0).Err)
	select {
	case sig := <-signals:
		if sig.Name != "org.example.Echo.Pinged" || sig.Sender != echo.Names()[0] || len(sig.Body) != 1 || sig.Body[0] != "pong" {
			t.Errorf("signal %+v", sig)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no signal from the service within 10s")
	}

	// logind on the same connection.
	k := kubelet{conn}
	if d, err := k.currentInhibitDelay(); err != nil || d != 90*time.Second {
		t.Errorf("InhibitDelayMaxUSec = %v, %v", d, err)
	}
	fd, err := k.inhibitShutdown()
	if err != nil {
		t.Fatal(err)
	}

	// The system bus goes away: the pass-through ends, and the client's
	// connection is closed, so that its library connects again; logind
	// answers the next connection, and the lock taken holds.
	drained := loginOf(b).PrepareForShutdown()
	stopSystemBus()
	waitFor(t, conn.Context().Done(), "the client's connection closed once its pass-through ended")
	again := kubelet{connect(t, b)}
	if d, err := again.currentInhibitDelay(); err != nil || d != 90*time.Second {
		t.Errorf("logind after the system bus stopped: %v, %v", d, err)
	}
	select {
	case <-drained:
		t.Error("the lock was released when the pass-through ended")
	default:
	}
	syscall.Close(int(fd))
	waitFor(t, drained, "the lock released")
}

// Without a system bus the calls for it get what a bus without those
// names answers.
func TestWithoutASystemBusCallsForItFail(t *testing.T) {
	b := listen(t, testOptions{Upstream: "unix:path=" + filepath.Join(t.TempDir(), "none")})
	conn := connect(t, b)
	if err := conn.Object("org.example.Echo", "/").Call("org.example.Echo.Echo", 0, "hi").Err; dbusErrorName(err) != errServiceUnknown {
		t.Errorf("Echo: %v", err)
	}
	if d, err := (kubelet{conn}).currentInhibitDelay(); err != nil || d != logind.DefaultInhibitDelayMax {
		t.Errorf("InhibitDelayMaxUSec = %v, %v", d, err)
	}
}

// The round trip of a call through the pass-through against the same call
// straight to dbus-daemon: one more hop through nodeinit, decoded and
// encoded twice, and no waiting of its own (a pass-through that waited
// on a timer or a poll interval would be many times slower).
func TestAPassedThroughCallCostsOneMoreHop(t *testing.T) {
	address, _ := systemBus(t)
	serveEcho(t, address)
	b := listen(t, testOptions{Upstream: address})
	through := connect(t, b)
	direct, err := dbus.Connect(address)
	must(t, err)
	defer direct.Close()
	// The two alternate, call by call, so that whatever else the machine
	// does weighs on both alike.
	const n = 500
	objs := []dbus.BusObject{direct.Object("org.example.Echo", "/org/example/Echo"), through.Object("org.example.Echo", "/org/example/Echo")}
	var took [2]time.Duration
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range n + 1 {
		for j, obj := range objs {
			start := time.Now()
			must(t, obj.CallWithContext(ctx, "org.example.Echo.Echo", 0, "x").Err)
			if i > 0 { // the first is the warm-up
				took[j] += time.Since(start)
			}
		}
	}
	d, p := took[0]/n, took[1]/n
	ratio := float64(p) / float64(d)
	t.Logf("a call's round trip: %v straight to dbus-daemon, %v through nodeinit's bus (%.2fx)", d, p, ratio)
	if ratio > 10 {
		t.Errorf("a call through the pass-through takes %.1f times as long as one straight to dbus-daemon", ratio)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// neighbourSignal sends, from conn, a signal addressed to dest.
func neighbourSignal(t *testing.T, conn *dbus.Conn, dest string, iface, member string, body ...any) {
	t.Helper()
	m := wire.WithBody(&dbus.Message{Type: dbus.TypeSignal, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldDestination: dbus.MakeVariant(dest),
		dbus.FieldPath:        dbus.MakeVariant(dbus.ObjectPath("/org/example/Neighbour")),
		dbus.FieldInterface:   dbus.MakeVariant(iface),
		dbus.FieldMember:      dbus.MakeVariant(member),
	}}, body...)
	if call := conn.Send(m, nil); call.Err != nil {
		t.Fatalf("sending %s to %s: %v", member, dest, call.Err)
	}
}

// Anyone on the system bus may send a signal to any connection there (the
// stock policy allows signals up to the bus's message size), among them
// the pass-through's. A neighbour's signal larger than a client's queue,
// and signals the client has no match rule for, are dropped and logged
// once; the client's long-lived connection (the kubelet's systemd cgroup
// driver keeps one) goes on working, and gets none of them.
func TestANeighboursSignalsDoNotEndThePassThrough(t *testing.T) {
	logs := testenv.CaptureLog(t)
	address, stopSystemBus := systemBus(t)
	serveEcho(t, address)
	b := listen(t, testOptions{Upstream: address})
	client := connect(t, b)
	signals := make(chan *dbus.Signal, 16)
	client.Signal(signals)
	must(t, client.AddMatchSignal(dbus.WithMatchInterface("org.example.Echo"), dbus.WithMatchMember("Pinged")))
	echo := client.Object("org.example.Echo", "/org/example/Echo")
	var s string
	must(t, echo.Call("org.example.Echo.Echo", 0, "before").Store(&s))

	neighbour, err := dbus.Connect(address)
	must(t, err)
	defer neighbour.Close()
	var names []string
	must(t, neighbour.BusObject().Call(service.BusName+".ListNames", 0).Store(&names))
	huge := strings.Repeat("x", 300<<10)
	sent := 0
	for _, name := range names {
		if !strings.HasPrefix(name, ":") || name == neighbour.Names()[0] {
			continue
		}
		neighbourSignal(t, neighbour, name, "org.example.Neighbour", "Huge", huge)
		neighbourSignal(t, neighbour, name, "org.example.Neighbour", "Small", "unasked")
		sent++
	}
	// A round trip to the bus: it has passed the signals on before it
	// answers.
	must(t, neighbour.BusObject().Call(service.BusName+".GetId", 0).Store(&s))

	for i := range 3 {
		if err := echo.Call("org.example.Echo.Echo", 0, "after").Store(&s); err != nil || s != "echo after" {
			t.Fatalf("Echo %d after the neighbour's signals: %q, %v", i, s, err)
		}
	}
	// A signal the client asked for still comes, and nothing else but
	// this bus's NameAcquired for the client.
	must(t, echo.Call("org.example.Echo.Ping", 0).Err)
	deadline := time.After(10 * time.Second)
	for pinged := false; !pinged; {
		select {
		case sig := <-signals:
			switch {
			case sig.Name == "org.example.Echo.Pinged":
				pinged = true
			case sig.Sender != service.BusName:
				t.Errorf("the client got %s from %s", sig.Name, sig.Sender)
			}
		case <-deadline:
			t.Fatal("no Pinged within 10s")
		}
	}
	dropped := logs.Lines("Dropped a message from the system bus")
	t.Logf("the neighbour sent its signals to %d unique names; %d lines at Info for the drops", sent, len(dropped))
	if len(dropped) != 1 || !strings.Contains(dropped[0], "larger than") {
		t.Errorf("log of the drops: %q", dropped)
	}
	// Each unique name got two signals, the pass-through's among them:
	// its end, when the system bus goes away, counts them.
	stopSystemBus()
	logs.WaitFor(t, "The pass-through to the system bus ended")
	if ended := logs.Lines("The pass-through to the system bus ended"); len(ended) != 1 || !strings.Contains(ended[0], " dropped=2 ") {
		t.Errorf("the pass-through's end, with the messages it dropped (the neighbour's 2): %q", ended)
	}
}

// The kubelet's graceful-shutdown connection needs nothing of the system
// bus: its match rule is for logind's signal, which only this bus sends,
// so it opens no pass-through, and a system bus that restarts cannot end
// that connection.
func TestTheKubeletsShutdownConnectionOpensNoPassThrough(t *testing.T) {
	address, _ := systemBus(t)
	b := listen(t, testOptions{Upstream: address})
	k := kubelet{connect(t, b)}
	if _, err := k.currentInhibitDelay(); err != nil {
		t.Fatal(err)
	}
	fd, err := k.inhibitShutdown()
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(int(fd))
	if _, err := k.monitorShutdown(); err != nil {
		t.Fatal(err)
	}
	must(t, k.conn.AddMatchSignal(dbus.WithMatchSender(logindName), dbus.WithMatchMember("PrepareForShutdown")))
	b.mu.Lock()
	defer b.mu.Unlock()
	for c := range b.conns {
		c.px.mu.Lock()
		if c.px.up != nil {
			t.Errorf("%s has a pass-through", c.name)
		}
		c.px.mu.Unlock()
	}
	for rule, want := range map[string]bool{
		"type='signal',interface='org.freedesktop.login1.Manager',member='PrepareForShutdown',path='/org/freedesktop/login1'": false,
		"type='signal',sender='org.freedesktop.login1'":                                                                       false,
		"type='signal',path_namespace='/org/freedesktop/login1/session'":                                                      false,
		"type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged',arg0='org.freedesktop.login1'":                 false,
		"type='signal',sender=':nodeinit.0'":                                                                                  false,
		"type='signal',interface='org.freedesktop.systemd1.Manager',member='JobRemoved'":                                      true,
		"type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged',arg0='org.freedesktop.systemd1'":               true,
		"type='signal',path_namespace='/org'":                                                                                 true,
	} {
		r, err := parseMatchRule(rule)
		if err != nil || b.upstreamMayMatch(r) != want {
			t.Errorf("%s: goes up %v, %v; want %v", rule, b.upstreamMayMatch(r), err, want)
		}
	}
}

// AddMatch is answered once the rule holds on the system bus too, as a bus
// answers it once the rule is in place: a signal sent there right after
// the answer reaches the client. go-systemd adds its JobRemoved rule on
// one connection and starts the job on another.
func TestARuleHoldsUpstreamWhenAddMatchIsAnswered(t *testing.T) {
	address, _ := systemBus(t)
	echo := serveEcho(t, address)
	b := listen(t, testOptions{Upstream: address})
	for i := range 10 {
		conn := connect(t, b)
		signals := make(chan *dbus.Signal, 4)
		conn.Signal(signals)
		must(t, conn.AddMatchSignal(dbus.WithMatchInterface("org.example.Echo"), dbus.WithMatchMember("Pinged")))
		must(t, echo.Emit("/org/example/Echo", "org.example.Echo.Pinged", "now"))
		deadline := time.After(2 * time.Second)
	wait:
		for {
			select {
			case sig := <-signals:
				if sig.Name == "org.example.Echo.Pinged" {
					break wait
				}
			case <-deadline:
				t.Fatalf("connection %d: no Pinged sent right after AddMatch was answered", i)
			}
		}
		conn.Close()
	}
}

// A reply too large to pass on is answered with LimitsExceeded, so that the
// call does not wait for ever; the pass-through goes on.
func TestAReplyTooLargeToPassOnIsAnError(t *testing.T) {
	address, _ := systemBus(t)
	serveEcho(t, address)
	b := listen(t, testOptions{Upstream: address})
	conn := connect(t, b)
	echo := conn.Object("org.example.Echo", "/org/example/Echo")
	call := func(method string, args ...any) *dbus.Call {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return echo.CallWithContext(ctx, "org.example.Echo."+method, 0, args...)
	}
	var s string
	if err := call("Big", uint32(maxUpstreamMessage-1024)).Store(&s); err != nil || len(s) != maxUpstreamMessage-1024 {
		t.Errorf("a reply within the limit: %d bytes, %v", len(s), err)
	}
	if err := call("Big", uint32(300<<10)).Err; dbusErrorName(err) != service.LimitsExceeded {
		t.Errorf("a reply of 300 KiB: %v, want %s", err, service.LimitsExceeded)
	}
	if err := call("Echo", "after").Store(&s); err != nil || s != "echo after" {
		t.Errorf("Echo after: %.40q, %v", s, err)
	}
}

// sd-bus (busctl, systemctl's library) reaches a service of the system bus
// through the pass-through, and reads its unique name here.
func TestSdBusCallsThroughThePassThrough(t *testing.T) {
	busctl := testenv.RequireTool(t, "busctl")
	address, _ := systemBus(t)
	serveEcho(t, address)
	b := listen(t, testOptions{Upstream: address})
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, busctl, append([]string{"--system"}, args...)...)
		cmd.Env = append(os.Environ(), "DBUS_SYSTEM_BUS_ADDRESS="+b.Address())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("busctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if out := run("call", "org.example.Echo", "/org/example/Echo", "org.example.Echo", "Echo", "s", "hi"); out != "s \"echo hi\"\n" {
		t.Errorf("busctl call: %q", out)
	}
	if out := run("call", service.BusName, string(service.BusPath), service.BusName, "GetNameOwner", "s", logindName); out != "s \""+logindOwner+"\"\n" {
		t.Errorf("busctl GetNameOwner(login1): %q", out)
	}
}

// upstreamName is the unique name on the system bus of client's
// pass-through, as the echo service there sees its caller.
func upstreamName(t *testing.T, client *dbus.Conn) string {
	t.Helper()
	var name string
	must(t, client.Object("org.example.Echo", "/org/example/Echo").Call("org.example.Echo.Sender", 0).Store(&name))
	return name
}

// rawNeighbour is a connection to the system bus at address that writes
// its messages itself: godbus gives up on a message with descriptors that
// the socket does not take in one write.
type rawNeighbour struct {
	nc  *net.UnixConn
	raw syscall.RawConn
}

func dialRawNeighbour(t *testing.T, address string) *rawNeighbour {
	t.Helper()
	path, err := upstream.UnixSocket(address)
	must(t, err)
	nc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	must(t, err)
	t.Cleanup(func() { nc.Close() })
	raw, err := nc.SyscallConn()
	must(t, err)
	hello := encodeCall(t, 1, service.BusName, service.BusPath, service.BusName, "Hello")
	_, err = nc.Write(append([]byte("\x00AUTH EXTERNAL "+hexID(strconv.Itoa(os.Getuid()))+"\r\nNEGOTIATE_UNIX_FD\r\nBEGIN\r\n"), hello...))
	must(t, err)
	// The bus takes descriptors only once it has read BEGIN: wait for
	// Hello's answer. What comes after is never read: a socket buffer
	// holds it.
	must(t, nc.SetReadDeadline(time.Now().Add(10*time.Second)))
	r := bufio.NewReader(nc)
	for range 2 {
		_, err := r.ReadString('\n')
		must(t, err)
	}
	_, err = wire.ReadMessage(r)
	must(t, err)
	return &rawNeighbour{nc, raw}
}

// signal sends a signal to dest with body, passing the descriptors its
// UnixFD values name.
func (n *rawNeighbour) signal(t *testing.T, serial uint32, dest string, body ...any) {
	t.Helper()
	m := wire.WithBody(&dbus.Message{Type: dbus.TypeSignal, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldDestination: dbus.MakeVariant(dest),
		dbus.FieldPath:        dbus.MakeVariant(dbus.ObjectPath("/org/example/Neighbour")),
		dbus.FieldInterface:   dbus.MakeVariant("org.example.Neighbour"),
		dbus.FieldMember:      dbus.MakeVariant("WithFD"),
	}}, body...)
	data, fds, err := wire.Encode(m, serial)
	must(t, err)
	must(t, linux.SendAll(n.raw, data, fds))
}

// The descriptors a dropped message carries are closed: a neighbour's
// signal with a pipe's write end, too large or not asked for, leaves
// nodeinit holding nothing, and the pipe's reader sees its end.
func TestADroppedMessagesDescriptorsAreClosed(t *testing.T) {
	address, _ := systemBus(t)
	serveEcho(t, address)
	b := listen(t, testOptions{Upstream: address})
	client := connect(t, b)
	must(t, client.Object("org.example.Echo", "/org/example/Echo").Call("org.example.Echo.Echo", 0, "x").Err)
	dest := upstreamName(t, client)
	neighbour := dialRawNeighbour(t, address)
	for i, size := range []int{10, 300 << 10} {
		var p [2]int
		must(t, unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK)) // the reader in Go's poller
		r := os.NewFile(uintptr(p[0]), "r")
		neighbour.signal(t, uint32(i+2), dest, dbus.UnixFD(p[1]), strings.Repeat("x", size))
		unix.Close(p[1])
		must(t, r.SetReadDeadline(time.Now().Add(5*time.Second)))
		if _, err := r.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Errorf("a dropped signal of %d bytes with a descriptor: the pipe's reader got %v, want EOF", size, err)
		}
		r.Close()
	}
	// The pass-through goes on.
	must(t, client.Object("org.example.Echo", "/org/example/Echo").Call("org.example.Echo.Echo", 0, "x").Err)
}
