package bus

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/nodeinit/nodeinit/bus/service"
	"github.com/nodeinit/nodeinit/test/testenv"
)

func TestTheBusAnswersWhatClientsAskFirst(t *testing.T) {
	root := t.TempDir()
	writeConf(t, root, map[string]string{"etc/machine-id": "0123456789abcdef0123456789abcdef\n"})
	b := listen(t, testOptions{InhibitDelayMax: 90 * time.Second, ConfigRoot: root})
	conn := connect(t, b)
	me := conn.Names()[0]
	bus := conn.BusObject()
	var s string
	var ok bool
	var names []string

	for name, want := range map[string]string{logindName: logindOwner, systemdName: logindOwner, logindOwner: logindOwner, service.BusName: service.BusName, me: me} {
		if err := bus.Call(service.BusName+".GetNameOwner", 0, name).Store(&s); err != nil || s != want {
			t.Errorf("GetNameOwner(%s) = %q, %v; want %s", name, s, err, want)
		}
		if err := bus.Call(service.BusName+".NameHasOwner", 0, name).Store(&ok); err != nil || !ok {
			t.Errorf("NameHasOwner(%s) = %v, %v", name, ok, err)
		}
	}
	if err := bus.Call(service.BusName+".GetNameOwner", 0, "org.example.Nobody").Err; dbusErrorName(err) != service.NameHasNoOwner {
		t.Errorf("GetNameOwner of nobody's name: %v", err)
	}
	if err := bus.Call(service.BusName+".NameHasOwner", 0, ":1.999").Store(&ok); err != nil || ok {
		t.Errorf("NameHasOwner(:1.999) = %v, %v", ok, err)
	}
	var pid uint32
	for _, name := range []string{me, logindName} {
		if err := bus.Call(service.BusName+".GetConnectionUnixProcessID", 0, name).Store(&pid); err != nil || int(pid) != os.Getpid() {
			t.Errorf("GetConnectionUnixProcessID(%s) = %d, %v; want %d", name, pid, err, os.Getpid())
		}
	}
	if err := bus.Call(service.BusName+".GetConnectionUnixUser", 0, ":1.999").Err; dbusErrorName(err) != service.NameHasNoOwner {
		t.Errorf("GetConnectionUnixUser of nobody's name: %v", err)
	}
	if err := bus.Call(service.BusName+".ListNames", 0).Store(&names); err != nil ||
		!slices.Equal(names, []string{service.BusName, logindName, systemdName, logindOwner, me}) {
		t.Errorf("ListNames = %q, %v", names, err)
	}
	if err := bus.Call(service.BusName+".GetId", 0).Store(&s); err != nil || len(s) != 32 || s != b.guid {
		t.Errorf("GetId = %q, %v; want the GUID the handshake gave", s, err)
	} else if _, err := hex.DecodeString(s); err != nil {
		t.Errorf("GetId = %q: %v", s, err)
	}
	for name, want := range map[string]string{"org.example.Mine": errAccessDenied, logindName: errAccessDenied,
		":1.5": service.InvalidArgs, service.BusName: service.InvalidArgs, "nodots": service.InvalidArgs} {
		if err := bus.Call(service.BusName+".RequestName", 0, name, uint32(0)).Err; dbusErrorName(err) != want {
			t.Errorf("RequestName(%s): %v, want %s", name, err, want)
		}
	}
	var released uint32
	for name, want := range map[string]uint32{logindName: releaseNameNotOwner, "org.example.Nobody": releaseNameNonExistent} {
		if err := bus.Call(service.BusName+".ReleaseName", 0, name).Store(&released); err != nil || released != want {
			t.Errorf("ReleaseName(%s) = %d, %v; want %d", name, released, err, want)
		}
	}

	login1 := conn.Object(logindName, logindPath)
	for _, obj := range []dbus.BusObject{login1, bus, conn.Object(logindOwner, logindPath)} {
		if err := obj.Call(service.PeerIface+".Ping", 0).Err; err != nil {
			t.Errorf("Ping %s: %v", obj.Destination(), err)
		}
		if err := obj.Call(service.PeerIface+".GetMachineId", 0).Store(&s); err != nil || s != "0123456789abcdef0123456789abcdef" {
			t.Errorf("GetMachineId %s = %q, %v", obj.Destination(), s, err)
		}
	}
	for _, tc := range []struct {
		obj  dbus.BusObject
		want string
	}{
		{conn.Object(logindName, "/"), `<node name="org"/>`},
		{conn.Object(logindName, "/org/freedesktop"), `<node name="login1"/>`},
		{login1, `<signal name="PrepareForShutdown">`},
		{login1, `<property name="InhibitDelayMaxUSec" type="t" access="read"/>`},
		{conn.Object(service.BusName, service.BusPath), `<method name="GetNameOwner">`},
	} {
		if err := tc.obj.Call(service.IntrospectableIface+".Introspect", 0).Store(&s); err != nil || !strings.Contains(s, tc.want) {
			t.Errorf("Introspect %s: %v, %s; want %s", tc.obj.Path(), err, s, tc.want)
		}
	}
	if err := conn.Object(logindName, "/org/freedesktop/login1/seat").Call(service.IntrospectableIface+".Introspect", 0).Err; dbusErrorName(err) != service.UnknownObject {
		t.Errorf("Introspect of an object logind does not have: %v", err)
	}
	var all map[string]dbus.Variant
	if err := login1.Call(service.PropertiesIface+".GetAll", 0, managerIface).Store(&all); err != nil ||
		len(all) != 1 || all["InhibitDelayMaxUSec"].Value() != uint64(90e6) {
		t.Errorf("GetAll = %v, %v", all, err)
	}
	// A proxy bound to the unique name, as python-dbus binds one, reaches
	// logind; so does a call to systemd through it.
	if d, err := (kubelet{conn}).currentInhibitDelay(); err != nil || d != 90*time.Second {
		t.Errorf("InhibitDelayMaxUSec = %v, %v", d, err)
	}
	if v, err := conn.Object(logindOwner, logindPath).GetProperty(managerIface + ".InhibitDelayMaxUSec"); err != nil || v.Value() != uint64(90e6) {
		t.Errorf("InhibitDelayMaxUSec through %s = %v, %v", logindOwner, v, err)
	}
}

