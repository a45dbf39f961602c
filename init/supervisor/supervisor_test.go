package supervisor

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/init/reaper"
	"github.com/nodeinit/nodeinit/init/signals"
)

// fakeSystem plays the kernel and the clock for the supervisor: it records
// what the supervisor starts and signals, hands back the exits a test
// scripts, and fires timers when the test moves its clock. Nothing runs.
type fakeSystem struct {
	now     time.Time
	nextPid int
	started []string // task paths, in order
	pids    []int    // live tracked pids
	failing map[string]error
	exits   []reaper.Exit
	reapErr error
	others  int // untracked processes left (KillRest reaches them)
	stuck   int // of them, how many no signal ends (uninterruptible)
	sent    []string
	timers  []*fakeTimer
}

func newFakeSystem() *fakeSystem {
	return &fakeSystem{now: time.Unix(1_000_000, 0), nextPid: 100, failing: map[string]error{}}
}

func (f *fakeSystem) Start(path string, argv []string, attr *syscall.ProcAttr) (int, error) {
	if err := f.failing[path]; err != nil {
		return 0, err
	}
	f.nextPid++
	f.started = append(f.started, path)
	f.pids = append(f.pids, f.nextPid)
	return f.nextPid, nil
}

func (f *fakeSystem) Reap() ([]reaper.Exit, bool, error) {
	exits := f.exits
	f.exits = nil
	for _, e := range exits {
		f.pids = slices.DeleteFunc(f.pids, func(p int) bool { return p == e.Pid })
	}
	return exits, len(f.pids) == 0 && f.others == 0, f.reapErr
}

func (f *fakeSystem) Orphans() uint64 { return 0 }

func (f *fakeSystem) Kill(pid int, sig syscall.Signal) error {
	f.sent = append(f.sent, fmt.Sprintf("%s>%d", signals.Name(sig), pid))
	return nil
}

func (f *fakeSystem) KillRest(sig syscall.Signal) error {
	f.sent = append(f.sent, signals.Name(sig)+">rest")
	if sig == unix.SIGKILL {
		f.others = f.stuck
	}
	return nil
}

func (f *fakeSystem) Leftovers() []string {
	out := make([]string, f.others)
	for i := range out {
		out[i] = fmt.Sprintf("%d (stuck) D", 900+i)
	}
	return out
}

func (f *fakeSystem) Describe(pid int) string { return fmt.Sprintf("%d (stuck) D", pid) }

func (f *fakeSystem) Now() time.Time { return f.now }

func (f *fakeSystem) NewTimer() timer {
	t := &fakeTimer{c: make(chan time.Time, 1), sys: f}
	f.timers = append(f.timers, t)
	return t
}

// takeSent returns the signals sent since the last call.
func (f *fakeSystem) takeSent() string {
	s := strings.Join(f.sent, " ")
	f.sent = nil
	return s
}

type fakeTimer struct {
	c     chan time.Time
	at    time.Time
	armed bool
	sys   *fakeSystem
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }
func (t *fakeTimer) Stop()               { t.armed = false }
func (t *fakeTimer) Reset(d time.Duration) {
	t.armed, t.at = true, t.sys.now.Add(d)
}

// harness is one supervisor over a fake system, driven step by step.
type harness struct {
	t   *testing.T
	sys *fakeSystem
	s   *Supervisor
	set *signals.Set
}

func newHarness(t *testing.T, change func(*Config)) *harness {
	t.Helper()
	sys := newFakeSystem()
	set := &signals.Set{Child: make(chan os.Signal, 1), Terminating: make(chan os.Signal, 8), Other: make(chan os.Signal, 64)}
	cfg := Config{
		Executor:    Task{Name: "executor", Path: "/bin/executor", Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr},
		Proxy:       &Task{Name: "proxy", Path: "/bin/proxy", Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr},
		Backoff:     Backoff{Initial: time.Second, Max: 4 * time.Second, Reset: time.Minute},
		GracePeriod: 10 * time.Second,
		Signals:     set,
	}
	if change != nil {
		change(&cfg)
	}
	h := &harness{t: t, sys: sys, s: newWith(cfg, sys), set: set}
	h.s.begin()
	return h
}

// pid of the n-th start (0-based).
func (h *harness) pid(n int) int { return 101 + n }

