// Package supervisor is nodeinit's PID-1 loop. It starts the executor (the
// main task), the proxy (a respawned sidecar) and, when asked, the node's
// container runtime (respawned too, started first and stopped last), and
// then does what tini does, in one goroutine: wait for a signal or a timer,
// reap or forward or respawn, repeat. When the executor dies it shuts
// everything else down — executor first, then the proxy, then the runtime,
// then what is left — and returns the executor's exit status.
//
// The phases of a run (docs/design.md, "The shutdown"; rule 8 bounds them):
//
//	waiting      the runtime has started; the proxy and the executor wait
//	             for it to answer on its socket, within RuntimeWait
//	running      the executor runs; the proxy (and the runtime) are
//	             respawned with backoff
//	draining     a stop signal (TERM, INT, PWR, SIGRTMIN+3) came, or the
//	             host is shutting down (Host), and a Drainer drains the
//	             node first; after a drain for the host alone the phase is
//	             running again, the executor left running
//	stopping     the executor has the TERM or INT, and the grace period
//	shutdown     the executor has ended: TERM to the proxy and the rest;
//	             with a runtime, TERM to the proxy, once it has ended to the
//	             runtime, once that has ended to the rest (its shims, pods)
//	killing      the grace period is over: KILL to what is left, again
//	             after every reap, for at most ReapBound
//
// supervisor.go is the loop and what it waits for; task.go a task's start,
// end and respawn; runtime.go the container runtime's wait and stop;
// drain.go the drain, for a stop signal or the host's shutdown; stop.go
// the stop sequence and the shutdown; status.go the status dump; system.go
// the kernel and the clock it asks.
package supervisor

import (
	"cmp"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/init/footprint"
	"github.com/nodeinit/nodeinit/init/oomscore"
	"github.com/nodeinit/nodeinit/init/signals"
)

// Config is what Run needs.
type Config struct {
	Executor Task
	Proxy    *Task // nil: no proxy
	// Runtime, when set, is the node's container runtime: it starts
	// first, the proxy and the executor once RuntimeProbe says it answers
	// on RuntimeSocket; if that takes longer than RuntimeWait, Run stops
	// it and returns 1. It is respawned with Backoff (its own sequence)
	// whatever happens to the executor, and stopped after the proxy.
	Runtime       *Task
	RuntimeProbe  Probe
	RuntimeSocket string
	RuntimeWait   time.Duration
	// Backoff spaces the restarts of the proxy and of the runtime.
	Backoff Backoff
	// GracePeriod is how long a forwarded TERM or INT leaves the executor
	// before its process group is killed, and how long the rest gets after
	// the executor has died.
	GracePeriod time.Duration
	// ReapBound is how long, after the grace period of the shutdown,
	// nodeinit goes on killing and reaping what is left before it exits
	// anyway, naming what it could not reap (default DefaultReapBound).
	ReapBound time.Duration
	// Drain, when set, is asked to drain the node when the first stop
	// signal arrives; the signal reaches the executor once it has drained,
	// after its Timeout, or when a second stop signal comes.
	Drain Drainer
	// Host, when set with Drain, drains the node when the host shuts
	// down, bounded by the host's delay too, and then lets the host go
	// on; the executor keeps running, as a kubelet on the host does, until
	// the container is stopped: the TERM that comes then goes to it at
	// once. A stop signal and the host's shutdown, in either order, drain
	// the node once, and the drain ends at the earlier of their bounds.
	Host Host
	// ProcRoot is the proc filesystem ("/proc"), read at shutdown to find
	// nodeinit's descendants.
	ProcRoot string
	// Signals come from signals.CatchTerminating, called first thing, with
	// CatchBeforeFork under way; Run waits for it before the first fork,
	// and catches the rest (CatchForwarded) once the executor has started.
	Signals *signals.Set
	// OOMScore, when set, is nodeinit's OOM score adjustment, lowered:
	// every child starts at the value nodeinit started with instead.
	OOMScore *oomscore.Score
	// HugePages, when set, is nodeinit's transparent-huge-page setting,
	// disabled: every child starts with the kernel's own instead.
	HugePages *footprint.HugePages
	// OnExecutorStarted (with the executor's pid), OnStop (at the first
	// TERM or INT, before it is handled) and OnShutdown, when set, are
	// called from the loop once each; they must not block.
	OnExecutorStarted func(pid int)
	OnStop            func()
	OnShutdown        func()
}

