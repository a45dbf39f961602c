package integration

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/test/hostlogindtest"
	"github.com/nodeinit/nodeinit/test/testenv"
)

// hostNode starts nodeinit with graceful node shutdown on a host whose
// system bus is a real dbus-daemon with a stand-in logind (hostDelay), and
// an executor that drains for drain after PrepareForShutdown; it returns
// once both the executor's lock and nodeinit's lock on the host are held.
func hostNode(t *testing.T, m mode, hostDelay, drain time.Duration, flags ...string) (*testenv.Node, *hostlogindtest.Logind, string, string) {
	t.Helper()
	address := hostlogindtest.Bus(t)
	host := hostlogindtest.NewLogind(t, address, hostDelay)
	_, task := binaries(t)
	rec := filepath.Join(t.TempDir(), "executor.rec")
	args := append([]string{"--run-proxy=false", "--graceful-node-shutdown"}, flags...)
	args = append(args, "--", task, "--record="+rec, "--inhibit="+drain.String())
	i := testenv.Launch(t, testenv.Options{PID1: m == asPID1, Env: []string{"DBUS_SYSTEM_BUS_ADDRESS=" + address}}, args...)
	testenv.WaitFor(t, 10*time.Second, "the executor's delay lock", func() bool {
		if !i.Running() {
			t.Fatalf("nodeinit ended; log:\n%s", i.Log())
		}
		return strings.HasPrefix(recorded(rec), "INHIBIT")
	})
	host.WaitFor(10*time.Second, "nodeinit's lock on the host", hostlogindtest.Holding(1))
	return i, host, rec, address
}

// The host's shutdown drains the node as a stop of its container does:
// the executor gets PrepareForShutdown(true), and the host's lock is
// released only after the executor's; the executor then runs on, and the
// runtime's TERM goes to it at once, without a second drain.
func TestTheHostsShutdownDrainsTheNode(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		i, host, rec, _ := hostNode(t, m, 30*time.Second, 300*time.Millisecond, "--graceful-node-shutdown-delay=20s")
		k := host.Locks()[0]
		if k.Who != "nodeinit" || k.Why != "drain the node's pods" || k.What != "shutdown" || k.Mode != "delay" {
			t.Errorf("the lock on the host: %+v", k)
		}
		i.WaitForLog(5*time.Second, 'I', "Took a shutdown delay lock on the host's logind", "hostDelay=\"30s\"", "delay=\"20s\"")
		i.Signal(syscall.SIGUSR1)
		i.WaitForLog(5*time.Second, 'I', "Node drain status", "hostLock=true hostDelay=30s")

		sent := host.PrepareForShutdown(true)
		host.WaitFor(10*time.Second, "the release of nodeinit's lock on the host", hostlogindtest.Holding(0))
		released := host.Locks()[0].Released
		r := testenv.ReadRecord(t, rec)
		if r.Signals() != "INHIBIT,PREPARE,RELEASED" {
			t.Fatalf("the executor saw %s, want INHIBIT,PREPARE,RELEASED; log:\n%s", r.Signals(), i.Log())
		}
		if released.Before(r[2].At) {
			t.Errorf("the host's lock was released at %v, before the executor's at %v", released, r[2].At)
		}
		t.Logf("from the host's PrepareForShutdown(true) to the release of nodeinit's lock there: %v "+
			"(the executor's drain: %v; from its release to the host's: %v)",
			released.Sub(sent), r[2].At.Sub(r[1].At), released.Sub(r[2].At))
		time.Sleep(300 * time.Millisecond)
		if !i.Running() {
			t.Fatalf("nodeinit ended after the host's drain; log:\n%s", i.Log())
		}
		i.WaitForLog(time.Second, 'I', "The node has drained for the host's shutdown; the executor runs on")

		stopped := time.Now()
		i.Signal(syscall.SIGTERM)
		if code := i.Wait(10 * time.Second); code != 0 {
			t.Fatalf("exit %d, want the executor's 0; log:\n%s", code, i.Log())
		}
		r = testenv.ReadRecord(t, rec)
		if r.Signals() != "INHIBIT,PREPARE,RELEASED,TERM" {
			t.Fatalf("the executor saw %s, want INHIBIT,PREPARE,RELEASED,TERM", r.Signals())
		}
		if d := r[3].At.Sub(stopped); d > 2*time.Second {
			t.Errorf("the TERM reached the executor %v after nodeinit's", d)
		}
		if n := len(i.Lines('I', "Sent PrepareForShutdown(true)")); n != 1 {
			t.Errorf("PrepareForShutdown(true) sent %d times, want once", n)
		}
	})
}

