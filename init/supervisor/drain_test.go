package supervisor

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/init/signals"
)

type fakeDrainer struct {
	begun, cancelled int
	drained          chan struct{}
}

func (d *fakeDrainer) Drain() <-chan struct{} { d.begun++; return d.drained }

func (d *fakeDrainer) Status() string { return "fake" }

func (d *fakeDrainer) Timeout() time.Duration { return time.Minute }

func (d *fakeDrainer) Cancel() { d.cancelled++; d.drained = make(chan struct{}) }

// fakeHost is the host's logind as package hostlogind follows it.
type fakeHost struct {
	events   chan bool
	delay    time.Duration
	released int
}

func (f *fakeHost) Shutdown() <-chan bool { return f.events }

func (f *fakeHost) Delay() time.Duration { return f.delay }

func (f *fakeHost) Release() { f.released++ }

// hostHarness is a supervisor with a drainer and a host whose delay is
// hostDelay.
func hostHarness(t *testing.T, hostDelay time.Duration) (*harness, *fakeDrainer, *fakeHost) {
	d := &fakeDrainer{drained: make(chan struct{})}
	host := &fakeHost{events: make(chan bool, 4), delay: hostDelay}
	h := newHarness(t, func(c *Config) { c.Drain, c.Host = d, host })
	return h, d, host
}

// hostShutdown delivers the host's PrepareForShutdown(start).
func (h *harness) hostShutdown(host *fakeHost, start bool) {
	host.events <- start
	h.s.step()
}

func (h *harness) wantDrain(d *fakeDrainer, begun, cancelled int, host *fakeHost, released int) {
	h.t.Helper()
	if d.begun != begun || d.cancelled != cancelled || host.released != released {
		h.t.Errorf("drains begun %d, cancelled %d, host released %d; want %d, %d, %d",
			d.begun, d.cancelled, host.released, begun, cancelled, released)
	}
}

// The host's shutdown drains the node and then lets the host go on; the
// executor runs on, and the TERM that comes when the runtime stops the
// container goes to it at once, without a second drain.
func TestTheHostsShutdownDrainsTheNodeAndTheExecutorRunsOn(t *testing.T) {
	h, d, host := hostHarness(t, 30*time.Second)
	h.hostShutdown(host, true)
	h.wantPhase(draining)
	h.wantDrain(d, 1, 0, host, 0)
	close(d.drained)
	h.s.step()
	h.wantPhase(running)
	h.wantDrain(d, 1, 0, host, 1)
	h.wantSent("")
	h.advance(time.Hour) // no bound left armed ends anything
	h.wantSent("")
	h.signal(unix.SIGTERM)
	h.wantSent(fmt.Sprintf("TERM>-%d", h.pid(1)))
	h.wantPhase(stopping)
	h.wantDrain(d, 1, 0, host, 1)
}

// The drain for the host ends at the host's delay when it is the smaller
// bound, and at the node's own otherwise.
func TestTheHostsDrainEndsAtTheSmallerBound(t *testing.T) {
	for _, tc := range []struct {
		hostDelay, bound time.Duration
	}{
		{20 * time.Second, 20 * time.Second},
		{5 * time.Minute, time.Minute}, // fakeDrainer's Timeout
		{0, time.Minute},               // the host's unknown
	} {
		t.Run(tc.hostDelay.String(), func(t *testing.T) {
			h, d, host := hostHarness(t, tc.hostDelay)
			h.hostShutdown(host, true)
			h.advance(tc.bound - time.Millisecond)
			h.wantDrain(d, 1, 0, host, 0)
			h.advance(time.Millisecond)
			h.wantDrain(d, 1, 0, host, 1)
			h.wantPhase(running)
			h.wantSent("")
		})
	}
}

// A TERM during the host's drain drains nothing more: the executor gets it
// when that drain is over, within the host's bound.
func TestATermDuringTheHostsDrainWaitsForIt(t *testing.T) {
	h, d, host := hostHarness(t, 30*time.Second)
	h.hostShutdown(host, true)
	h.advance(10 * time.Second)
	h.signal(unix.SIGTERM)
	h.wantSent("")
	h.wantPhase(draining)
	h.advance(20*time.Second - time.Millisecond)
	h.wantSent("")
	h.advance(time.Millisecond)
	h.wantSent(fmt.Sprintf("TERM>-%d", h.pid(1)))
	h.wantPhase(stopping)
	h.wantDrain(d, 1, 0, host, 1)
}

// The host's shutdown during a drain for a TERM waits for that drain, no
// longer than the host's delay, and is let go when it ends.
func TestTheHostsShutdownDuringATermsDrainWaitsForIt(t *testing.T) {
	t.Run("drained", func(t *testing.T) {
		h, d, host := hostHarness(t, 30*time.Second)
		h.signal(unix.SIGTERM)
		h.hostShutdown(host, true)
		h.wantDrain(d, 1, 0, host, 0)
		close(d.drained)
		h.s.step()
		h.wantSent(fmt.Sprintf("TERM>-%d", h.pid(1)))
		h.wantDrain(d, 1, 0, host, 1)
	})
	t.Run("the host's delay", func(t *testing.T) {
		h, d, host := hostHarness(t, 5*time.Second)
		h.signal(unix.SIGTERM)
		h.advance(time.Second)
		h.hostShutdown(host, true)
		h.advance(5*time.Second - time.Millisecond)
		h.wantSent("")
		h.advance(time.Millisecond)
		h.wantSent(fmt.Sprintf("TERM>-%d", h.pid(1)))
		h.wantDrain(d, 1, 0, host, 1)
	})
	t.Run("the node's bound, the smaller", func(t *testing.T) {
		h, d, host := hostHarness(t, 5*time.Minute)
		h.signal(unix.SIGTERM)
		h.hostShutdown(host, true)
		h.advance(time.Minute)
		h.wantSent(fmt.Sprintf("TERM>-%d", h.pid(1)))
		h.wantDrain(d, 1, 0, host, 1)
	})
}

