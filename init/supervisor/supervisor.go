// Package supervisor is nodeinit's PID-1 loop. It starts the executor (the
// main task) and the proxy (a respawned sidecar), and then does what tini
// does, in one goroutine: wait for a signal or a timer, reap or forward or
// respawn, repeat. When the executor dies it shuts everything else down —
// executor first, proxy last — and returns the executor's exit status.
package supervisor

import (
	"cmp"
	"errors"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/init/proctree"
	"github.com/nodeinit/nodeinit/init/reaper"
)

// Task is a program that nodeinit runs in its own process group.
type Task struct {
	Name string // "executor" or "proxy", for the log
	Path string // resolved, see Resolve
	Args []string
	Env  []string
	// Stdin, Stdout and Stderr are handed to the child as they are: the
	// child writes to the same files as nodeinit, nothing copies.
	Stdin, Stdout, Stderr *os.File
}

// Config is what Run needs.
type Config struct {
	Executor Task
	Proxy    *Task // nil: no proxy
	Backoff  Backoff
	// GracePeriod is how long a forwarded TERM or INT leaves the executor
	// before its process group is killed, and how long the rest gets after
	// the executor has died.
	GracePeriod time.Duration
	// ProcRoot is the proc filesystem ("/proc"), read at shutdown when
	// nodeinit is a subreaper and must find its descendants.
	ProcRoot string
	// Signals, when set, come from CatchSignals, called as early as
	// possible so that a TERM arriving while nodeinit prepares is kept and
	// forwarded once the executor runs. Run catches them itself if nil.
	Signals *Signals
	// OnExecutorStarted and OnShutdown, when set, are called from the loop
	// once each; they must not block.
	OnExecutorStarted func()
	OnShutdown        func()
}

// Signals that the loop handles. Only these are caught: the Go runtime
// uses others (SIGURG) for itself.
var (
	terminating = []os.Signal{unix.SIGTERM, unix.SIGINT}
	// Forwarded to the executor and the proxy.
	toBoth = []os.Signal{unix.SIGHUP}
	// Forwarded to the executor alone: they are meant for the main task.
	toExecutor = []os.Signal{unix.SIGQUIT, unix.SIGUSR2, unix.SIGWINCH}
	other      = concat(toBoth, toExecutor, []os.Signal{unix.SIGUSR1})
)

// Signals are the channels the loop's signals arrive on. os/signal drops a
// signal when its channel is full, so each kind has a channel of its own:
// a storm of HUPs or USR1s can fill only theirs, never hide the TERM that
// follows it, nor a SIGCHLD (one pending SIGCHLD is enough, since every
// wakeup reaps all children that have ended).
type Signals struct {
	child       chan os.Signal
	terminating chan os.Signal
	other       chan os.Signal
	caught      chan struct{} // closed once every signal is caught
}

// CatchSignals starts catching the signals that Run handles, and returns
// without waiting: os/signal enables each signal with a round trip to the
// runtime's signal thread, eight cross-thread wakeups that would delay the
// start by a third of a millisecond. They run on their own goroutine while
// nodeinit prepares, SIGCHLD and TERM/INT first; Run waits for them before
// the first fork.
func CatchSignals() *Signals {
	s := &Signals{
		child:       make(chan os.Signal, 1),
		terminating: make(chan os.Signal, 8),
		other:       make(chan os.Signal, 64),
		caught:      make(chan struct{}),
	}
	go func() {
		signal.Notify(s.child, unix.SIGCHLD)
		signal.Notify(s.terminating, terminating...)
		signal.Notify(s.other, other...)
		close(s.caught)
	}()
	return s
}

func concat(lists ...[]os.Signal) (out []os.Signal) {
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
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
}

// Supervisor runs one executor and an optional proxy. Use it once.
type Supervisor struct {
	cfg      Config
	reaper   *reaper.Reaper
	isInit   bool
	executor *task
	proxy    *task
	exitCode int

	shuttingDown bool
	graceArmed   bool
	respawn      *time.Timer // the proxy's next start
	grace        *time.Timer // executor kill, or, in shutdown, kill of the rest
}