// A cancelled shutdown of the host is passed on to the executor, which
// takes a new lock, and nodeinit takes a new lock on the host; the next
// shutdown drains again.
func TestACancelledHostShutdownIsPassedOnAndTheLockTakenAgain(t *testing.T) {
	i, host, rec, _ := hostNode(t, asSubreaper, 30*time.Second, 200*time.Millisecond, "--graceful-node-shutdown-delay=20s")
	host.PrepareForShutdown(true)
	host.WaitFor(10*time.Second, "the release", hostlogindtest.Holding(0))
	host.PrepareForShutdown(false)
	host.WaitFor(10*time.Second, "a new lock on the host", func(locks []hostlogindtest.Lock) bool {
		return len(locks) == 2 && locks[1].Released.IsZero()
	})
	testenv.WaitFor(t, 10*time.Second, "the executor's new lock", func() bool {
		return strings.HasSuffix(testenv.ReadRecord(t, rec).Signals(), "CANCEL,INHIBIT")
	})
	i.WaitForLog(time.Second, 'I', "Sent PrepareForShutdown(false)")

	host.PrepareForShutdown(true)
	host.WaitFor(10*time.Second, "the release of the new lock", hostlogindtest.Holding(0))
	if s := testenv.ReadRecord(t, rec).Signals(); s != "INHIBIT,PREPARE,RELEASED,CANCEL,INHIBIT,PREPARE,RELEASED" {
		t.Fatalf("the executor saw %s", s)
	}
	if code := i.Stop(10 * time.Second); code != 0 {
		t.Errorf("exit %d after TERM; log:\n%s", code, i.Log())
	}
}

// A TERM and the host's shutdown, in either order, drain the node once;
// the host's lock is released when that drain is over, and the drain is
// bounded by the host's delay when it is the smaller.
func TestATermAndTheHostsShutdownDrainOnce(t *testing.T) {
	for _, tc := range []struct {
		name      string
		hostFirst bool
		hostDelay time.Duration
		drain     time.Duration
	}{
		{"the host first", true, 30 * time.Second, 500 * time.Millisecond},
		{"TERM first", false, 30 * time.Second, 500 * time.Millisecond},
		{"TERM first and the host's delay the smaller bound", false, 2 * time.Second, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i, host, rec, _ := hostNode(t, asSubreaper, tc.hostDelay, tc.drain, "--graceful-node-shutdown-delay=60s")
			prepared := func() bool { return strings.Contains(recorded(rec), "PREPARE") }
			var sent time.Time
			if tc.hostFirst {
				sent = host.PrepareForShutdown(true)
				testenv.WaitFor(t, 5*time.Second, "PrepareForShutdown", prepared)
				i.Signal(syscall.SIGTERM)
			} else {
				i.Signal(syscall.SIGTERM)
				testenv.WaitFor(t, 5*time.Second, "PrepareForShutdown", prepared)
				sent = host.PrepareForShutdown(true)
			}
			host.WaitFor(10*time.Second, "the release of nodeinit's lock on the host", hostlogindtest.Holding(0))
			released := host.Locks()[0].Released
			if code := i.Wait(10 * time.Second); code != 0 {
				t.Fatalf("exit %d; log:\n%s", code, i.Log())
			}
			r := testenv.ReadRecord(t, rec)
			want := "INHIBIT,PREPARE,RELEASED,TERM"
			if tc.drain == time.Hour {
				want = "INHIBIT,PREPARE,TERM"
			}
			if r.Signals() != want {
				t.Fatalf("the executor saw %s, want %s; log:\n%s", r.Signals(), want, i.Log())
			}
			term := r[len(r)-1].At
			if tc.drain == time.Hour {
				if d := released.Sub(sent); d < tc.hostDelay-100*time.Millisecond || d > tc.hostDelay+2*time.Second {
					t.Errorf("the host's lock was released %v after its PrepareForShutdown, want about its delay %v", d, tc.hostDelay)
				}
			} else if released.Before(r[2].At) {
				t.Errorf("the host's lock was released before the executor's")
			}
			if term.Before(released.Add(-time.Second)) {
				t.Errorf("the executor's TERM came at %v, well before the drain's end at %v", term, released)
			}
			if n := len(i.Lines('I', "Sent PrepareForShutdown(true)")); n != 1 {
				t.Errorf("PrepareForShutdown(true) sent %d times, want once", n)
			}
			t.Logf("from the host's PrepareForShutdown(true) to the release of nodeinit's lock there: %v", released.Sub(sent))
		})
	}
}

