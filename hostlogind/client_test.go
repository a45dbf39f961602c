package hostlogind_test

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/bus/upstream"
	"github.com/nodeinit/nodeinit/hostlogind"
	"github.com/nodeinit/nodeinit/test/hostlogindtest"
)

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
	host.WaitFor(5*time.Second, "a lock", hostlogindtest.Holding(1))
	k := host.Locks()[0]
	if k.What != "shutdown" || k.Who != "nodeinit" || k.Why != "drain the node's pods" || k.Mode != "delay" {
		t.Errorf("lock %+v, want shutdown/nodeinit/drain the node's pods/delay", k)
	}
	testDelay(t, c, 7*time.Second) // set once the reply is in, just after the stand-in counts the lock
	c.Close()
	host.WaitFor(5*time.Second, "the lock's release at Close", hostlogindtest.Holding(0))
}

// The host's PrepareForShutdown(true) is delivered, and the host waits for
// the lock until Release.
func TestTheHostWaitsForTheLockUntilRelease(t *testing.T) {
	address := hostlogindtest.Bus(t)
	host := hostlogindtest.NewLogind(t, address, 30*time.Second)
	c := hostlogind.Start(hostlogind.Options{Address: address})
	defer c.Close()
	host.WaitFor(5*time.Second, "a lock", hostlogindtest.Holding(1))
	host.PrepareForShutdown(true)
	shutdownEvent(t, c, true)
	time.Sleep(200 * time.Millisecond)
	if host.Held() != 1 {
		t.Fatal("the lock was released before Release")
	}
	released := time.Now()
	c.Release()
	host.WaitFor(5*time.Second, "the release", hostlogindtest.Holding(0))
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
	host.WaitFor(5*time.Second, "a lock", hostlogindtest.Holding(1))
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
	host.WaitFor(5*time.Second, "the release", hostlogindtest.Holding(0))
}