// defaultReapBound is Config.ReapBound's default.
const defaultReapBound = 2 * time.Second

type phase int

const (
	waiting phase = iota
	running
	draining
	stopping
	shutdown
	killing
)

func (p phase) String() string {
	return [...]string{"waiting", "running", "draining", "stopping", "shutdown", "killing"}[p]
}

const (
	stateNew     state = iota // not started yet
	stateRunning              // pid is live
	stateBackoff              // waiting for its next start
	stateExited               // ended, not to be started again
)

// Supervisor runs one executor, an optional proxy and an optional
// runtime. Use it once.
type Supervisor struct {
	cfg      Config
	sys      system
	sigs     *signals.Set
	executor *task
	proxy    *task
	runtime  *task
	exitCode int

	phase      phase
	done       bool
	graceArmed bool           // the executor's grace period runs
	pending    syscall.Signal // the TERM or INT held while the node drains; 0: a drain for the host alone
	drained    <-chan struct{}
	drainEnds  time.Time       // when drainLimit fires
	host       <-chan bool     // Host's PrepareForShutdown
	hostWaits  bool            // the host waits for this drain's end
	hostDone   bool            // the node has drained for the host; the executor runs on
	answered   <-chan struct{} // the runtime answers (RuntimeProbe), while waiting
	answeredAt time.Time
	restTermed bool // the rest has had the TERM of the shutdown (with a runtime)

	respawn    timer // the proxy's next start
	rtRespawn  timer // the runtime's next start
	waitLimit  timer // the end of the wait for the runtime
	grace      timer // executor kill, or, in shutdown, kill of the rest
	drainLimit timer // the end of the drain
	deadline   timer // the end of the shutdown, come what may
}

// New prepares a Supervisor; Run starts the tasks.
func New(cfg Config) *Supervisor {
	return newWith(cfg, newKernel(cmp.Or(cfg.ProcRoot, "/proc"), cfg.OOMScore, cfg.HugePages))
}

func newWith(cfg Config, sys system) *Supervisor {
	if cfg.ReapBound <= 0 {
		cfg.ReapBound = defaultReapBound
	}
	s := &Supervisor{
		cfg:        cfg,
		sys:        sys,
		sigs:       cfg.Signals,
		executor:   &task{Task: cfg.Executor},
		phase:      running,
		respawn:    sys.NewTimer(),
		rtRespawn:  sys.NewTimer(),
		waitLimit:  sys.NewTimer(),
		grace:      sys.NewTimer(),
		drainLimit: sys.NewTimer(),
		deadline:   sys.NewTimer(),
	}
	if cfg.Proxy != nil {
		s.proxy = &task{Task: *cfg.Proxy, backoff: cfg.Backoff}
	}
	if cfg.Runtime != nil {
		s.runtime = &task{Task: *cfg.Runtime, backoff: cfg.Backoff}
	}
	if cfg.Host != nil && cfg.Drain != nil {
		s.host = cfg.Host.Shutdown()
	}
	return s
}

// Run starts the runtime, the proxy and the executor, supervises them and
// every orphan until the executor has died and everything else is gone, and
// returns the executor's exit status: N, 128+S for a signal, 126 or 127 when
// it could not be started. A runtime or a proxy that cannot be found fails
// the same way before anything starts. A runtime that does not answer
// within RuntimeWait makes it 1 (CodeRuntimeSilent), and a stop signal
// that comes before it has answered 128+S.
func (s *Supervisor) Run() int {
	for _, t := range []*task{s.runtime, s.proxy, s.executor} {
		if t == nil {
			continue
		}
		path, err := resolve(t.Name, t.Path, getenv(t.Env, "PATH"))
		if err != nil {
			klog.ErrorS(err, "Cannot start", "task", t.Name)
			return exitCodeOf(err)
		}
		t.Path = path
	}
	// CHLD and every signal that would end or stop nodeinit are caught
	// before the first fork: no child's end goes unnoticed, and nothing
	// sent meanwhile kills nodeinit with its children running.
	s.sigs.Wait()
	s.begin()
	for !s.done {
		s.step()
	}
	klog.InfoS("All processes have ended", "exitCode", s.exitCode, "orphansReaped", s.sys.Orphans())
	return s.exitCode
}