// logind's restart on the host (it leaves the bus, and a new one owns its
// name) gets nodeinit's lock taken again.
func TestAHostLogindRestartGetsTheLockTakenAgain(t *testing.T) {
	i, host, _, address := hostNode(t, asSubreaper, 30*time.Second, 100*time.Millisecond)
	host.Stop()
	again := hostlogindtest.NewLogind(t, address, 40*time.Second)
	again.WaitFor(10*time.Second, "a lock on the new logind", hostlogindtest.Holding(1))
	host.WaitFor(10*time.Second, "the old lock's release", hostlogindtest.Holding(0))
	i.WaitForLog(5*time.Second, 'I', "The host's logind has a new owner", "hostDelay=\"40s\"")
	if code := i.Stop(10 * time.Second); code != 0 {
		t.Errorf("exit %d after TERM; log:\n%s", code, i.Log())
	}
}

// A host bus that takes the connection and never answers delays neither
// the node's start nor its stop.
func TestAHostBusThatNeverAnswersDelaysNothing(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "system_bus_socket")
	ln, err := net.Listen("unix", sock)
	must(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 64) // held open, never answered
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	_, task := binaries(t)
	report := filepath.Join(t.TempDir(), "executor.json")
	began := time.Now()
	i := testenv.Launch(t, testenv.Options{Env: []string{"DBUS_SYSTEM_BUS_ADDRESS=unix:path=" + sock}},
		"--run-proxy=false", "--graceful-node-shutdown", "--graceful-node-shutdown-delay=30s", "--", task, "--report="+report)
	i.WaitForFile(10*time.Second, report)
	started := time.Since(began)
	stopping := time.Now()
	if code := i.Stop(10 * time.Second); code != 0 {
		t.Errorf("exit %d after TERM; log:\n%s", code, i.Log())
	}
	stopped := time.Since(stopping)
	t.Logf("with a host bus that never answers: the executor ran %v after the launch, nodeinit ended %v after TERM", started, stopped)
	if started > 3*time.Second || stopped > 3*time.Second {
		t.Errorf("start %v, stop %v: the host bus held them", started, stopped)
	}
	select {
	case <-accepted:
	case <-time.After(5 * time.Second):
		t.Error("nodeinit did not connect to the host's bus")
	}
	if strings.Contains(i.Log(), "Took a shutdown delay lock on the host's logind") {
		t.Error("a lock was taken on a bus that never answered")
	}
}

// Without the host's system bus, or with the switch off, nothing changes,
// and one line says that the host's shutdown will not drain the node.
func TestWithoutAHostBusOneLineSaysTheHostsShutdownWillNotDrain(t *testing.T) {
	_, task := binaries(t)
	for _, tc := range []struct {
		name  string
		env   string
		flags []string
		why   string
	}{
		{"no host bus", "DBUS_SYSTEM_BUS_ADDRESS=unix:path=/nonexistent/system_bus_socket", nil, "mount the host's /run"},
		{"off", "", []string{"--drain-on-host-shutdown=false"}, "--drain-on-host-shutdown=false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var env []string
			if tc.env != "" {
				env = []string{tc.env}
			} else {
				env = []string{"DBUS_SYSTEM_BUS_ADDRESS=" + hostlogindtest.Bus(t)}
			}
			report := filepath.Join(t.TempDir(), "executor.json")
			args := append([]string{"--run-proxy=false", "--graceful-node-shutdown"}, tc.flags...)
			i := testenv.Launch(t, testenv.Options{Env: env}, append(args, "--", task, "--report="+report)...)
			i.WaitForFile(10*time.Second, report)
			i.WaitForLog(5*time.Second, 'I', "The host's shutdown will not drain the node", tc.why)
			if n := strings.Count(i.Log(), "shutdown will not drain the node"); n != 1 {
				t.Errorf("%d lines say so, want 1; log:\n%s", n, i.Log())
			}
			if code := i.Stop(10 * time.Second); code != 0 {
				t.Errorf("exit %d after TERM; log:\n%s", code, i.Log())
			}
		})
	}
}

// openFDs lists the open descriptors of the process pid, each as
// "fd -> target".
func openFDs(t *testing.T, pid int) []string {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	must(t, err)
	var fds []string
	for _, e := range entries {
		target, _ := os.Readlink(filepath.Join(dir, e.Name()))
		fds = append(fds, e.Name()+" -> "+target)
	}
	return fds
}