// advance moves the clock by d, firing the timers that come due on the way
// one at a time, in the order of their times, and handling each as it fires.
func (h *harness) advance(d time.Duration) {
	end := h.sys.now.Add(d)
	for !h.s.done {
		var next *fakeTimer
		for _, t := range h.sys.timers {
			if t.armed && !t.at.After(end) && (next == nil || t.at.Before(next.at)) {
				next = t
			}
		}
		if next == nil {
			break
		}
		h.sys.now, next.armed = next.at, false
		next.c <- h.sys.now
		h.s.step()
	}
	h.sys.now = end
}

func (h *harness) signal(sig syscall.Signal) {
	if signals.RouteOf(sig) == signals.Terminate {
		h.set.Terminating <- sig
	} else {
		h.set.Other <- sig
	}
	h.s.step()
}

// exit makes pid end with status and delivers the SIGCHLD.
func (h *harness) exit(pid int, ws unix.WaitStatus) {
	h.sys.exits = append(h.sys.exits, reaper.Exit{Pid: pid, Status: ws})
	h.set.Child <- unix.SIGCHLD
	h.s.step()
}

func (h *harness) wantSent(want string) {
	h.t.Helper()
	if got := h.sys.takeSent(); got != want {
		h.t.Errorf("signals sent: %q, want %q", got, want)
	}
}

func (h *harness) wantPhase(p phase) {
	h.t.Helper()
	if h.s.phase != p {
		h.t.Errorf("phase %v, want %v", h.s.phase, p)
	}
}

func exitCode(n int) unix.WaitStatus { return unix.WaitStatus(n << 8) }

func TestProxyStartsBeforeTheExecutor(t *testing.T) {
	h := newHarness(t, nil)
	if want := []string{"/bin/proxy", "/bin/executor"}; !slices.Equal(h.sys.started, want) {
		t.Errorf("started %v, want %v", h.sys.started, want)
	}
	h.wantPhase(running)
}

func TestTermGoesToTheExecutorThenTheProxyAfterItEnds(t *testing.T) {
	h := newHarness(t, nil)
	proxy, executor := h.pid(0), h.pid(1)
	h.signal(unix.SIGTERM)
	h.wantSent(fmt.Sprintf("TERM>-%d", executor))
	h.wantPhase(stopping)
	h.exit(executor, exitCode(0))
	h.wantSent(fmt.Sprintf("TERM>-%d TERM>rest", proxy))
	h.wantPhase(shutdown)
	h.exit(proxy, exitCode(0))
	if !h.s.done || h.s.exitCode != 0 {
		t.Errorf("done %v with %d, want done with the executor's 0", h.s.done, h.s.exitCode)
	}
}

// The hooks come once each, in the order of the node's life: the stop's
// at the first TERM, before the executor has it; the shutdown's when the
// executor has ended.
func TestHooksComeOnceEachInTheNodesOrder(t *testing.T) {
	var calls []string
	h := newHarness(t, func(c *Config) {
		c.OnExecutorStarted = func(pid int) { calls = append(calls, fmt.Sprintf("started %d", pid)) }
		c.OnStop = func() { calls = append(calls, "stop") }
		c.OnShutdown = func() { calls = append(calls, "shutdown") }
	})
	proxy, executor := h.pid(0), h.pid(1)
	h.signal(unix.SIGTERM)
	h.wantSent(fmt.Sprintf("TERM>-%d", executor))
	h.signal(unix.SIGINT)
	h.sys.takeSent()
	h.exit(executor, exitCode(0))
	h.exit(proxy, exitCode(0))
	if want := []string{fmt.Sprintf("started %d", executor), "stop", "shutdown"}; !slices.Equal(calls, want) {
		t.Errorf("hooks called %q, want %q", calls, want)
	}
}

func TestExecutorStillRunningAtTheGracePeriodIsKilled(t *testing.T) {
	h := newHarness(t, nil)
	executor := h.pid(1)
	h.signal(unix.SIGINT)
	h.sys.takeSent()
	h.advance(9 * time.Second)
	h.wantSent("")
	h.signal(unix.SIGTERM) // a second signal does not extend the grace period
	h.sys.takeSent()
	h.advance(time.Second)
	h.wantSent(fmt.Sprintf("KILL>-%d", executor))
	h.exit(executor, unix.WaitStatus(unix.SIGKILL))
	if h.s.exitCode != 137 {
		t.Errorf("exit code %d, want 137", h.s.exitCode)
	}
}

