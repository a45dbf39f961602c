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
package supervisor

import (
	"cmp"
	"os"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/init/oomscore"
	"github.com/nodeinit/nodeinit/init/reaper"
	"github.com/nodeinit/nodeinit/init/signals"
)

// Task is a program that nodeinit runs in its own process group.
type Task struct {
	Name string // "executor", "proxy" or "runtime", for the log
	// Path is the program: a path, or a name looked up in the PATH of Env
	// when the task starts (see resolve).
	Path string
	Args []string
	Env  []string
	// Stdin, Stdout and Stderr are handed to the child as they are: the
	// child writes to the same files as nodeinit, nothing copies.
	Stdin, Stdout, Stderr *os.File
	// Foreground makes the task's process group the foreground group of
	// the terminal on Stdin, which must be nodeinit's controlling terminal
	// (see ControllingTerminal): it may then read the terminal, and the
	// terminal's Ctrl-C and Ctrl-Z reach it.
	Foreground bool
}

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
	// OnExecutorStarted (with the executor's pid) and OnShutdown, when
	// set, are called from the loop once each; they must not block.
	OnExecutorStarted func(pid int)
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

type state int

const (
	stateNew     state = iota // not started yet
	stateRunning              // pid is live
	stateBackoff              // waiting for its next start
	stateExited               // ended, not to be started again
)

func (s state) String() string {
	return [...]string{"new", "running", "backoff", "exited"}[s]
}

type task struct {
	Task
	state    state
	pid      int
	started  time.Time
	starts   int
	lastExit string
	backoff  Backoff
	termed   bool // has had the TERM of the shutdown (with a runtime)
}

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
	return newWith(cfg, newKernel(cmp.Or(cfg.ProcRoot, "/proc"), cfg.OOMScore))
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

func (s *Supervisor) executorEnded(e reaper.Exit) {
	s.ended(s.executor, e)
	s.exitCode = e.Code()
	klog.InfoS("Executor ended", "pid", e.Pid, "status", e.String(), "exitCode", s.exitCode)
	if s.phase < shutdown { // else it ended after giveUp had gone on without it
		s.shutdown("the executor ended")
	}
}

func (s *Supervisor) proxyEnded(e reaper.Exit) {
	ran := s.ended(s.proxy, e)
	if s.phase >= shutdown {
		klog.InfoS("Proxy ended", "pid", e.Pid, "status", e.String())
		return
	}
	s.scheduleRespawn(s.proxy, ran, e.String())
}

// ended records a task's end and returns how long it ran.
func (s *Supervisor) ended(t *task, e reaper.Exit) time.Duration {
	t.state = stateExited
	t.lastExit = e.String()
	return s.sys.Now().Sub(t.started)
}

func (s *Supervisor) scheduleRespawn(t *task, ran time.Duration, why string) {
	delay := t.backoff.next(ran)
	t.state = stateBackoff
	if t == s.runtime {
		klog.InfoS("Container runtime ended; restarting after backoff", "reason", why, "ran", ran.Round(time.Millisecond), "backoff", delay)
		s.rtRespawn.Reset(delay)
		return
	}
	klog.InfoS("Proxy ended; restarting after backoff", "reason", why, "ran", ran.Round(time.Millisecond), "backoff", delay)
	s.respawn.Reset(delay)
}

// start starts a task in its own process group, on nodeinit's files, in the
// terminal's foreground when asked (docs/design.md, rule 7). A proxy that
// fails to start (fork failing with EAGAIN under a pids limit, say) is tried
// again after its backoff; the executor's failure is returned.
func (s *Supervisor) start(t *task) error {
	sys := &syscall.SysProcAttr{Setpgid: true}
	if t.Foreground {
		sys.Foreground, sys.Ctty = true, int(t.Stdin.Fd())
	}
	attr := &syscall.ProcAttr{
		Env:   t.Env,
		Files: []uintptr{t.Stdin.Fd(), t.Stdout.Fd(), t.Stderr.Fd()},
		Sys:   sys,
	}
	argv := append([]string{t.Path}, t.Args...)
	pid, err := s.sys.Start(t.Path, argv, attr)
	t.started = s.sys.Now()
	if err != nil {
		err = classifyStartError(t.Name, t.Path, err)
		klog.ErrorS(err, "Task not started", "task", t.Name)
		t.lastExit = "not started: " + err.Error()
		if t != s.executor && s.phase < shutdown {
			s.scheduleRespawn(t, 0, "start failed")
		} else {
			t.state = stateExited
		}
		return err
	}
	if t.starts > 0 {
		klog.InfoS("Restarted task", "task", t.Name, "pid", pid, "restarts", t.starts)
	} else {
		klog.InfoS("Started task", "task", t.Name, "pid", pid, "path", t.Path)
	}
	t.pid, t.state = pid, stateRunning
	t.starts++
	return nil
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

// signalTask signals a running task's process group, or the task alone if
// it has left its group.
func (s *Supervisor) signalTask(t *task, sig syscall.Signal) {
	if t == nil || t.state != stateRunning {
		return
	}
	if err := s.sys.Kill(-t.pid, sig); err != nil {
		_ = s.sys.Kill(t.pid, sig)
	}
}

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