// Anyone on the host's bus may send nodeinit's connection there signals
// with descriptors: PID 1 closes them all. 50 signals of 2 descriptors
// each, from another connection, leave nodeinit with as many open
// descriptors as before.
func TestDescriptorsSentToNodeinitOnTheHostsBusAreClosed(t *testing.T) {
	testenv.RequireRoot(t)
	i, host, _, address := hostNode(t, asPID1, 30*time.Second, 100*time.Millisecond)
	pid := i.Pid()
	// The stand-in logind counts a lock before nodeinit has its reply:
	// nodeinit's line says that it holds the lock's descriptor.
	i.WaitForLog(5*time.Second, 'I', "Took a shutdown delay lock on the host's logind")
	before := openFDs(t, pid)
	other := hostlogindtest.Impostor(t, address)
	other.SendDescriptors(host.Locks()[0].Sender, 50)
	// The bus passes messages on in order: logind's restart after the
	// signals, the new lock and the old one's release, tell that nodeinit
	// has read them all; the lock it holds is one descriptor, as before.
	host.Stop()
	again := hostlogindtest.NewLogind(t, address, 30*time.Second)
	again.WaitFor(10*time.Second, "a lock on the new logind", hostlogindtest.Holding(1))
	host.WaitFor(10*time.Second, "the old lock's release", hostlogindtest.Holding(0))
	after := openFDs(t, pid)
	t.Logf("nodeinit (PID 1) open descriptors: %d before 50 signals with 2 each, %d after", len(before), len(after))
	if len(after) > len(before) {
		t.Errorf("nodeinit holds %d descriptors more after the signals:\nbefore: %s\nafter:  %s",
			len(after)-len(before), strings.Join(before, ", "), strings.Join(after, ", "))
	}
	if code := i.Stop(10 * time.Second); code != 0 {
		t.Errorf("exit %d after TERM; log:\n%s", code, i.Log())
	}
}

// A host bus with no logind: one line says so, and the lock is taken when
// logind comes.
func TestAHostBusWithoutLogindIsOneLine(t *testing.T) {
	address := hostlogindtest.Bus(t)
	_, task := binaries(t)
	report := filepath.Join(t.TempDir(), "executor.json")
	i := testenv.Launch(t, testenv.Options{Env: []string{"DBUS_SYSTEM_BUS_ADDRESS=" + address}},
		"--run-proxy=false", "--graceful-node-shutdown", "--", task, "--report="+report)
	i.WaitForFile(10*time.Second, report)
	i.WaitForLog(5*time.Second, 'I', "No shutdown delay lock on the host's logind", "there is no logind on the host's system bus")
	host := hostlogindtest.NewLogind(t, address, 30*time.Second)
	host.WaitFor(10*time.Second, "a lock once logind is there", hostlogindtest.Holding(1))
	i.WaitForLog(5*time.Second, 'I', "The host's logind has a new owner: took a new shutdown delay lock there")
	if n := len(i.Lines('I', "No shutdown delay lock")); n != 1 {
		t.Errorf("%d lines say there is no lock, want 1; log:\n%s", n, i.Log())
	}
	if code := i.Stop(10 * time.Second); code != 0 {
		t.Errorf("exit %d after TERM; log:\n%s", code, i.Log())
	}
}

// A host whose bus policy refuses nodeinit's calls to logind: one line
// says why, the lock is asked for again (1 s, then 2 s later) with
// nothing more at the default verbosity, and taken once the policy allows
// it.
func TestAHostPolicyThatRefusesTheLockIsOneLine(t *testing.T) {
	bus := hostlogindtest.HostBus(t)
	bus.SetPolicy(`<deny send_destination="org.freedesktop.login1"/>`)
	host := hostlogindtest.NewLogind(t, bus.Address, 30*time.Second)
	_, task := binaries(t)
	report := filepath.Join(t.TempDir(), "executor.json")
	i := testenv.Launch(t, testenv.Options{Env: []string{"DBUS_SYSTEM_BUS_ADDRESS=" + bus.Address}},
		"--run-proxy=false", "--graceful-node-shutdown", "--", task, "--report="+report)
	i.WaitForFile(10*time.Second, report)
	i.WaitForLog(5*time.Second, 'I', "No shutdown delay lock on the host's logind", "org.freedesktop.DBus.Error.AccessDenied: Rejected send message")
	time.Sleep(2 * time.Second) // the first retry, refused too
	if n := len(i.Lines('I', "No shutdown delay lock")); n != 1 {
		t.Errorf("%d lines say there is no lock, want 1; log:\n%s", n, i.Log())
	}
	if n := len(host.Locks()); n != 0 {
		t.Fatalf("%d locks taken through a policy that refuses them", n)
	}
	bus.SetPolicy("")
	host.WaitFor(10*time.Second, "a lock once the policy allows it", hostlogindtest.Holding(1))
	i.WaitForLog(5*time.Second, 'I', "Took a shutdown delay lock on the host's logind")
	if code := i.Stop(10 * time.Second); code != 0 {
		t.Errorf("exit %d after TERM; log:\n%s", code, i.Log())
	}
}