// An executor that KILL does not end (uninterruptible sleep, frozen) holds
// nodeinit no longer than the grace period and ReapBound: then the
// shutdown goes on without it, bounded as ever, and the exit code is 137.
func TestAnExecutorThatSurvivesKillDoesNotHoldTheStop(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.ReapBound = 2 * time.Second })
	proxy, executor := h.pid(0), h.pid(1)
	h.signal(unix.SIGTERM)
	h.advance(10 * time.Second)
	h.wantSent(fmt.Sprintf("TERM>-%d KILL>-%d", executor, executor))
	h.advance(2*time.Second - time.Millisecond)
	h.wantPhase(stopping)
	h.advance(time.Millisecond)
	h.wantPhase(shutdown)
	h.wantSent(fmt.Sprintf("TERM>-%d TERM>rest", proxy))
	h.exit(proxy, exitCode(0))
	if h.s.done {
		t.Fatal("done with the executor still unreaped before the shutdown's own bound")
	}
	h.advance(12 * time.Second)
	if !h.s.done || h.s.exitCode != 137 {
		t.Errorf("done %v with %d, want done with 137 after the shutdown's bound", h.s.done, h.s.exitCode)
	}
}

// An executor that ends after nodeinit went on without it gives its own
// status, and starts no second shutdown.
func TestAnExecutorThatEndsLateGivesItsStatus(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.ReapBound = 2 * time.Second })
	proxy, executor := h.pid(0), h.pid(1)
	h.signal(unix.SIGTERM)
	h.advance(12 * time.Second)
	h.wantPhase(shutdown)
	h.sys.takeSent()
	h.exit(executor, unix.WaitStatus(unix.SIGKILL))
	h.wantSent("")
	h.exit(proxy, exitCode(0))
	if !h.s.done || h.s.exitCode != 137 {
		t.Errorf("done %v with %d, want done with the executor's 137", h.s.done, h.s.exitCode)
	}
}

// The stop signals of other runtimes (PWR from LXC and Incus, SIGRTMIN+3
// from systemd-style images) stop the node as TERM does, drain first
// included, and reach the executor as TERM, which a Go kubelet handles.
func TestPwrAndRtmin3StopTheNodeAsTerm(t *testing.T) {
	for _, sig := range []syscall.Signal{unix.SIGPWR, 37} {
		t.Run(signals.Name(sig), func(t *testing.T) {
			d := &fakeDrainer{drained: make(chan struct{})}
			h := newHarness(t, func(c *Config) { c.Drain = d })
			proxy, executor := h.pid(0), h.pid(1)
			h.signal(sig)
			h.wantPhase(draining)
			h.wantSent("")
			close(d.drained)
			h.s.step()
			h.wantSent(fmt.Sprintf("TERM>-%d", executor))
			h.exit(executor, exitCode(0))
			h.wantSent(fmt.Sprintf("TERM>-%d TERM>rest", proxy))
		})
	}
}

func TestSignalsAreRoutedByTheTable(t *testing.T) {
	h := newHarness(t, nil)
	proxy, executor := h.pid(0), h.pid(1)
	h.signal(unix.SIGHUP)
	h.wantSent(fmt.Sprintf("HUP>-%d HUP>-%d", executor, proxy))
	for _, sig := range []syscall.Signal{unix.SIGQUIT, unix.SIGUSR2, unix.SIGWINCH, unix.SIGSEGV, unix.SIGCONT, unix.SIGTSTP, 40} {
		h.signal(sig)
		h.wantSent(fmt.Sprintf("%s>-%d", signals.Name(sig), executor))
	}
	h.signal(unix.SIGUSR1) // the status line, never passed on
	h.wantSent("")
	h.wantPhase(running)
}

func TestProxyIsRespawnedWithBackoffUntilShutdown(t *testing.T) {
	h := newHarness(t, nil)
	h.exit(h.pid(0), exitCode(1))
	if h.s.proxy.state != stateBackoff {
		t.Fatalf("proxy %v after exiting, want backoff", h.s.proxy.state)
	}
	h.advance(999 * time.Millisecond)
	if len(h.sys.started) != 2 {
		t.Fatalf("restarted before its backoff of 1s: %v", h.sys.started)
	}
	h.advance(time.Millisecond)
	if len(h.sys.started) != 3 || h.s.proxy.pid != h.pid(2) {
		t.Fatalf("not restarted after 1s: %v", h.sys.started)
	}
	h.exit(h.pid(2), exitCode(1)) // a quick exit again: the backoff doubles
	h.advance(time.Second)
	if len(h.sys.started) != 3 {
		t.Fatal("restarted after 1s, want 2s")
	}
	// The executor ends meanwhile: the pending restart never comes.
	h.exit(h.pid(1), exitCode(4))
	h.advance(time.Minute)
	if len(h.sys.started) != 3 {
		t.Errorf("the proxy was restarted during the shutdown: %v", h.sys.started)
	}
	if !h.s.done || h.s.exitCode != 4 {
		t.Errorf("done %v with %d, want done with 4", h.s.done, h.s.exitCode)
	}
}