// A rule for signals from org.freedesktop.login1 matches PrepareForShutdown,
// which carries logind's unique name as its sender, as on a real bus.
func TestASenderRuleForLogindsNameMatchesItsUniqueName(t *testing.T) {
	b := listen(t, testOptions{})
	conn := connect(t, b)
	if err := conn.AddMatchSignal(dbus.WithMatchSender(logindName), dbus.WithMatchMember("PrepareForShutdown")); err != nil {
		t.Fatal(err)
	}
	ch := make(chan *dbus.Signal, 1)
	conn.Signal(ch)
	loginOf(b).PrepareForShutdown()
	select {
	case sig := <-ch:
		if sig.Sender != logindOwner {
			t.Errorf("sender %q, want %s", sig.Sender, logindOwner)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no PrepareForShutdown for a rule with sender='org.freedesktop.login1'")
	}
}

// clientEnv is the environment of a client process of the bus.
func clientEnv(b *Bus) []string {
	return append(os.Environ(), "DBUS_SYSTEM_BUS_ADDRESS="+b.Address())
}

// pythonDBus is python-dbus's way: get_object binds to the unique owner,
// the proxy introspects, Properties through it, a delay lock, and a signal
// receiver for logind's name, which python-dbus filters on the name's
// owner. It prints "ready" once its receiver is in place and knows the
// owner, and exits after the signal or 10s.
const pythonDBus = `
import dbus, dbus.mainloop.glib
from gi.repository import GLib
dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
bus = dbus.SystemBus()
obj = bus.get_object('org.freedesktop.login1', '/org/freedesktop/login1')
print('bound', obj.bus_name, flush=True)
props = dbus.Interface(obj, 'org.freedesktop.DBus.Properties')
print('delay', int(props.Get('org.freedesktop.login1.Manager', 'InhibitDelayMaxUSec')), flush=True)
print('all', sorted((str(k), int(v)) for k, v in props.GetAll('org.freedesktop.login1.Manager').items()), flush=True)
lock = dbus.Interface(obj, 'org.freedesktop.login1.Manager').Inhibit('shutdown', 'python', 'test', 'delay')
print('lock', lock.take() > 2, flush=True)
loop = GLib.MainLoop()
def prepare(start, sender=None):
    print('signal', bool(start), sender, flush=True)
    loop.quit()
bus.add_signal_receiver(prepare, signal_name='PrepareForShutdown', dbus_interface='org.freedesktop.login1.Manager',
    bus_name='org.freedesktop.login1', path='/org/freedesktop/login1', sender_keyword='sender')
# The receiver learns the name's owner from a GetNameOwner of its own; a
# second watch's answer comes after it, on the same connection.
bus.watch_name_owner('org.freedesktop.login1', lambda owner: print('ready', flush=True))
GLib.timeout_add_seconds(10, loop.quit)
loop.run()
`

func TestPythonDBusGetsAProxyAndPrepareForShutdown(t *testing.T) {
	python := "/usr/bin/python3"
	testenv.Require(t, exec.Command(python, "-c", "import dbus, dbus.mainloop.glib, gi").Run() == nil,
		"needs Debian's python3 with python3-dbus and python3-gi")
	b := listen(t, testOptions{InhibitDelayMax: 90 * time.Second})
	out := runClient(t, clientEnv(b), "ready", loginOf(b).PrepareForShutdown, python, "-c", pythonDBus)
	want := "bound " + logindOwner + "\ndelay 90000000\nall [('InhibitDelayMaxUSec', 90000000)]\nlock True\nready\nsignal True " + logindOwner + "\n"
	if out != want {
		t.Errorf("python-dbus printed\n%s\nwant\n%s", out, want)
	}
}

func TestGDBusCallsIntrospectsAndMonitors(t *testing.T) {
	gdbus := testenv.RequireTool(t, "gdbus")
	b := listen(t, testOptions{InhibitDelayMax: 90 * time.Second})
	env := clientEnv(b)
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, gdbus, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("gdbus %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	login1 := []string{"--system", "--dest", logindName, "--object-path", string(logindPath)}
	if out := run(append(append([]string{"call"}, login1...), "--method", service.PropertiesIface+".Get", managerIface, "InhibitDelayMaxUSec")...); out != "(<uint64 90000000>,)\n" {
		t.Errorf("gdbus call Get: %q", out)
	}
	if out := run(append(append([]string{"call"}, login1...), "--method", service.PropertiesIface+".GetAll", managerIface)...); out != "({'InhibitDelayMaxUSec': <uint64 90000000>},)\n" {
		t.Errorf("gdbus call GetAll: %q", out)
	}
	if out := run(append([]string{"introspect"}, login1...)...); !strings.Contains(out, "PrepareForShutdown(b start);") ||
		!strings.Contains(out, "readonly t InhibitDelayMaxUSec = 90000000;") {
		t.Errorf("gdbus introspect:\n%s", out)
	}
	if out := run("call", "--system", "--dest", service.BusName, "--object-path", string(service.BusPath), "--method", service.BusName+".GetNameOwner", logindName); out != "('"+logindOwner+"',)\n" {
		t.Errorf("gdbus call GetNameOwner: %q", out)
	}
	// gdbus monitor prints the owner, then adds its rule for the owner's
	// signals: PrepareForShutdown goes out once the rule is there.
	out := runClient(t, env, "is owned by "+logindOwner, func() <-chan struct{} {
		waitForRule(t, b, "sender", logindOwner)
		return loginOf(b).PrepareForShutdown()
	}, gdbus, "monitor", "--system", "--dest", logindName)
	if !strings.Contains(out, "/org/freedesktop/login1: org.freedesktop.login1.Manager.PrepareForShutdown (true,)") {
		t.Errorf("gdbus monitor printed:\n%s", out)
	}
}

// runClient runs a client of the bus, calls then once it has printed a
// line that holds ready, and returns what it printed until it exits or,
// 10s after then, is killed (a monitor never exits by itself: it is done
// once the next line after ready has come).
func runClient(t *testing.T, env []string, ready string, then func() <-chan struct{}, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	sc := bufio.NewScanner(stdout)
	called := false
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if called && filepath.Base(name) == "gdbus" {
			break
		}
		if !called && strings.Contains(sc.Text(), ready) {
			called = true
			then()
		}
	}
	_ = cmd.Process.Kill() // ours, by pid; it may have exited already
	_ = cmd.Wait()
	if !called {
		t.Errorf("%s never printed %q:\n%s", name, ready, out.String())
	}
	return out.String()
}

// waitForRule waits, at most 10s, until a connection of b has a match rule
// with key=value.
func waitForRule(t *testing.T, b *Bus, key, value string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.mu.Lock()
		found := false
		for c := range b.conns {
			c.mu.Lock()
			for _, r := range c.rules {
				found = found || r[key] == value
			}
			c.mu.Unlock()
		}
		b.mu.Unlock()
		if found {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no match rule with %s=%q within 10s", key, value)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pythonDBusUpstream binds a proxy to a service of the system bus behind
// nodeinit's, as python-dbus does (to the unique name GetNameOwner gives),
// calls it, and asks the bus about that connection and its own.
const pythonDBusUpstream = `
import dbus, os
bus = dbus.SystemBus()
obj = bus.get_object('org.example.Echo', '/org/example/Echo')
print('bound', obj.bus_name, flush=True)
print(obj.Echo('hi', dbus_interface='org.example.Echo'), flush=True)
driver = dbus.Interface(bus.get_object('org.freedesktop.DBus', '/org/freedesktop/DBus'), 'org.freedesktop.DBus')
print('service pid', int(driver.GetConnectionUnixProcessID(obj.bus_name)), flush=True)
me = bus.get_unique_name()
print('my pid', int(driver.GetConnectionUnixProcessID(me)) == os.getpid(), flush=True)
print('my uid', int(driver.GetConnectionUnixUser(me)) == os.getuid(), flush=True)
print('logind', driver.GetNameOwner('org.freedesktop.login1'), flush=True)
`

// The unique names of nodeinit's bus and of the system bus behind it are
// apart: dbus-daemon names its connections :1.N from :1.0, so the first
// service there has the name a bus that also counted :1.N would give its
// own first client. A proxy bound to the service's unique name reaches the
// service, and the bus describes each connection by its own credentials.
func TestUniqueNamesOfTheSystemBusAreNotThisBussOwn(t *testing.T) {
	python := "/usr/bin/python3"
	testenv.Require(t, exec.Command(python, "-c", "import dbus").Run() == nil, "needs Debian's python3 with python3-dbus")
	address, _ := systemBus(t)
	service := serveEcho(t, address)
	b := listen(t, testOptions{Upstream: address})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-c", pythonDBusUpstream)
	cmd.Env = clientEnv(b)
	var stderr strings.Builder
	cmd.Stderr = &stderr // python-dbus's complaint that the service does not introspect
	out, err := cmd.Output()
	want := fmt.Sprintf("bound %s\necho hi\nservice pid %d\nmy pid True\nmy uid True\nlogind %s\n", service.Names()[0], os.Getpid(), logindOwner)
	if err != nil || string(out) != want {
		t.Errorf("python-dbus: %v\n%s\nwant\n%s\nstderr:\n%s", err, out, want, stderr.String())
	}
	if !strings.HasPrefix(logindOwner, localPrefix) {
		t.Errorf("logind's unique name %s lacks the bus's prefix %s", logindOwner, localPrefix)
	}
}

// GIO binds to a service's unique name too: gdbus monitor of a service of
// the system bus behind this one resolves its owner there, adds a rule for
// that sender, and prints its signal.
func TestGDBusMonitorsAServiceOfTheSystemBus(t *testing.T) {
	gdbus := testenv.RequireTool(t, "gdbus")
	address, _ := systemBus(t)
	service := serveEcho(t, address)
	b := listen(t, testOptions{Upstream: address})
	out := runClient(t, clientEnv(b), "is owned by "+service.Names()[0], func() <-chan struct{} {
		waitForRule(t, b, "sender", service.Names()[0])
		// The rule holds up there once the system bus has answered
		// AddMatch, which this side does not see: the service repeats its
		// signal until gdbus has printed one.
		stop := make(chan struct{})
		t.Cleanup(func() { close(stop) })
		go func() {
			for {
				_ = service.Emit("/org/example/Echo", "org.example.Echo.Pinged", "pong")
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
		}()
		return nil
	}, gdbus, "monitor", "--system", "--dest", "org.example.Echo")
	if !strings.Contains(out, "/org/example/Echo: org.example.Echo.Pinged ('pong',)") {
		t.Errorf("gdbus monitor printed:\n%s", out)
	}
}
