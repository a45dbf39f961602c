package hostlogind_test

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/hostlogind"
	"github.com/nodeinit/nodeinit/hostlogind/hostlogindtest"
)

// held is a condition on the stand-in's locks: n held now.
func held(n int) func([]hostlogindtest.Lock) bool {
	return func(locks []hostlogindtest.Lock) bool {
		h := 0
		for _, k := range locks {
			if k.Released.IsZero() {
				h++
			}
		}
		return h == n
	}
}

func shutdownEvent(t *testing.T, c *hostlogind.Client, want bool) {
	t.Helper()
	select {
	case got := <-c.Shutdown():
		if got != want {
			t.Fatalf("PrepareForShutdown(%v) delivered, want %v", got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("PrepareForShutdown(%v) not delivered within 5s", want)
	}
}

func TestTheLockIsTakenAtStart(t *testing.T) {
	address := hostlogindtest.Bus(t)
	host := hostlogindtest.NewLogind(t, address, 7*time.Second)
	c := hostlogind.Start(hostlogind.Options{Address: address})
	defer c.Close()
	host.WaitFor(5*time.Second, "a lock", held(1))
	k := host.Locks()[0]
	if k.What != "shutdown" || k.Who != "nodeinit" || k.Why != "drain the node's pods" || k.Mode != "delay" {
		t.Errorf("lock %+v, want shutdown/nodeinit/drain the node's pods/delay", k)
	}
	testDelay(t, c, 7*time.Second) // set once the reply is in, just after the stand-in counts the lock
	c.Close()
	host.WaitFor(5*time.Second, "the lock's release at Close", held(0))
}

// The host's PrepareForShutdown(true) is delivered, and the host waits for
// the lock until Release.
func TestTheHostWaitsForTheLockUntilRelease(t *testing.T) {
	address := hostlogindtest.Bus(t)
	host := hostlogindtest.NewLogind(t, address, 30*time.Second)
	c := hostlogind.Start(hostlogind.Options{Address: address})
	defer c.Close()
	host.WaitFor(5*time.Second, "a lock", held(1))
	host.PrepareForShutdown(true)
	shutdownEvent(t, c, true)
	time.Sleep(200 * time.Millisecond)
	if host.Held() != 1 {
		t.Fatal("the lock was released before Release")
	}
	released := time.Now()
	c.Release()
	host.WaitFor(5*time.Second, "the release", held(0))
	if d := host.Locks()[0].Released.Sub(released); d > time.Second {
		t.Errorf("the host saw the release %v after Release", d)
	}
}

// A cancelled shutdown is delivered, and a new lock is taken before the
// old one goes.
func TestACancelledShutdownTakesANewLock(t *testing.T) {
	address := hostlogindtest.Bus(t)
	host := hostlogindtest.NewLogind(t, address, 30*time.Second)
	c := hostlogind.Start(hostlogind.Options{Address: address})
	defer c.Close()
	host.WaitFor(5*time.Second, "a lock", held(1))
	host.PrepareForShutdown(true)
	shutdownEvent(t, c, true)
	host.PrepareForShutdown(false)
	shutdownEvent(t, c, false)
	host.WaitFor(5*time.Second, "a new lock, the old released", func(locks []hostlogindtest.Lock) bool {
		return len(locks) == 2 && !locks[0].Released.IsZero() && locks[1].Released.IsZero()
	})
	locks := host.Locks()
	if locks[0].Released.Before(locks[1].Taken) {
		t.Errorf("the old lock went at %v, before the new one came at %v", locks[0].Released, locks[1].Taken)
	}
	c.Release() // nothing held for a shutdown now: the new lock stays
	time.Sleep(100 * time.Millisecond)
	if host.Held() != 1 {
		t.Error("Release after the cancel released the new lock")
	}
	// And the next shutdown is delivered again.
	host.PrepareForShutdown(true)
	shutdownEvent(t, c, true)
	c.Release()
	host.WaitFor(5*time.Second, "the release", held(0))
}

// A logind that restarts (leaves the bus, and another owns its name) gets
// a new lock.
func TestALogindRestartTakesANewLock(t *testing.T) {
	address := hostlogindtest.Bus(t)
	first := hostlogindtest.NewLogind(t, address, 30*time.Second)
	c := hostlogind.Start(hostlogind.Options{Address: address})
	defer c.Close()
	first.WaitFor(5*time.Second, "a lock", held(1))
	first.Stop()
	second := hostlogindtest.NewLogind(t, address, 20*time.Second)
	second.WaitFor(5*time.Second, "a lock on the new logind", held(1))
	first.WaitFor(5*time.Second, "the old lock's release", held(0))
	testDelay(t, c, 20*time.Second)
	// The new logind's shutdown is heard.
	second.PrepareForShutdown(true)
	shutdownEvent(t, c, true)
}

func testDelay(t *testing.T, c *hostlogind.Client, want time.Duration) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for c.Delay() != want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if d := c.Delay(); d != want {
		t.Errorf("Delay %v, want %v", d, want)
	}
}

// Only logind's PrepareForShutdown counts: the same signal sent by another
// connection on the host's bus is dropped.
func TestAnotherSendersPrepareForShutdownIsDropped(t *testing.T) {
	address := hostlogindtest.Bus(t)
	host := hostlogindtest.NewLogind(t, address, 30*time.Second)
	c := hostlogind.Start(hostlogind.Options{Address: address})
	defer c.Close()
	host.WaitFor(5*time.Second, "a lock", held(1))
	other := hostlogindtest.Impostor(t, address)
	other.PrepareForShutdown(true)
	select {
	case v := <-c.Shutdown():
		t.Fatalf("another connection's PrepareForShutdown(%v) was delivered", v)
	case <-time.After(300 * time.Millisecond):
	}
}

// A host bus that takes the connection and never answers delays nothing:
// Start and Close return at once, no lock is held, and the connect is
// tried again.
func TestAHostBusThatNeverAnswersDelaysNothing(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "system_bus_socket")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- conn // held open, never answered
		}
	}()
	began := time.Now()
	c := hostlogind.Start(hostlogind.Options{Address: "unix:path=" + sock, Timeout: 200 * time.Millisecond})
	if d := time.Since(began); d > 50*time.Millisecond {
		t.Errorf("Start took %v", d)
	}
	for i := range 2 {
		select {
		case <-accepted:
		case <-time.After(5 * time.Second):
			t.Fatalf("connect %d did not come", i+1)
		}
	}
	if c.Held() {
		t.Error("a lock is held on a bus that never answered")
	}
	c.Release()
	began = time.Now()
	c.Close()
	if d := time.Since(began); d > 1100*time.Millisecond {
		t.Errorf("Close took %v", d)
	}
}