// New prepares a Supervisor; Run starts the tasks.
func New(cfg Config) *Supervisor {
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	s := &Supervisor{
		cfg:      cfg,
		reaper:   reaper.New(),
		isInit:   os.Getpid() == 1,
		executor: &task{Task: cfg.Executor},
		respawn:  stoppedTimer(),
		grace:    stoppedTimer(),
	}
	if cfg.Proxy != nil {
		s.proxy = &task{Task: *cfg.Proxy, backoff: cfg.Backoff}
	}
	return s
}

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// Run starts the proxy and the executor, supervises them and every orphan
// until the executor has died and everything else is gone, and returns the
// executor's exit status (128+S for a signal, 126 or 127 when it could not
// be started).
func (s *Supervisor) Run() int {
	// Catch SIGCHLD before the first fork, so no child's end goes unnoticed.
	sigs := s.cfg.Signals
	if sigs == nil {
		sigs = CatchSignals()
	}
	<-sigs.caught

	if s.proxy != nil {
		s.start(s.proxy)
	}
	if err := s.start(s.executor); err != nil {
		s.exitCode = CodeNotExecutable
		var se *StartError
		if errors.As(err, &se) {
			s.exitCode = se.Code
		}
		s.shutdown("executor could not be started")
	} else if s.cfg.OnExecutorStarted != nil {
		s.cfg.OnExecutorStarted()
	}

	for !s.shuttingDown || !s.reap() {
		select {
		case <-sigs.child:
			s.reap()
		case sig := <-sigs.terminating:
			s.handleSignal(sig.(syscall.Signal))
		case sig := <-sigs.other:
			s.handleSignal(sig.(syscall.Signal))
		case <-s.respawn.C:
			if !s.shuttingDown {
				s.start(s.proxy)
			}
		case <-s.grace.C:
			s.graceExpired()
		}
	}
	klog.InfoS("All processes have ended", "exitCode", s.exitCode, "orphansReaped", s.reaper.Orphans())
	return s.exitCode
}

func (s *Supervisor) handleSignal(sig syscall.Signal) {
	switch sig {
	// Each signal is passed on before it is logged: the log can wait.
	case unix.SIGTERM, unix.SIGINT:
		s.signalTask(s.executor, sig)
		klog.InfoS("Forwarded signal to the executor", "signal", unix.SignalName(sig))
		if s.shuttingDown {
			s.signalTask(s.proxy, sig)
		} else if s.executor.state == stateRunning && !s.graceArmed {
			// The grace period runs from the first TERM; more do not extend it.
			s.graceArmed = true
			s.grace.Reset(s.cfg.GracePeriod)
		}
	case unix.SIGHUP:
		s.signalTask(s.executor, sig)
		s.signalTask(s.proxy, sig)
		klog.InfoS("Forwarded signal to the executor and the proxy", "signal", unix.SignalName(sig))
	case unix.SIGQUIT, unix.SIGUSR2, unix.SIGWINCH:
		s.signalTask(s.executor, sig)
		klog.V(2).InfoS("Forwarded signal to the executor", "signal", unix.SignalName(sig))
	case unix.SIGUSR1:
		s.logStatus()
	}
}

// reap collects every child that ended and reports whether none is left.
func (s *Supervisor) reap() (none bool) {
	exits, none := s.reaper.Reap()
	for _, e := range exits {
		switch {
		case e.Pid == s.executor.pid && s.executor.state == stateRunning:
			s.executorEnded(e)
		case s.proxy != nil && e.Pid == s.proxy.pid && s.proxy.state == stateRunning:
			s.proxyEnded(e)
		}
	}
	return none
}

func (s *Supervisor) executorEnded(e reaper.Exit) {
	s.ended(s.executor, e)
	s.exitCode = e.Code()
	klog.InfoS("Executor ended", "pid", e.Pid, "status", e.String(), "exitCode", s.exitCode)
	s.shutdown("executor ended")
}

func (s *Supervisor) proxyEnded(e reaper.Exit) {
	ran := s.ended(s.proxy, e)
	if s.shuttingDown {
		klog.InfoS("Proxy ended", "pid", e.Pid, "status", e.String())
		return
	}
	s.scheduleRespawn(ran, e.String())
}

