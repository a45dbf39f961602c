package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// drainNode starts nodeinit with graceful node shutdown and an executor
// that takes a delay lock the way the kubelet does and releases it drain
// after PrepareForShutdown; it returns once the lock is held.
func drainNode(t *testing.T, m mode, drain time.Duration, flags ...string) (*testenv.Node, string) {
	t.Helper()
	_, task := binaries(t)
	rec := filepath.Join(t.TempDir(), "executor.rec")
	args := append([]string{"--run-proxy=false", "--graceful-node-shutdown"}, flags...)
	i := start(t, m, append(args, "--", task, "--record="+rec, "--inhibit="+drain.String())...)
	testenv.WaitFor(t, 10*time.Second, "the executor's delay lock", func() bool {
		if !i.Running() {
			t.Fatalf("nodeinit ended; log:\n%s", i.Log())
		}
		return strings.HasPrefix(recorded(rec), "INHIBIT")
	})
	return i, rec
}

// With graceful node shutdown, a TERM first lets the executor drain the
// node: it gets PrepareForShutdown(true), and the TERM only once it has
// released its lock.
func TestTheNodeDrainsBeforeTheExecutorGetsTerm(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		i, rec := drainNode(t, m, 300*time.Millisecond, "--graceful-node-shutdown-delay=20s")
		i.Signal(syscall.SIGTERM)
		if code := i.Wait(10 * time.Second); code != 0 {
			t.Fatalf("exit %d, want the executor's 0; log:\n%s", code, i.Log())
		}
		r := testenv.ReadRecord(t, rec)
		if r.Signals() != "INHIBIT,PREPARE,RELEASED,TERM" {
			t.Fatalf("the executor saw %s, want INHIBIT,PREPARE,RELEASED,TERM", r.Signals())
		}
		if d := r[3].At.Sub(r[1].At); d < 300*time.Millisecond {
			t.Errorf("TERM came %v after PrepareForShutdown, before the 300ms drain was over", d)
		}
		i.WaitForLog(time.Second, 'I', "Drain over", "the node has drained")
	})
}

// A drain that does not end is cut short at the delay, and a second TERM
// cuts it short at once.
func TestADrainEndsAtItsDelayOrASecondTerm(t *testing.T) {
	for _, second := range []bool{false, true} {
		t.Run(fmt.Sprintf("second TERM=%v", second), func(t *testing.T) {
			delay := "1s"
			if second {
				delay = "60s"
			}
			i, rec := drainNode(t, asSubreaper, time.Hour, "--graceful-node-shutdown-delay="+delay)
			i.Signal(syscall.SIGTERM)
			testenv.WaitFor(t, 10*time.Second, "PrepareForShutdown", func() bool { return strings.Contains(recorded(rec), "PREPARE") })
			if second {
				i.Signal(syscall.SIGTERM)
			}
			if code := i.Wait(10 * time.Second); code != 0 {
				t.Fatalf("exit %d; log:\n%s", code, i.Log())
			}
			r := testenv.ReadRecord(t, rec)
			if r.Signals() != "INHIBIT,PREPARE,TERM" {
				t.Fatalf("the executor saw %s, want INHIBIT,PREPARE,TERM", r.Signals())
			}
			d := r[2].At.Sub(r[1].At)
			switch {
			case second && d > 5*time.Second:
				t.Errorf("the second TERM left the drain running for %v", d)
			case !second && (d < 900*time.Millisecond || d > 5*time.Second):
				t.Errorf("TERM came %v after PrepareForShutdown, want just after the 1s delay", d)
			}
		})
	}
}

// Only the executor's processes may use the bus: the test process, which
// is not one, is refused.
func TestOnlyTheExecutorMayUseTheBus(t *testing.T) {
	i, _ := drainNode(t, asSubreaper, time.Hour, "--graceful-node-shutdown-delay=1s")
	kids, err := testenv.Children(i.Pid())
	must(t, err)
	if len(kids) != 1 {
		t.Fatalf("nodeinit's children: %v", kids)
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", kids[0]))
	must(t, err)
	var address string
	for kv := range strings.SplitSeq(string(environ), "\x00") {
		if a, ok := strings.CutPrefix(kv, "DBUS_SYSTEM_BUS_ADDRESS="); ok {
			address = a
		}
	}
	if address == "" {
		t.Fatal("the executor has no DBUS_SYSTEM_BUS_ADDRESS")
	}
	conn, err := dbus.Connect(address)
	if err == nil {
		conn.Close()
		t.Fatal("the test process, not the executor's, was let onto the bus")
	}
	i.WaitForLog(5*time.Second, 'I', "Refused a D-Bus connection", "may not use this bus")
	if code := i.Stop(10 * time.Second); code != 0 {
		t.Errorf("exit %d after TERM, want the executor's 0", code)
	}
}

// Without --graceful-node-shutdown the executor has no bus and gets TERM at
// once.
func TestWithoutGracefulShutdownTermGoesAtOnce(t *testing.T) {
	_, task := binaries(t)
	dir := t.TempDir()
	rec, report := filepath.Join(dir, "executor.rec"), filepath.Join(dir, "executor.json")
	i := start(t, asSubreaper, "--run-proxy=false", "--", task, "--record="+rec, "--report="+report)
	i.WaitForFile(10*time.Second, report)
	// The executor's environment is nodeinit's as to the bus: whatever
	// address the test had, or none, never one nodeinit made.
	want, had := os.LookupEnv("DBUS_SYSTEM_BUS_ADDRESS")
	var got string
	var has bool
	for _, kv := range testenv.ReadReport(t, report).Env {
		if v, ok := strings.CutPrefix(kv, "DBUS_SYSTEM_BUS_ADDRESS="); ok {
			got, has = v, true
		}
	}
	if got != want || has != had {
		t.Errorf("the executor got DBUS_SYSTEM_BUS_ADDRESS=%q (set: %v), want nodeinit's own %q (set: %v)", got, has, want, had)
	}
	i.Signal(syscall.SIGTERM)
	if code := i.Wait(10 * time.Second); code != 0 {
		t.Errorf("exit %d", code)
	}
	if got := recorded(rec); got != "TERM" {
		t.Errorf("the executor saw %s, want TERM", got)
	}
}
