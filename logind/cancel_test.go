package logind_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/bus"
	"github.com/nodeinit/nodeinit/logind"
)

// A shutdown called off reaches the kubelet as PrepareForShutdown(false),
// and logind is as before it: the kubelet's new lock is taken, and the
// next shutdown is announced again and waits for that lock.
func TestACancelledShutdownIsPassedOnAndLocksAreTakenAgain(t *testing.T) {
	l := logind.New(logind.Options{InhibitDelayMax: time.Minute})
	b, err := bus.Listen(filepath.Join(t.TempDir(), "bus"), bus.Options{}, l)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.AdmitExecutor(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	conn, err := dbus.Connect(b.Address())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	login1 := conn.Object("org.freedesktop.login1", "/org/freedesktop/login1")
	inhibit := func() (dbus.UnixFD, error) {
		var fd dbus.UnixFD
		err := login1.Call("org.freedesktop.login1.Manager.Inhibit", 0, "shutdown", "kubelet", "test", "delay").Store(&fd)
		return fd, err
	}
	if err := conn.AddMatchSignal(dbus.WithMatchInterface("org.freedesktop.login1.Manager"), dbus.WithMatchMember("PrepareForShutdown")); err != nil {
		t.Fatal(err)
	}
	signals := make(chan *dbus.Signal, 4)
	conn.Signal(signals)
	next := func(want bool) {
		t.Helper()
		select {
		case s := <-signals:
			if len(s.Body) != 1 || s.Body[0] != want {
				t.Fatalf("got %v, want PrepareForShutdown(%v)", s.Body, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no PrepareForShutdown(%v) within 5s", want)
		}
	}

	l.CancelShutdown() // nothing announced: nothing sent
	first, err := inhibit()
	if err != nil {
		t.Fatal(err)
	}
	drained := l.PrepareForShutdown()
	next(true)
	if _, err := inhibit(); err == nil {
		t.Fatal("a lock was taken during the shutdown")
	}
	unix.Close(int(first))
	<-drained

	l.CancelShutdown()
	next(false)
	second, err := inhibit()
	if err != nil {
		t.Fatalf("no lock after the cancelled shutdown: %v", err)
	}
	again := l.PrepareForShutdown()
	if again == drained {
		t.Fatal("the next shutdown returned the cancelled one's channel")
	}
	next(true)
	select {
	case <-again:
		t.Fatal("the next shutdown did not wait for the new lock")
	case <-time.After(100 * time.Millisecond):
	}
	unix.Close(int(second))
	select {
	case <-again:
	case <-time.After(5 * time.Second):
		t.Fatal("not drained after the new lock's release")
	}
	select {
	case s := <-signals:
		t.Fatalf("a signal too many: %v", s.Body)
	case <-time.After(100 * time.Millisecond):
	}
}