// A logind that restarts (leaves the bus, and another owns its name) gets
// a new lock.
func TestALogindRestartTakesANewLock(t *testing.T) {
	address := hostlogindtest.Bus(t)
	first := hostlogindtest.NewLogind(t, address, 30*time.Second)
	c := hostlogind.Start(hostlogind.Options{Address: address})
	defer c.Close()
	first.WaitFor(5*time.Second, "a lock", hostlogindtest.Holding(1))
	first.Stop()
	second := hostlogindtest.NewLogind(t, address, 20*time.Second)
	second.WaitFor(5*time.Second, "a lock on the new logind", hostlogindtest.Holding(1))
	first.WaitFor(5*time.Second, "the old lock's release", hostlogindtest.Holding(0))
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
	host.WaitFor(5*time.Second, "a lock", hostlogindtest.Holding(1))
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
	host.WaitFor(10*time.Second, "a lock at the third call", hostlogindtest.Holding(1))
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
// are closed: 50 signals of 2 descriptors each (and, where the bus's
// policy lets them through, as many method calls) leave the client
// holding no more than before.
func TestDescriptorsSentByAnyoneOnTheHostsBusAreClosed(t *testing.T) {
	for _, calls := range []bool{false, true} {
		t.Run(map[bool]string{false: "signals", true: "method calls"}[calls], func(t *testing.T) {
			bus := hostlogindtest.HostBus(t)
			if calls {
				bus.SetPolicy(`<allow send_type="method_call"/>`)
			}
			host := hostlogindtest.NewLogind(t, bus.Address, 30*time.Second)
			c := hostlogind.Start(hostlogind.Options{Address: bus.Address})
			defer c.Close()
			host.WaitFor(5*time.Second, "a lock", hostlogindtest.Holding(1))
			other := hostlogindtest.Impostor(t, bus.Address)
			before := openFDs(t)
			if calls {
				other.CallWithDescriptors(host.Locks()[0].Sender, 50)
			} else {
				other.SendDescriptors(host.Locks()[0].Sender, 50)
			}
			// The bus passes messages on in order: once the client has the
			// shutdown, it has read every message before it.
			host.PrepareForShutdown(true)
			shutdownEvent(t, c, true)
			after := openFDs(t)
			t.Logf("open descriptors: %d before 50 messages with 2 each, %d after", before, after)
			if after > before {
				t.Errorf("%d descriptors more after the messages: the client keeps what it drops", after-before)
			}
		})
	}
}

// released is a condition on the stand-in's locks: the first has been
// released, and n are held now.
func released(n int) func([]hostlogindtest.Lock) bool {
	return func(locks []hostlogindtest.Lock) bool {
		return len(locks) > 0 && !locks[0].Released.IsZero() && hostlogindtest.Holding(n)(locks)
	}
}

// An Inhibit reply that comes after the call's timeout is not an orphan
// lock on the host: its descriptor is closed as it comes, and the lock
// asked for again is the one held.
func TestAnInhibitReplyAfterTheTimeoutIsClosed(t *testing.T) {
	address := hostlogindtest.Bus(t)
	host := hostlogindtest.NewLogind(t, address, 30*time.Second)
	host.HoldReplies(1, 1500*time.Millisecond)
	c := hostlogind.Start(hostlogind.Options{Address: address, Timeout: 500 * time.Millisecond})
	defer c.Close()
	host.WaitFor(10*time.Second, "the late reply's lock released, the next one held", released(1))
	locks := host.Locks()
	if d := locks[0].Released.Sub(locks[0].Taken); d < 1400*time.Millisecond || d > 4*time.Second {
		t.Errorf("the late reply's lock was released %v after it was taken, want as its reply came (1.5s)", d)
	}
	// The stand-in counts a lock before its reply is out.
	deadline := time.Now().Add(2 * time.Second)
	for !c.Held() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !c.Held() {
		t.Error("Held is false with a lock held")
	}
}

// A GetNameOwner that fails (here the host's policy refuses it) is asked
// again, after 1 s, and the lock is taken once it answers.
func TestAFailedGetNameOwnerIsAskedAgain(t *testing.T) {
	bus := hostlogindtest.HostBus(t)
	bus.SetPolicy(`<deny send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus" send_member="GetNameOwner"/>`)
	host := hostlogindtest.NewLogind(t, bus.Address, 30*time.Second)
	c := hostlogind.Start(hostlogind.Options{Address: bus.Address})
	defer c.Close()
	time.Sleep(1500 * time.Millisecond)
	if n := len(host.Locks()); n != 0 {
		t.Fatalf("%d locks taken while GetNameOwner was refused", n)
	}
	bus.SetPolicy("")
	host.WaitFor(5*time.Second, "a lock once GetNameOwner answers", hostlogindtest.Holding(1))
}

// Connecting while the host is shutting down takes no lock, which would
// only delay that shutdown; the shutdown is delivered, and its cancel
// brings the lock.
func TestConnectingWhileTheHostShutsDownTakesNoLock(t *testing.T) {
	address := hostlogindtest.Bus(t)
	host := hostlogindtest.NewLogind(t, address, 30*time.Second)
	host.SetPreparing(true)
	c := hostlogind.Start(hostlogind.Options{Address: address})
	defer c.Close()
	shutdownEvent(t, c, true)
	time.Sleep(300 * time.Millisecond)
	if n := len(host.Locks()); n != 0 || c.Held() {
		t.Fatalf("%d locks taken on a host already shutting down (Held %v)", n, c.Held())
	}
	c.Release() // nothing held: nothing happens
	host.SetPreparing(false)
	host.PrepareForShutdown(false)
	shutdownEvent(t, c, false)
	host.WaitFor(5*time.Second, "a lock after the cancel", hostlogindtest.Holding(1))
}

// The connection to the host's bus lost during a shutdown that is
// cancelled meanwhile: the next connection finds the host no longer
// shutting down, delivers the cancel and takes the lock again.
func TestAShutdownCancelledWhileTheBusWasLostTakesTheLockAgain(t *testing.T) {
	bus := hostlogindtest.HostBus(t)
	first := hostlogindtest.NewLogind(t, bus.Address, 30*time.Second)
	c := hostlogind.Start(hostlogind.Options{Address: bus.Address})
	defer c.Close()
	first.WaitFor(5*time.Second, "a lock", hostlogindtest.Holding(1))
	first.PrepareForShutdown(true)
	shutdownEvent(t, c, true)
	bus.Stop()
	bus.Start()
	second := hostlogindtest.NewLogind(t, bus.Address, 30*time.Second)
	shutdownEvent(t, c, false)
	second.WaitFor(5*time.Second, "a lock on the host after the cancel", hostlogindtest.Holding(1))
	first.WaitFor(time.Second, "the cancelled shutdown's lock released", hostlogindtest.Holding(0))
}

// A Release answers the shutdown it follows: true, false, true in quick
// succession, and the first shutdown's Release (a drain that ended before
// the cancel was received) leaves the second shutdown's lock held.
func TestAReleaseDoesNotLetALaterShutdownGo(t *testing.T) {
	address := hostlogindtest.Bus(t)
	host := hostlogindtest.NewLogind(t, address, 30*time.Second)
	c := hostlogind.Start(hostlogind.Options{Address: address})
	defer c.Close()
	host.WaitFor(5*time.Second, "a lock", hostlogindtest.Holding(1))
	host.PrepareForShutdown(true)
	host.PrepareForShutdown(false)
	host.PrepareForShutdown(true)
	shutdownEvent(t, c, true)
	host.WaitFor(5*time.Second, "a new lock after the cancel, the first released", released(1))
	time.Sleep(200 * time.Millisecond) // time for the second shutdown to come in
	c.Release()
	shutdownEvent(t, c, false)
	shutdownEvent(t, c, true)
	time.Sleep(200 * time.Millisecond)
	if host.Held() != 1 {
		t.Fatalf("the second shutdown's lock was released by the first one's Release; locks: %+v", host.Locks())
	}
	c.Release()
	host.WaitFor(5*time.Second, "the second shutdown's release", hostlogindtest.Holding(0))
}

// The delay delivered with a shutdown is the host's as it is when the
// shutdown begins: a reload of logind's configuration changes it with no
// signal.
func TestTheDelayIsReadWhenTheShutdownBegins(t *testing.T) {
	address := hostlogindtest.Bus(t)
	host := hostlogindtest.NewLogind(t, address, 30*time.Second)
	c := hostlogind.Start(hostlogind.Options{Address: address})
	defer c.Close()
	host.WaitFor(5*time.Second, "a lock", hostlogindtest.Holding(1))
	testDelay(t, c, 30*time.Second)
	host.SetDelay(10 * time.Second)
	host.PrepareForShutdown(true)
	shutdownEvent(t, c, true)
	if d := c.Delay(); d != 10*time.Second {
		t.Errorf("Delay %v as the shutdown is received, want the reloaded 10s", d)
	}
}

// The host's bus lost and regained while a lock is held: the lock is
// closed with the connection (nobody would hear the shutdown it delays),
// the connect is tried again after 1 s, then 2 s, 4 s..., and the lock is
// taken on the bus that comes back.
func TestTheHostsBusLostAndRegainedWhileALockIsHeld(t *testing.T) {
	bus := hostlogindtest.HostBus(t)
	first := hostlogindtest.NewLogind(t, bus.Address, 30*time.Second)
	c := hostlogind.Start(hostlogind.Options{Address: bus.Address})
	defer c.Close()
	first.WaitFor(5*time.Second, "a lock", hostlogindtest.Holding(1))
	lost := time.Now()
	bus.Stop()
	first.WaitFor(2*time.Second, "the lock's release with the connection", hostlogindtest.Holding(0))
	// While the bus is away, something that takes connections and closes
	// them at once is there: when it is connected to is the schedule.
	sock, err := upstream.UnixSocket(bus.Address)
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var tries []time.Duration
	for range 2 {
		conn, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		tries = append(tries, time.Since(lost))
		conn.Close()
	}
	ln.Close()
	if tries[0] < 900*time.Millisecond || tries[0] > 2500*time.Millisecond {
		t.Errorf("the first connect came %v after the loss, want about 1s", tries[0])
	}
	if gap := tries[1] - tries[0]; gap < 1900*time.Millisecond || gap > 3500*time.Millisecond {
		t.Errorf("the second connect came %v after the first, want about 2s", gap)
	}
	bus.Start()
	second := hostlogindtest.NewLogind(t, bus.Address, 20*time.Second)
	second.WaitFor(8*time.Second, "a lock on the bus that came back, 4s after the last try", hostlogindtest.Holding(1))
	if d := time.Since(lost) - tries[1]; d < 3900*time.Millisecond {
		t.Errorf("the third connect came %v after the second, want 4s", d)
	}
	testDelay(t, c, 20*time.Second)
	t.Logf("connects after the loss: %v, then the lock on the bus that came back %v after it", tries, time.Since(lost).Round(time.Millisecond))
}
