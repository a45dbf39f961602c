package supervisor

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeProbe is the runtime's socket: it answers when the test closes it.
type fakeProbe struct {
	answered chan struct{}
	asked    int
	stopped  bool
}

func (p *fakeProbe) Answered() <-chan struct{} { p.asked++; return p.answered }
func (p *fakeProbe) Why() string               { return "dial unix /run/rt.sock: connect: no such file or directory" }
func (p *fakeProbe) Stop()                     { p.stopped = true }

// runtimeHarness runs a runtime (pid 101), then the proxy (102) and the
// executor (103) once the probe has answered.
func runtimeHarness(t *testing.T, change func(*Config)) (*harness, *fakeProbe) {
	t.Helper()
	probe := &fakeProbe{answered: make(chan struct{})}
	h := newHarness(t, func(c *Config) {
		c.Runtime = &Task{Name: "runtime", Path: "/bin/runtime", Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
		c.RuntimeProbe, c.RuntimeSocket, c.RuntimeWait = probe, "/run/rt.sock", 30*time.Second
		if change != nil {
			change(c)
		}
	})
	return h, probe
}

// answer makes the runtime answer and handles it.
func (h *harness) answer(p *fakeProbe) {
	close(p.answered)
	h.s.step()
}

func (h *harness) wantStarted(want ...string) {
	h.t.Helper()
	if !slices.Equal(h.sys.started, want) {
		h.t.Errorf("started %v, want %v", h.sys.started, want)
	}
}

func TestTheExecutorStartsOnlyOnceTheRuntimeAnswers(t *testing.T) {
	h, probe := runtimeHarness(t, nil)
	h.wantStarted("/bin/runtime")
	h.wantPhase(waiting)
	if probe.asked != 1 {
		t.Errorf("the probe was asked %d times, want 1", probe.asked)
	}
	h.advance(29 * time.Second)
	h.wantStarted("/bin/runtime")
	h.answer(probe)
	h.wantStarted("/bin/runtime", "/bin/proxy", "/bin/executor")
	h.wantPhase(running)
	h.advance(time.Minute) // the wait's bound is off
	h.wantPhase(running)
}

func TestARuntimeThatNeverAnswersEndsTheRunWithOne(t *testing.T) {
	h, probe := runtimeHarness(t, nil)
	h.advance(30 * time.Second)
	h.wantPhase(shutdown)
	h.wantSent(fmt.Sprintf("TERM>-%d", h.pid(0)))
	if !probe.stopped {
		t.Error("the probe goes on asking")
	}
	h.exit(h.pid(0), exitCode(0))
	h.wantSent("TERM>rest")
	h.set.Child <- unix.SIGCHLD
	h.s.step()
	if !h.s.done || h.s.exitCode != CodeRuntimeSilent {
		t.Errorf("done %v with %d, want done with %d", h.s.done, h.s.exitCode, CodeRuntimeSilent)
	}
	h.wantStarted("/bin/runtime")
}

func TestATermWhileWaitingForTheRuntimeStopsItWithoutStartingTheExecutor(t *testing.T) {
	h, probe := runtimeHarness(t, nil)
	h.signal(unix.SIGTERM)
	h.wantPhase(shutdown)
	h.wantSent(fmt.Sprintf("TERM>-%d", h.pid(0)))
	if !probe.stopped {
		t.Error("the probe goes on asking")
	}
	h.exit(h.pid(0), exitCode(0))
	h.wantSent("TERM>rest")
	h.set.Child <- unix.SIGCHLD
	h.s.step()
	if !h.s.done || h.s.exitCode != 128+int(unix.SIGTERM) {
		t.Errorf("done %v with %d, want done with 143", h.s.done, h.s.exitCode)
	}
	h.wantStarted("/bin/runtime")
}

func TestARuntimeThatDiesWhileWaitedForIsRespawnedWithinTheBound(t *testing.T) {
	h, probe := runtimeHarness(t, nil)
	h.exit(h.pid(0), exitCode(1))
	h.advance(time.Second)
	h.wantStarted("/bin/runtime", "/bin/runtime")
	h.wantPhase(waiting)
	h.answer(probe)
	h.wantStarted("/bin/runtime", "/bin/runtime", "/bin/proxy", "/bin/executor")
}

func TestTheRuntimeIsRespawnedWithBackoffAndTheExecutorUntouched(t *testing.T) {
	h, probe := runtimeHarness(t, nil)
	h.answer(probe)
	executor := h.pid(2)
	h.exit(h.pid(0), unix.WaitStatus(unix.SIGKILL))
	h.advance(999 * time.Millisecond)
	h.wantStarted("/bin/runtime", "/bin/proxy", "/bin/executor")
	h.advance(time.Millisecond)
	h.wantStarted("/bin/runtime", "/bin/proxy", "/bin/executor", "/bin/runtime")
	h.exit(h.pid(3), exitCode(1)) // a quick exit again: the backoff doubles
	h.advance(time.Second)
	if len(h.sys.started) != 4 {
		t.Fatalf("restarted after 1s, want 2s: %v", h.sys.started)
	}
	h.advance(time.Second)
	h.wantStarted("/bin/runtime", "/bin/proxy", "/bin/executor", "/bin/runtime", "/bin/runtime")
	h.wantSent("")
	if h.s.executor.state != stateRunning || h.s.executor.pid != executor || probe.asked != 1 {
		t.Errorf("executor %v pid %d (want running, %d); probe asked %d times, want 1", h.s.executor.state, h.s.executor.pid, executor, probe.asked)
	}
	// The proxy has a backoff sequence of its own.
	if h.s.proxy.backoff.Current() != 0 {
		t.Errorf("the proxy's backoff is %v, want untouched", h.s.proxy.backoff.Current())
	}
}

func TestTheShutdownStopsTheExecutorTheProxyTheRuntimeThenTheRest(t *testing.T) {
	h, probe := runtimeHarness(t, nil)
	h.answer(probe)
	runtime, proxy, executor := h.pid(0), h.pid(1), h.pid(2)
	h.sys.others = 2 // shims
	h.signal(unix.SIGTERM)
	h.wantSent(fmt.Sprintf("TERM>-%d", executor))
	h.exit(executor, exitCode(0))
	h.wantSent(fmt.Sprintf("TERM>-%d", proxy))
	h.set.Child <- unix.SIGCHLD // a leftover's end: no step further
	h.s.step()
	h.wantSent("")
	h.exit(proxy, exitCode(0))
	h.wantSent(fmt.Sprintf("TERM>-%d", runtime))
	h.exit(runtime, exitCode(0))
	h.wantSent("TERM>rest")
	h.sys.others = 0
	h.set.Child <- unix.SIGCHLD
	h.s.step()
	if !h.s.done || h.s.exitCode != 0 {
		t.Errorf("done %v with %d, want done with 0", h.s.done, h.s.exitCode)
	}
}

func TestTheShutdownWithARuntimeIsBoundedByTheGracePeriod(t *testing.T) {
	h, probe := runtimeHarness(t, nil)
	h.answer(probe)
	runtime, proxy, executor := h.pid(0), h.pid(1), h.pid(2)
	h.exit(executor, exitCode(3))
	h.wantSent(fmt.Sprintf("TERM>-%d", proxy))
	h.advance(10 * time.Second) // the proxy ignores TERM
	h.wantSent(fmt.Sprintf("KILL>-%d KILL>-%d KILL>rest", proxy, runtime))
	h.wantPhase(killing)
	h.exit(proxy, unix.WaitStatus(unix.SIGKILL))
	h.exit(runtime, unix.WaitStatus(unix.SIGKILL))
	if !h.s.done || h.s.exitCode != 3 {
		t.Errorf("done %v with %d, want done with the executor's 3", h.s.done, h.s.exitCode)
	}
}

func TestARuntimeInBackoffAtTheShutdownIsNotRestarted(t *testing.T) {
	h, probe := runtimeHarness(t, func(c *Config) { c.Proxy = nil })
	h.answer(probe)
	runtime, executor := h.pid(0), h.pid(1)
	h.exit(runtime, exitCode(1))
	h.exit(executor, exitCode(0))
	h.wantSent("TERM>rest")
	h.advance(time.Minute)
	h.wantStarted("/bin/runtime", "/bin/executor")
}
