package supervisor

import (
	"cmp"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/init/reaper"
)

// The node's container runtime as a task: started first and waited for,
// respawned whatever the executor does, stopped after the proxy.

// Probe tells when the container runtime answers on its socket (package
// cri). Its methods must return at once.
type Probe interface {
	// Answered begins asking and returns a channel closed once the
	// runtime has answered; it asks until then or until Stop.
	Answered() <-chan struct{}
	// Why is the last reason the runtime did not answer, for the log.
	Why() string
	Stop()
}

// CodeRuntimeSilent is Run's status when the runtime has not answered on its
// socket within RuntimeWait: nodeinit's own failure.
const CodeRuntimeSilent = 1

// begin starts the runtime and waits for it to answer, or, without one,
// starts the node at once.
func (s *Supervisor) begin() {
	if s.runtime == nil {
		s.beginNode()
		return
	}
	s.phase = waiting
	s.start(s.runtime)
	s.answered = s.cfg.RuntimeProbe.Answered()
	s.waitLimit.Reset(s.cfg.RuntimeWait)
	klog.InfoS("Waiting for the container runtime to answer on its socket before the proxy and the executor start",
		"socket", s.cfg.RuntimeSocket, "timeout", s.cfg.RuntimeWait)
}

// runtimeAnswers ends the wait for the runtime: the node starts.
func (s *Supervisor) runtimeAnswers() {
	s.answered = nil
	s.waitLimit.Stop()
	s.answeredAt = s.sys.Now()
	klog.InfoS("The container runtime answers on its socket; starting the node", "socket", s.cfg.RuntimeSocket,
		"after", s.answeredAt.Sub(s.runtime.started).Round(time.Millisecond), "runtimeStarts", s.runtime.starts)
	s.phase = running
	s.beginNode()
}

// runtimeSilent ends the run when the runtime has not answered in time.
func (s *Supervisor) runtimeSilent() {
	if s.phase != waiting {
		return
	}
	s.answered = nil
	s.cfg.RuntimeProbe.Stop()
	klog.ErrorS(nil, "The container runtime did not answer on its socket in time; the executor is not started",
		"socket", s.cfg.RuntimeSocket, "timeout", s.cfg.RuntimeWait, "lastError", cmp.Or(s.cfg.RuntimeProbe.Why(), "none"),
		"runtime", cmp.Or(s.runtime.lastExit, "running"))
	s.exitCode = CodeRuntimeSilent
	s.shutdown("the container runtime did not answer")
}

// runtimeEnded respawns the runtime: the executor (the kubelet) reconnects
// to the runtime that comes back; nothing else restarts.
func (s *Supervisor) runtimeEnded(e reaper.Exit) {
	s.respawnedEnded(s.runtime, "Container runtime ended", e)
}

// stopNext, with a runtime, sends the shutdown's TERM to the next of the
// proxy, the runtime and the rest whose predecessors have ended: the
// runtime outlives the proxy, and its shims and their pods (reparented to
// nodeinit, in process groups of their own) outlive the runtime, as on a
// host where the runtime's service stops after the kubelet's.
func (s *Supervisor) stopNext() {
	switch {
	case s.proxy != nil && s.proxy.state == stateRunning:
		if !s.proxy.termed {
			s.proxy.termed = true
			s.signalTask(s.proxy, unix.SIGTERM)
			klog.InfoS("Sent TERM to the proxy", "pid", s.proxy.pid)
		}
	case s.runtime.state == stateRunning:
		if !s.runtime.termed {
			s.runtime.termed = true
			s.signalTask(s.runtime, unix.SIGTERM)
			klog.InfoS("Sent TERM to the container runtime", "pid", s.runtime.pid)
		}
	case !s.restTermed:
		s.restTermed = true
		s.killRest(unix.SIGTERM)
		klog.InfoS("Sent TERM to every other process: what is left of the runtime's shims and pods")
	}
}

// exists reports whether path names something: the runtime's socket, for
// the status line.
func exists(path string) bool {
	_, err := os.Lstat(filepath.Clean(path))
	return err == nil
}