// The host need not wait for a node that is stopping already.
func TestTheHostsShutdownDoesNotWaitForAStoppingNode(t *testing.T) {
	h, d, host := hostHarness(t, 30*time.Second)
	h.signal(unix.SIGTERM)
	close(d.drained)
	h.s.step()
	h.wantPhase(stopping)
	h.hostShutdown(host, true)
	h.wantDrain(d, 1, 0, host, 1)
}

// A cancelled shutdown of the host calls the drain off, or lets a node
// drained for it take pods again; either way the next stop drains again.
func TestACancelledHostShutdownCallsTheDrainOff(t *testing.T) {
	t.Run("during the drain", func(t *testing.T) {
		h, d, host := hostHarness(t, 30*time.Second)
		h.hostShutdown(host, true)
		h.hostShutdown(host, false)
		h.wantPhase(running)
		h.wantDrain(d, 1, 1, host, 0)
		h.advance(time.Hour)
		h.wantPhase(running)
		h.signal(unix.SIGTERM)
		h.wantPhase(draining)
		h.wantDrain(d, 2, 1, host, 0)
	})
	t.Run("after the drain", func(t *testing.T) {
		h, d, host := hostHarness(t, 30*time.Second)
		h.hostShutdown(host, true)
		close(d.drained)
		h.s.step()
		h.hostShutdown(host, false)
		h.wantPhase(running)
		h.wantDrain(d, 1, 1, host, 1)
		h.hostShutdown(host, true)
		h.wantPhase(draining)
		h.wantDrain(d, 2, 1, host, 1)
	})
	t.Run("during a TERM's drain", func(t *testing.T) {
		h, d, host := hostHarness(t, 30*time.Second)
		h.signal(unix.SIGTERM)
		h.hostShutdown(host, true)
		h.hostShutdown(host, false)
		h.wantPhase(draining)
		h.wantDrain(d, 1, 0, host, 0)
		close(d.drained)
		h.s.step()
		h.wantSent(fmt.Sprintf("TERM>-%d", h.pid(1)))
		h.wantDrain(d, 1, 0, host, 0)
	})
}

// An executor that ends while the node drains for the host lets the host
// go on.
func TestAnExecutorThatEndsDuringTheHostsDrainLetsTheHostGoOn(t *testing.T) {
	h, d, host := hostHarness(t, 30*time.Second)
	h.hostShutdown(host, true)
	h.exit(h.pid(1), exitCode(0))
	h.wantPhase(shutdown)
	h.wantDrain(d, 1, 0, host, 1)
}

func TestTheNodeDrainsBeforeTheExecutorGetsTerm(t *testing.T) {
	d := &fakeDrainer{drained: make(chan struct{})}
	h := newHarness(t, func(c *Config) { c.Drain = d })
	executor := h.pid(1)
	h.signal(unix.SIGTERM)
	h.wantPhase(draining)
	h.wantSent("")
	if d.begun != 1 {
		t.Fatalf("drain begun %d times, want once", d.begun)
	}
	close(d.drained)
	h.s.step()
	h.wantSent(fmt.Sprintf("TERM>-%d", executor))
	h.wantPhase(stopping)
}

func TestADrainEndsAtItsTimeoutOrASecondTerm(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(h *harness)
		want syscall.Signal
	}{
		{"timeout", func(h *harness) { h.advance(time.Millisecond) }, unix.SIGINT},
		{"second TERM", func(h *harness) { h.signal(unix.SIGTERM) }, unix.SIGTERM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &fakeDrainer{drained: make(chan struct{})}
			h := newHarness(t, func(c *Config) { c.Drain = d })
			h.signal(unix.SIGINT)
			h.advance(time.Minute - time.Millisecond)
			h.wantPhase(draining)
			tc.end(h)
			h.wantSent(fmt.Sprintf("%s>-%d", signals.Name(tc.want), h.pid(1)))
			h.wantPhase(stopping)
		})
	}
}

func TestAnExecutorThatEndsWhileTheNodeDrainsShutsDown(t *testing.T) {
	d := &fakeDrainer{drained: make(chan struct{})}
	h := newHarness(t, func(c *Config) { c.Drain = d })
	h.signal(unix.SIGTERM)
	h.exit(h.pid(1), exitCode(0))
	h.wantPhase(shutdown)
	h.advance(time.Minute) // the drain's timer was stopped
	h.wantSent(fmt.Sprintf("TERM>-%d TERM>rest KILL>-%d KILL>rest", h.pid(0), h.pid(0)))
}
