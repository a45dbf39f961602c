package supervisor

import (
	"os"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/init/reaper"
)

// A task's life: started in its own process group, signalled, ended,
// respawned after its backoff.

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

type state int

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

func (s *Supervisor) executorEnded(e reaper.Exit) {
	s.ended(s.executor, e)
	s.exitCode = e.Code()
	klog.InfoS("Executor ended", "pid", e.Pid, "status", e.String(), "exitCode", s.exitCode)
	if s.phase < shutdown { // else it ended after giveUp had gone on without it
		s.shutdown("the executor ended")
	}
}

func (s *Supervisor) proxyEnded(e reaper.Exit) { s.respawnedEnded(s.proxy, "Proxy ended", e) }

// respawnedEnded records the end of the proxy or the runtime (logged as
// ended) and, before the shutdown, starts it again after its backoff.
func (s *Supervisor) respawnedEnded(t *task, ended string, e reaper.Exit) {
	ran := s.ended(t, e)
	if s.phase >= shutdown {
		klog.InfoS(ended, "pid", e.Pid, "status", e.String())
		return
	}
	s.scheduleRespawn(t, ran, e.String())
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