// beginNode starts the proxy and the executor: the proxy first, so the
// node's service routing is up when the executor starts pods.
func (s *Supervisor) beginNode() {
	if s.proxy != nil {
		s.start(s.proxy)
	}
	if err := s.start(s.executor); err != nil {
		s.exitCode = exitCodeOf(err)
		s.shutdown("the executor could not be started")
		s.reap() // no SIGCHLD comes when nothing was started
		return
	}
	// First what waits for the executor's pid (the node's bus admits it),
	// then, there being someone to pass them to, the other signals.
	if s.cfg.OnExecutorStarted != nil {
		s.cfg.OnExecutorStarted(s.executor.pid)
	}
	s.sigs.CatchForwarded()
}

// step waits for one event and handles it.
func (s *Supervisor) step() {
	select {
	case <-s.sigs.Child:
		s.reap()
	case sig := <-s.sigs.Terminating:
		if s.cfg.OnStop != nil {
			s.cfg.OnStop()
			s.cfg.OnStop = nil
		}
		s.terminate(sig.(syscall.Signal))
	case sig := <-s.sigs.Other:
		s.handle(sig.(syscall.Signal))
	case <-s.respawn.C():
		if s.phase < shutdown {
			s.start(s.proxy)
		}
	case <-s.rtRespawn.C():
		if s.phase < shutdown {
			s.start(s.runtime)
		}
	case <-s.answered:
		s.runtimeAnswers()
	case <-s.waitLimit.C():
		s.runtimeSilent()
	case start, ok := <-s.host:
		switch {
		case !ok:
			s.host = nil
		case start:
			s.hostShutdown()
		default:
			s.hostCancelled()
		}
	case <-s.drained:
		s.endDrain("the node has drained")
	case <-s.drainLimit.C():
		s.endDrain("the drain timeout is over")
	case <-s.grace.C():
		s.graceExpired()
	case <-s.deadline.C():
		s.giveUp()
	}
}

// handle routes every caught signal but CHLD and the stop signals.
func (s *Supervisor) handle(sig syscall.Signal) {
	switch signals.RouteOf(sig) {
	case signals.Both:
		s.signalTask(s.executor, sig)
		s.signalTask(s.proxy, sig)
		klog.InfoS("Forwarded signal to the executor and the proxy", "signal", signals.Name(sig))
	case signals.Status:
		s.logStatus()
	default:
		s.signalTask(s.executor, sig)
		klog.V(2).InfoS("Forwarded signal to the executor", "signal", signals.Name(sig))
	}
}

// reap collects every child that ended. In the shutdown it ends the run when
// no child is left; once the grace period is over it kills again whatever
// is still there, since a process that forked while the last kill went
// round is now nodeinit's to kill.
func (s *Supervisor) reap() {
	exits, none, err := s.sys.Reap()
	if err != nil {
		klog.ErrorS(err, "Reaping failed; trying again at the next SIGCHLD")
	}
	for _, e := range exits {
		switch {
		case e.Pid == s.executor.pid && s.executor.state == stateRunning:
			s.executorEnded(e)
		case s.proxy != nil && e.Pid == s.proxy.pid && s.proxy.state == stateRunning:
			s.proxyEnded(e)
		case s.runtime != nil && e.Pid == s.runtime.pid && s.runtime.state == stateRunning:
			s.runtimeEnded(e)
		}
	}
	if s.phase == shutdown && s.runtime != nil {
		s.stopNext()
	}
	switch {
	case s.phase >= shutdown && none:
		s.done = true
	case s.phase == killing:
		s.killRest(unix.SIGKILL)
	}
}
