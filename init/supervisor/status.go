package supervisor

import (
	"cmp"
	"os"
	"runtime"
	"time"

	"k8s.io/klog/v2"
)

// The status dump that SIGUSR1 asks for (signals.Status): nodeinit's own
// line, one per task, the runtime's and the drain's.

// logStatus logs nodeinit's own line, then one per task. Its goroutines and
// the Go runtime's memory are what a soak of a real node watches for a leak
// (nodeinit has no debug endpoint, and /proc shows only threads and pages):
// whether resident memory that grows is live objects, or the heap the
// runtime keeps for the next collection.
func (s *Supervisor) logStatus() {
	m := readGoMemory()
	klog.InfoS("Init status", "pid", os.Getpid(), "goroutines", runtime.NumGoroutine(),
		"heapLive", m.heapLive, "heapGoal", m.heapGoal, "heapHeld", m.heapHeld,
		"stacks", m.stacks, "goMapped", m.mapped, "gcCycles", m.gcCycles)
	for _, t := range []*task{s.executor, s.proxy, s.runtime} {
		if t == nil {
			continue
		}
		pid := 0
		if t.state == stateRunning {
			pid = t.pid
		}
		klog.InfoS("Task status", "task", t.Name, "pid", pid, "state", t.state, "phase", s.phase,
			"started", t.started.UTC().Format(time.RFC3339), "restarts", max(t.starts-1, 0),
			"lastExit", cmp.Or(t.lastExit, "none"), "backoff", t.backoff.Current())
	}
	if s.runtime != nil {
		answered := "not yet"
		if !s.answeredAt.IsZero() {
			answered = s.answeredAt.UTC().Format(time.RFC3339)
		}
		klog.InfoS("Container runtime status", "socket", s.cfg.RuntimeSocket, "socketExists", exists(s.cfg.RuntimeSocket),
			"answered", answered, "waitTimeout", s.cfg.RuntimeWait)
	}
	if s.cfg.Drain != nil {
		klog.InfoS("Node drain status", "phase", s.phase, "drain", s.cfg.Drain.Status(), "hostWaits", s.hostWaits, "drainedForHost", s.hostDone)
	}
}
