package supervisor

import (
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/init/signals"
)

// The stop sequence: a stop signal passed to the executor with its grace
// period, then the shutdown of the rest once the executor has ended, KILL
// when the grace period is over, and the end of the run when nothing can
// be reaped any more.

// terminate handles the stop signals: drain first when asked to, else pass it
// to the executor and start its grace period.
func (s *Supervisor) terminate(sig syscall.Signal) {
	switch {
	case s.phase == waiting:
		fwd := signals.ForExecutor(sig)
		s.answered = nil
		s.cfg.RuntimeProbe.Stop()
		s.exitCode = 128 + int(fwd)
		klog.InfoS("Stopped before the container runtime answered: the executor is not started", "signal", signals.Name(sig))
		s.shutdown("stopped before the executor started")
	case s.phase == running && s.hostDone:
		klog.InfoS("The node has drained for the host's shutdown already: no second drain", "signal", signals.Name(sig))
		s.stopExecutor(sig)
	case s.phase == running && s.cfg.Drain != nil && s.executor.state == stateRunning:
		s.phase, s.pending = draining, sig
		s.drained = s.cfg.Drain.Drain()
		timeout := s.cfg.Drain.Timeout()
		s.armDrain(timeout)
		klog.InfoS("Draining the node before the executor stops", "signal", signals.Name(sig), "timeout", timeout)
	case s.phase == draining && s.pending == 0:
		// The drain for the host's shutdown goes on, within its bound,
		// which is the smaller already.
		s.pending = sig
		klog.InfoS("The node is draining for the host's shutdown: the executor gets the signal when the drain is over",
			"signal", signals.Name(sig), "remaining", s.drainEnds.Sub(s.sys.Now()).Round(time.Millisecond))
	case s.phase == draining:
		s.pending = sig
		s.endDrain("a second " + signals.Name(sig) + " came")
	default:
		s.stopExecutor(sig)
	}
}

// stopExecutor passes a stop signal on, as TERM or INT (signals.ForExecutor).
func (s *Supervisor) stopExecutor(sig syscall.Signal) {
	fwd := signals.ForExecutor(sig)
	// Passed on before it is logged: the log can wait.
	s.signalTask(s.executor, fwd)
	kv := []any{"signal", signals.Name(fwd)}
	if fwd != sig {
		kv = append(kv, "received", signals.Name(sig))
	}
	if s.phase >= shutdown {
		s.signalTask(s.proxy, fwd)
		klog.InfoS("Forwarded signal to the proxy", kv...)
		return
	}
	klog.InfoS("Forwarded signal to the executor", kv...)
	if s.executor.state == stateRunning && !s.graceArmed {
		// The grace period runs from the first TERM; more do not extend it.
		s.phase, s.graceArmed = stopping, true
		s.grace.Reset(s.cfg.GracePeriod)
	}
}

// shutdown begins the end: the proxy and every other process get TERM now
// and KILL when the grace period is over; whatever is left ReapBound after
// that is named and left behind.
func (s *Supervisor) shutdown(why string) {
	s.phase = shutdown
	s.respawn.Stop()
	s.rtRespawn.Stop()
	s.waitLimit.Stop()
	s.drainLimit.Stop()
	s.drained = nil
	s.releaseHost()
	s.grace.Reset(s.cfg.GracePeriod)
	s.deadline.Reset(s.cfg.GracePeriod + s.cfg.ReapBound)
	if s.runtime == nil {
		s.signalTask(s.proxy, unix.SIGTERM)
		s.killRest(unix.SIGTERM)
		klog.InfoS("Shutting down: sent TERM to the proxy and every other process", "reason", why, "gracePeriod", s.cfg.GracePeriod)
	} else {
		klog.InfoS("Shutting down: the proxy first, then the container runtime, then what is left of its shims and pods",
			"reason", why, "gracePeriod", s.cfg.GracePeriod)
		s.stopNext()
	}
	if s.cfg.OnShutdown != nil {
		s.cfg.OnShutdown()
	}
}

func (s *Supervisor) graceExpired() {
	if s.phase < shutdown {
		if s.executor.state == stateRunning {
			klog.InfoS("Executor still running after the grace period; killing its process group", "pid", s.executor.pid, "gracePeriod", s.cfg.GracePeriod)
			s.signalTask(s.executor, unix.SIGKILL)
			// An executor that survives KILL (in uninterruptible sleep,
			// frozen) must not hold nodeinit here for ever.
			s.deadline.Reset(s.cfg.ReapBound)
		}
		return
	}
	s.phase = killing
	klog.InfoS("Grace period over; killing what is left", "gracePeriod", s.cfg.GracePeriod)
	s.signalTask(s.proxy, unix.SIGKILL)
	s.signalTask(s.runtime, unix.SIGKILL)
	s.killRest(unix.SIGKILL)
}

// giveUp ends the run ReapBound after the grace period with what cannot be
// reaped still there: a process in uninterruptible sleep, say. Before the
// shutdown it gives up on the executor alone, which KILL has not ended
// within ReapBound: the shutdown goes on without it, and nodeinit exits as
// though the KILL had taken effect, 128+9, unless the executor ends after
// all.
func (s *Supervisor) giveUp() {
	if s.phase < shutdown {
		klog.ErrorS(nil, "The executor could not be reaped after KILL; shutting down without it", "bound", s.cfg.ReapBound,
			"process", s.sys.Describe(s.executor.pid))
		s.exitCode = 128 + int(unix.SIGKILL)
		s.shutdown("the executor could not be reaped")
		return
	}
	left := s.sys.Leftovers()
	klog.ErrorS(nil, "Exiting with processes that could not be reaped", "bound", s.cfg.GracePeriod+s.cfg.ReapBound,
		"count", len(left), "processes", strings.Join(left, ", "))
	s.done = true
}

func (s *Supervisor) killRest(sig syscall.Signal) {
	if err := s.sys.KillRest(sig); err != nil {
		klog.ErrorS(err, "Cannot signal the remaining processes", "signal", signals.Name(sig))
	}
}