func TestAProxyThatCannotStartIsRetriedOnItsBackoff(t *testing.T) {
	h := newHarness(t, func(c *Config) {})
	h.sys.failing["/bin/proxy"] = unix.EAGAIN
	h.exit(h.pid(0), exitCode(1))
	h.advance(time.Second) // the restart fails
	if h.s.proxy.state != stateBackoff || !strings.Contains(h.s.proxy.lastExit, "not started") {
		t.Fatalf("proxy %v, last exit %q; want backoff after a failed start", h.s.proxy.state, h.s.proxy.lastExit)
	}
	delete(h.sys.failing, "/bin/proxy")
	h.advance(2 * time.Second)
	if h.s.proxy.state != stateRunning {
		t.Errorf("proxy %v after its next backoff, want running", h.s.proxy.state)
	}
}

func TestAnExecutorThatCannotStartEndsTheRunWithItsCode(t *testing.T) {
	sys := newFakeSystem()
	sys.failing["/bin/executor"] = &cannotStart{Task: "executor", Path: "/bin/executor", Err: unix.EACCES, Code: codeNotExecutable}
	set := &signals.Set{Child: make(chan os.Signal, 1), Terminating: make(chan os.Signal, 1), Other: make(chan os.Signal, 1)}
	s := newWith(Config{Executor: Task{Name: "executor", Path: "/bin/executor", Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}, Signals: set}, sys)
	s.begin()
	if !s.done || s.exitCode != codeNotExecutable {
		t.Errorf("done %v with %d, want done at once with 126", s.done, s.exitCode)
	}
}

// After the grace period of the shutdown, every reap kills again: what a
// leftover forked while the last kill went round is reached by the next.
func TestLeftoversAreKilledAgainAfterEveryReap(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Proxy = nil })
	h.sys.others = 3
	h.exit(h.pid(0), exitCode(0))
	h.wantSent("TERM>rest")
	h.advance(10 * time.Second)
	h.wantSent("KILL>rest")
	h.wantPhase(killing)
	h.sys.others = 1 // one was forked meanwhile and is left
	h.set.Child <- unix.SIGCHLD
	h.s.step()
	h.wantSent("KILL>rest")
	h.set.Child <- unix.SIGCHLD
	h.s.step()
	if !h.s.done {
		t.Error("not done once every leftover is reaped")
	}
}

// What no signal ends (a process in uninterruptible sleep) keeps nodeinit
// no longer than the grace period and the reap bound.
func TestShutdownIsBoundedWhenLeftoversCannotBeReaped(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Proxy, c.ReapBound = nil, 2*time.Second })
	h.sys.others, h.sys.stuck = 2, 2
	h.exit(h.pid(0), exitCode(5))
	h.advance(10 * time.Second)
	h.set.Child <- unix.SIGCHLD
	h.s.step()
	if h.s.done {
		t.Fatal("done while leftovers remain, before the bound")
	}
	h.advance(2*time.Second - time.Millisecond)
	if h.s.done {
		t.Fatal("done before the bound")
	}
	h.advance(time.Millisecond)
	if !h.s.done || h.s.exitCode != 5 {
		t.Errorf("done %v with %d at the bound, want done with the executor's 5", h.s.done, h.s.exitCode)
	}
}

func TestAWait4FailureIsReportedAndReapingGoesOn(t *testing.T) {
	h := newHarness(t, nil)
	h.sys.reapErr = os.NewSyscallError("wait4", unix.EINVAL)
	h.exit(h.pid(1), exitCode(3))
	h.sys.reapErr = nil
	if h.s.phase != shutdown || h.s.exitCode != 3 {
		t.Errorf("phase %v, exit code %d: the exits reaped before the error were lost", h.s.phase, h.s.exitCode)
	}
}

func TestExitCodeOfAStartError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{&cannotStart{Code: codeNotFound}, 127},
		{fmt.Errorf("wrapped: %w", &cannotStart{Code: codeNotFound}), 127},
		{&cannotStart{Code: codeNotExecutable}, 126},
		{errors.New("anything else"), 126},
	} {
		if got := exitCodeOf(tc.err); got != tc.want {
			t.Errorf("ExitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
