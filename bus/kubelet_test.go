package bus

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// kubelet makes the calls the kubelet's graceful node shutdown makes
// (kubernetes v1.34, pkg/kubelet/nodeshutdown/systemd/inhibit_linux.go),
// with the same names, arguments and reply types, over a godbus connection.
type kubelet struct{ conn *dbus.Conn }

func (k kubelet) logind() dbus.BusObject {
	return k.conn.Object("org.freedesktop.login1", "/org/freedesktop/login1")
}

// currentInhibitDelay reads InhibitDelayMaxUSec, which the kubelet wants as
// a uint64 of microseconds.
func (k kubelet) currentInhibitDelay() (time.Duration, error) {
	v, err := k.logind().GetProperty("org.freedesktop.login1.Manager.InhibitDelayMaxUSec")
	if err != nil {
		return 0, err
	}
	usec, ok := v.Value().(uint64)
	if !ok {
		return 0, fmt.Errorf("InhibitDelayMaxUSec is a %T, not a uint64", v.Value())
	}
	return time.Duration(usec) * time.Microsecond, nil
}

// inhibitShutdown takes the kubelet's lock; the kubelet stores the fd in a
// uint32.
func (k kubelet) inhibitShutdown() (uint32, error) {
	c := k.logind().Call("org.freedesktop.login1.Manager.Inhibit", 0, "shutdown", "kubelet", "Kubelet needs time to handle node shutdown", "delay")
	if c.Err != nil {
		return 0, c.Err
	}
	var fd uint32
	err := c.Store(&fd)
	return fd, err
}

// reloadLogindConf is what the kubelet calls after writing a logind drop-in
// when the delay is too short.
func (k kubelet) reloadLogindConf() error {
	return k.conn.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1").
		Call("org.freedesktop.systemd1.Manager.KillUnit", 0, "systemd-logind.service", "all", int32(1)).Err
}

// monitorShutdown adds the kubelet's match rule and returns the signals.
func (k kubelet) monitorShutdown() (<-chan *dbus.Signal, error) {
	err := k.conn.AddMatchSignal(dbus.WithMatchInterface("org.freedesktop.login1.Manager"), dbus.WithMatchMember("PrepareForShutdown"), dbus.WithMatchObjectPath("/org/freedesktop/login1"))
	if err != nil {
		return nil, err
	}
	ch := make(chan *dbus.Signal, 1)
	k.conn.Signal(ch)
	return ch, nil
}

// The whole of the kubelet's part, on godbus's shared system bus
// connection found through DBUS_SYSTEM_BUS_ADDRESS, as the kubelet finds
// it: read the delay, take the lock, watch for PrepareForShutdown, drain,
// release.
func TestKubeletTakesADelayLockAndReleasesItAfterPrepareForShutdown(t *testing.T) {
	b := listen(t, testOptions{InhibitDelayMax: 90 * time.Second})
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", b.Address())
	conn, err := dbus.SystemBus()
	if err != nil {
		t.Fatal(err)
	}
	k := kubelet{conn}

	delay, err := k.currentInhibitDelay()
	if err != nil || delay != 90*time.Second {
		t.Fatalf("InhibitDelayMaxUSec = %v, %v; want 90s", delay, err)
	}
	fd, err := k.inhibitShutdown()
	if err != nil {
		t.Fatal(err)
	}
	events, err := k.monitorShutdown()
	if err != nil {
		t.Fatal(err)
	}
	if s := b.Status(); !strings.Contains(s, `inhibitors=1 [who="kubelet" why="Kubelet needs time to handle node shutdown" mode=delay`) ||
		!strings.Contains(s, "prepareForShutdown=not-sent") {
		t.Errorf("status before shutdown: %s", s)
	}

	drained := loginOf(b).PrepareForShutdown()
	select {
	case sig := <-events:
		if sig.Name != "org.freedesktop.login1.Manager.PrepareForShutdown" || sig.Path != logindPath || sig.Sender != logindOwner ||
			len(sig.Body) != 1 || sig.Body[0] != true {
			t.Errorf("got signal %+v, want PrepareForShutdown(true) from %s on %s", sig, logindOwner, logindPath)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no PrepareForShutdown signal within 10s")
	}
	select {
	case <-drained:
		t.Fatal("drained while the kubelet still holds its lock")
	default:
	}
	if s := b.Status(); !strings.Contains(s, "prepareForShutdown=sent-") {
		t.Errorf("status after PrepareForShutdown: %s", s)
	}
	// A lock taken now would delay nothing: refused, as logind refuses it.
	if _, err := k.inhibitShutdown(); dbusErrorName(err) != errOperationInProgress {
		t.Errorf("Inhibit during shutdown: %v, want %s", err, errOperationInProgress)
	}

	// The kubelet drains its pods, then releases the lock.
	if err := syscall.Close(int(fd)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, drained, "drained after the lock's release")
	if again := loginOf(b).PrepareForShutdown(); again != drained {
		t.Error("a second PrepareForShutdown returned another channel")
	}
	// godbus hands out its shared connection while it has not seen it
	// closed: wait for that, so that a next run of this test connects anew.
	b.Close()
	waitFor(t, conn.Context().Done(), "the shared connection closed")
}

func dbusErrorName(err error) string {
	var e dbus.Error
	if errors.As(err, &e) {
		return e.Name
	}
	return fmt.Sprintf("not a D-Bus error: %v", err)
}

// inhibitorEntry is one element of ListInhibitors' a(ssssuu).
type inhibitorEntry struct {
	What, Who, Why, Mode string
	UID, PID             uint32
}

// ListInhibitors (what systemd-inhibit --list calls) lists the locks held,
// as logind lists them: what, who, why, mode, uid, pid; a released lock is
// gone from it.
func TestListInhibitorsListsTheLocksHeld(t *testing.T) {
	b := listen(t, testOptions{})
	conn := connect(t, b)
	fd, err := (kubelet{conn}).inhibitShutdown()
	if err != nil {
		t.Fatal(err)
	}
	list := func() []inhibitorEntry {
		t.Helper()
		var got []inhibitorEntry
		if err := conn.Object(logindName, logindPath).Call(managerIface+".ListInhibitors", 0).Store(&got); err != nil {
			t.Fatalf("ListInhibitors: %v", err)
		}
		return got
	}
	want := inhibitorEntry{"shutdown", "kubelet", "Kubelet needs time to handle node shutdown", "delay", uint32(os.Getuid()), uint32(os.Getpid())}
	if got := list(); len(got) != 1 || got[0] != want {
		t.Errorf("ListInhibitors = %+v, want [%+v]", got, want)
	}
	if tool, err := exec.LookPath("systemd-inhibit"); err == nil {
		cmd := exec.Command(tool, "--list", "--no-pager")
		cmd.Env = clientEnv(b)
		out, err := cmd.CombinedOutput()
		t.Logf("systemd-inhibit --list:\n%s", out)
		if err != nil || !strings.Contains(string(out), "kubelet") || !strings.Contains(string(out), "1 inhibitors listed") {
			t.Errorf("systemd-inhibit --list: %v\n%s", err, out)
		}
	}
	syscall.Close(int(fd))
	waitInhibitors(t, b, 0)
	if got := list(); len(got) != 0 {
		t.Errorf("ListInhibitors after the release = %+v, want none", got)
	}
}
