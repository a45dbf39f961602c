package supervisor

import (
	"time"

	"k8s.io/klog/v2"
)

// Draining the node before the executor stops, for a stop signal or for
// the host's own shutdown, and letting the host go on once it has.

// Drainer drains the node before the executor is asked to stop: with
// graceful node shutdown, the kubelet terminates its pods first.
type Drainer interface {
	// Drain begins and returns a channel closed once the node has drained.
	// It must return at once.
	Drain() <-chan struct{}
	// Timeout bounds the drain that begins now: the kubelet may have
	// changed the delay since nodeinit started (by reloading logind's
	// configuration).
	Timeout() time.Duration
	// Status is a short description for the status line.
	Status() string
	// Cancel calls off the drain that began (the host's shutdown was
	// cancelled): the kubelet is told, and the next Drain begins anew.
	// It must return at once.
	Cancel()
}

// Host is the host's own shutdown, where nodeinit holds a delay lock on
// the host's logind for the node (package hostlogind). Its methods must
// return at once.
type Host interface {
	// Shutdown delivers the host's PrepareForShutdown: true as the host
	// begins to shut down, false when that shutdown is cancelled.
	Shutdown() <-chan bool
	// Delay is the longest the host's shutdown waits for the node (its
	// InhibitDelayMax); 0 when unknown.
	Delay() time.Duration
	// Release lets the host's shutdown go on.
	Release()
}

// armDrain bounds the drain: it ends d from now.
func (s *Supervisor) armDrain(d time.Duration) {
	s.drainLimit.Reset(d)
	s.drainEnds = s.sys.Now().Add(d)
}

// endDrain lets the host go on and passes the held TERM or INT to the
// executor; after a drain for the host alone, the executor runs on.
func (s *Supervisor) endDrain(why string) {
	if s.phase != draining {
		return
	}
	s.drained = nil
	s.drainLimit.Stop()
	klog.InfoS("Drain over", "reason", why)
	s.releaseHost()
	if s.pending == 0 {
		s.phase, s.hostDone = running, true
		klog.InfoS("The node has drained for the host's shutdown; the executor runs on until the container is stopped")
		return
	}
	s.stopExecutor(s.pending)
}

// hostShutdown drains the node for the host's shutdown, or lets the host
// wait for the drain under way, within the host's delay; the host need
// not wait for a node that has drained or is stopping.
func (s *Supervisor) hostShutdown() {
	delay := s.cfg.Host.Delay()
	switch {
	case s.phase == running && !s.hostDone && s.executor.state == stateRunning:
		s.phase, s.pending, s.hostWaits = draining, 0, true
		s.drained = s.cfg.Drain.Drain()
		timeout := s.cfg.Drain.Timeout()
		if delay > 0 {
			timeout = min(timeout, delay)
		}
		s.armDrain(timeout)
		klog.InfoS("Draining the node for the host's shutdown", "timeout", timeout, "hostDelay", delay)
	case s.phase == draining:
		s.hostWaits = true
		if delay > 0 && s.sys.Now().Add(delay).Before(s.drainEnds) {
			s.armDrain(delay)
		}
		klog.InfoS("The host is shutting down too: it waits for the drain under way", "hostDelay", delay,
			"remaining", s.drainEnds.Sub(s.sys.Now()).Round(time.Millisecond))
	default:
		s.cfg.Host.Release()
		klog.InfoS("The host is shutting down: it need not wait for the node", "phase", s.phase, "drained", s.hostDone)
	}
}

// hostCancelled follows a cancelled shutdown of the host: a drain for it
// is called off, and a node drained for it takes pods again. A stop of the
// node's own goes on.
func (s *Supervisor) hostCancelled() {
	s.hostWaits = false
	switch {
	case s.phase == draining && s.pending == 0:
		s.drained = nil
		s.drainLimit.Stop()
		s.phase = running
		s.cfg.Drain.Cancel()
		klog.InfoS("The host's shutdown was cancelled: the drain is called off")
	case s.phase == running && s.hostDone:
		s.hostDone = false
		s.cfg.Drain.Cancel()
		klog.InfoS("The host's shutdown was cancelled: the node takes pods again")
	default:
		klog.InfoS("The host's shutdown was cancelled; the node's own stop goes on", "phase", s.phase)
	}
}

// releaseHost lets the host's shutdown go on, if it waits.
func (s *Supervisor) releaseHost() {
	if s.hostWaits {
		s.hostWaits = false
		s.cfg.Host.Release()
	}
}