// ended records a task's end and returns how long it ran.
func (s *Supervisor) ended(t *task, e reaper.Exit) time.Duration {
	t.state = stateExited
	t.lastExit = e.String()
	return time.Since(t.started)
}

func (s *Supervisor) scheduleRespawn(ran time.Duration, why string) {
	delay := s.proxy.backoff.Next(ran)
	s.proxy.state = stateBackoff
	klog.InfoS("Proxy ended; restarting after backoff", "reason", why, "ran", ran.Round(time.Millisecond), "backoff", delay)
	s.respawn.Reset(delay)
}

// start starts a task in its own process group. A proxy that fails to start
// (fork failing with EAGAIN under a pids limit, say) is tried again after its
// backoff; the executor's failure is returned.
func (s *Supervisor) start(t *task) error {
	attr := &syscall.ProcAttr{
		Env:   t.Env,
		Files: []uintptr{t.Stdin.Fd(), t.Stdout.Fd(), t.Stderr.Fd()},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	}
	argv := append([]string{t.Path}, t.Args...)
	pid, err := s.reaper.Start(t.Path, argv, attr)
	t.started = time.Now()
	if err != nil {
		err = startError(t.Name, t.Path, err)
		klog.ErrorS(err, "Task not started", "task", t.Name)
		t.lastExit = "not started: " + err.Error()
		if t == s.proxy && !s.shuttingDown {
			s.scheduleRespawn(0, "start failed")
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
// and KILL when the grace period is over.
func (s *Supervisor) shutdown(why string) {
	s.shuttingDown = true
	s.respawn.Stop()
	s.signalTask(s.proxy, unix.SIGTERM)
	s.signalRest(unix.SIGTERM)
	s.grace.Reset(s.cfg.GracePeriod)
	klog.InfoS("Shutting down: sent TERM to the proxy and every other process", "reason", why, "gracePeriod", s.cfg.GracePeriod)
	if s.cfg.OnShutdown != nil {
		s.cfg.OnShutdown()
	}
}

func (s *Supervisor) graceExpired() {
	if !s.shuttingDown {
		if s.executor.state == stateRunning {
			klog.InfoS("Executor still running after the grace period; killing its process group", "pid", s.executor.pid, "gracePeriod", s.cfg.GracePeriod)
			s.signalTask(s.executor, unix.SIGKILL)
		}
		return
	}
	klog.InfoS("Grace period over; killing what is left", "gracePeriod", s.cfg.GracePeriod)
	s.signalTask(s.proxy, unix.SIGKILL)
	s.signalRest(unix.SIGKILL)
}

// signalTask signals a running task's process group, or the task alone if
// it has left its group.
func (s *Supervisor) signalTask(t *task, sig syscall.Signal) {
	if t == nil || t.state != stateRunning {
		return
	}
	if err := unix.Kill(-t.pid, sig); errors.Is(err, unix.ESRCH) {
		_ = unix.Kill(t.pid, sig)
	}
}

// signalRest signals every process nodeinit is responsible for: as PID 1,
// every process of the pid namespace; as a subreaper, its descendants.
func (s *Supervisor) signalRest(sig syscall.Signal) {
	if s.isInit {
		if err := unix.Kill(-1, sig); err != nil && !errors.Is(err, unix.ESRCH) {
			klog.ErrorS(err, "Cannot signal the processes of the namespace", "signal", unix.SignalName(sig))
		}
		return
	}
	pids, err := proctree.Descendants(s.cfg.ProcRoot, os.Getpid())
	if err != nil {
		klog.ErrorS(err, "Cannot list descendants", "signal", unix.SignalName(sig))
		return
	}
	for _, pid := range pids {
		_ = unix.Kill(pid, sig)
	}
}

func (s *Supervisor) logStatus() {
	for _, t := range []*task{s.executor, s.proxy} {
		if t == nil {
			continue
		}
		pid := 0
		if t.state == stateRunning {
			pid = t.pid
		}
		klog.InfoS("Task status", "task", t.Name, "pid", pid, "state", t.state,
			"started", t.started.UTC().Format(time.RFC3339), "restarts", max(t.starts-1, 0),
			"lastExit", cmp.Or(t.lastExit, "none"), "backoff", t.backoff.Current())
	}
}
