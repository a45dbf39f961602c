package logind

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// systemBusConfig is a system bus of the test's own: dbus-daemon's
// system-bus type and authentication, with a policy that lets the test's
// connections own and call anything.
const systemBusConfig = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
`

// systemBus runs a real dbus-daemon on a socket in a temporary directory
// and returns its address; it is stopped when the test ends, or earlier by
// calling stop.
func systemBus(t *testing.T) (address string, stop func()) {
	t.Helper()
	daemon := testenv.RequireTool(t, "dbus-daemon")
	dir := t.TempDir()
	conf := filepath.Join(dir, "system.conf")
	address = "unix:path=" + filepath.Join(dir, "system_bus_socket")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(systemBusConfig, address)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(daemon, "--config-file="+conf, "--nofork", "--nopidfile", "--nosyslog")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = cmd.Process.Kill() // ours, by pid
			<-exited
		})
	}
	t.Cleanup(stop)
	deadline := time.After(10 * time.Second)
	for {
		if c, err := dbus.Connect(address); err == nil {
			c.Close()
			return address, stop
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("dbus-daemon exited: %v", err)
		case <-deadline:
			t.Fatal("dbus-daemon did not answer within 10s")
		case <-time.After(20 * time.Millisecond):
		}
	}
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
	service := serveEcho(t, address)
	direct, err := dbus.Connect(address)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()

	b := listen(t, Options{InhibitDelayMax: 90 * time.Second, Upstream: address})
	conn := connect(t, b)
	var names []string
	if err := conn.BusObject().Call(busName+".ListNames", 0).Store(&names); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"org.example.Echo", service.Names()[0], logindName, logindOwner} {
		if !slices.Contains(names, want) {
			t.Errorf("ListNames %q lacks %s", names, want)
		}
	}
	var id, directID, owner string
	must(t, conn.BusObject().Call(busName+".GetId", 0).Store(&id))
	must(t, direct.BusObject().Call(busName+".GetId", 0).Store(&directID))
	if id != directID {
		t.Errorf("GetId = %s, the system bus's is %s", id, directID)
	}
	must(t, conn.BusObject().Call(busName+".GetNameOwner", 0, "org.example.Echo").Store(&owner))
	if owner != service.Names()[0] {
		t.Errorf("GetNameOwner(org.example.Echo) = %s, want %s", owner, service.Names()[0])
	}
	must(t, conn.BusObject().Call(busName+".GetNameOwner", 0, logindName).Store(&owner))
	if owner != logindOwner {
		t.Errorf("GetNameOwner(login1) = %s, want %s", owner, logindOwner)
	}

	var uid uint32
	if err := conn.BusObject().Call(busName+".GetConnectionUnixUser", 0, service.Names()[0]).Store(&uid); err != nil || int(uid) != os.Getuid() {
		t.Errorf("GetConnectionUnixUser of the service = %d, %v", uid, err)
	}
	// What would change the system bus is not passed on as nodeinit's.
	if err := conn.BusObject().Call(busName+".UpdateActivationEnvironment", 0, map[string]string{"X": "1"}).Err; dbusErrorName(err) != errUnknownMethod {
		t.Errorf("UpdateActivationEnvironment: %v, want %s", err, errUnknownMethod)
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
		if sig.Name != "org.example.Echo.Pinged" || sig.Sender != service.Names()[0] || len(sig.Body) != 1 || sig.Body[0] != "pong" {
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
	syscall.Close(int(fd))

	// The system bus goes away: only the pass-through ends.
	stopSystemBus()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := obj.Call("org.example.Echo.Echo", 0, "hi").Err
		if name := dbusErrorName(err); name == errServiceUnknown {
			break
		} else if name != errNoReply || time.Now().After(deadline) {
			t.Fatalf("Echo after the system bus stopped: %v, want %s", err, errServiceUnknown)
		}
	}
	if d, err := k.currentInhibitDelay(); err != nil || d != 90*time.Second {
		t.Errorf("logind after the system bus stopped: %v, %v", d, err)
	}
}

// Without a system bus the calls for it get what a bus without those
// names answers.
func TestWithoutASystemBusCallsForItFail(t *testing.T) {
	b := listen(t, Options{Upstream: "unix:path=" + filepath.Join(t.TempDir(), "none")})
	conn := connect(t, b)
	if err := conn.Object("org.example.Echo", "/").Call("org.example.Echo.Echo", 0, "hi").Err; dbusErrorName(err) != errServiceUnknown {
		t.Errorf("Echo: %v", err)
	}
	if d, err := (kubelet{conn}).currentInhibitDelay(); err != nil || d != DefaultInhibitDelayMax {
		t.Errorf("InhibitDelayMaxUSec = %v, %v", d, err)
	}
}

func TestUpstreamAddressIsTheEnvironmentsOrTheSocket(t *testing.T) {
	root := t.TempDir()
	socket := filepath.Join(root, SystemBusSocket)
	env := func(address string) func(string) string {
		return func(k string) string {
			if k == "DBUS_SYSTEM_BUS_ADDRESS" {
				return address
			}
			return ""
		}
	}
	check := func(what, address, want, wantErr string) {
		t.Helper()
		got, err := UpstreamAddress(env(address), root)
		if got != want || (err == nil) != (wantErr == "") || err != nil && !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%s: %q, %v; want %q, %q", what, got, err, want, wantErr)
		}
	}
	check("nothing", "", "", "DBUS_SYSTEM_BUS_ADDRESS is unset and there is no socket at "+socket)
	check("a variable naming no socket", "unix:path=/nonexistent", "", "there is no socket at /nonexistent")
	check("a tcp address", "tcp:host=localhost,port=1", "", "names no unix socket")
	must(t, os.MkdirAll(filepath.Dir(socket), 0o755))
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: socket, Net: "unix"})
	must(t, err)
	defer ln.Close()
	check("the socket", "", "unix:path="+socket, "")
	check("the variable", "unix:path="+socket+",guid=0", "unix:path="+socket+",guid=0", "")
	check("an abstract socket", "unix:abstract=bus%2d1", "unix:abstract=bus%2d1", "")
	if got, err := unixSocket("tcp:host=x;unix:abstract=bus%2d1,guid=00"); err != nil || got != "@bus-1" {
		t.Errorf("unixSocket = %q, %v", got, err)
	}
}

func TestAKubeletOnSystemdCgroupsNeedsASystemBus(t *testing.T) {
	noBus := errors.New("DBUS_SYSTEM_BUS_ADDRESS is unset and there is no socket at /run/dbus/system_bus_socket")
	if err := RequireSystemBus("systemd", noBus); err == nil || !strings.Contains(err.Error(), "cgroup driver is systemd") ||
		!strings.Contains(err.Error(), noBus.Error()) || strings.Contains(err.Error(), "\n") {
		t.Errorf("systemd without a bus: %v", err)
	}
	for _, tc := range []struct {
		driver string
		noBus  error
	}{{"cgroupfs", noBus}, {"", noBus}, {"systemd", nil}} {
		if err := RequireSystemBus(tc.driver, tc.noBus); err != nil {
			t.Errorf("%q, %v: %v", tc.driver, tc.noBus, err)
		}
	}
}

// The round trip of a call through the pass-through against the same call
// straight to dbus-daemon: one more hop through nodeinit, decoded and
// encoded twice, and no waiting of its own (a pass-through that waited
// on a timer or a poll interval would be many times slower).
func TestAPassedThroughCallCostsOneMoreHop(t *testing.T) {
	address, _ := systemBus(t)
	serveEcho(t, address)
	b := listen(t, Options{Upstream: address})
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