// A lock the host's logind refuses is asked for again, after 1 s and
// then 2 s.
func TestARefusedLockIsAskedForAgain(t *testing.T) {
	address := hostlogindtest.Bus(t)
	host := hostlogindtest.NewLogind(t, address, 30*time.Second)
	host.Refuse(2)
	began := time.Now()
	c := hostlogind.Start(hostlogind.Options{Address: address})
	defer c.Close()
	host.WaitFor(10*time.Second, "a lock at the third call", held(1))
	if d := time.Since(began); d < 3*time.Second || d > 6*time.Second {
		t.Errorf("the lock came %v after the start, want 3s (1s and 2s of retries)", d)
	}
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// Descriptors that anyone on the host's bus sends nodeinit's connection
// are closed: 50 signals of 2 descriptors each leave the client holding
// no more than before.
func TestDescriptorsSentByAnyoneOnTheHostsBusAreClosed(t *testing.T) {
	address := hostlogindtest.Bus(t)
	host := hostlogindtest.NewLogind(t, address, 30*time.Second)
	c := hostlogind.Start(hostlogind.Options{Address: address})
	defer c.Close()
	host.WaitFor(5*time.Second, "a lock", held(1))
	other := hostlogindtest.Impostor(t, address)
	before := openFDs(t)
	other.SendDescriptors(host.Locks()[0].Sender, 50)
	// The bus passes messages on in order: once the client has the
	// shutdown, it has read every signal before it.
	host.PrepareForShutdown(true)
	shutdownEvent(t, c, true)
	after := openFDs(t)
	t.Logf("open descriptors: %d before 50 signals with 2 each, %d after", before, after)
	if after > before {
		t.Errorf("%d descriptors more after the signals: the client keeps what it drops", after-before)
	}
}
