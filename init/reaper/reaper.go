// Package reaper owns waiting for child processes. It is the only code in
// nodeinit that calls wait4: tasks are started through it, so that starting a
// child and registering its pid happen under the lock that reaping takes, and
// an exit status can never be taken by anyone else (docs/design.md, rule 1).
// Every other child the kernel hands us — orphans re-parented to PID 1 or to
// a child subreaper — is reaped and counted.
package reaper

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/internal/linux"
)

// Exit is the end of one tracked child.
type Exit struct {
	Pid    int
	Status unix.WaitStatus
}

// Code is the exit status a shell would report for the child: its exit code
// N, or 128+S when signal S killed it.
func (e Exit) Code() int { return Code(e.Status) }

func (e Exit) String() string { return Describe(e.Status) }

// Code converts a wait status into a shell-style exit code.
func Code(ws unix.WaitStatus) int {
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return 128 + int(ws.Signal())
	}
	return 255
}

// Describe renders a wait status for the log: "exit code 3" or "killed by
// signal SIGKILL".
func Describe(ws unix.WaitStatus) string {
	if ws.Signaled() {
		s := "killed by signal " + unix.SignalName(ws.Signal())
		if ws.CoreDump() {
			s += " (core dumped)"
		}
		return s
	}
	return fmt.Sprintf("exit code %d", ws.ExitStatus())
}

// Reaper starts tracked children and reaps every child.
type Reaper struct {
	mu      sync.Mutex
	tracked map[int]bool
	orphans uint64
}

// New returns a Reaper that tracks no child yet.
func New() *Reaper { return &Reaper{tracked: make(map[int]bool)} }

// Start starts a child with fork and exec and tracks its pid, so that its
// exit is returned by Reap instead of being counted as an orphan's.
// syscall.ForkExec rather than os.StartProcess: nodeinit waits by pid and
// wants no pidfd, and os.StartProcess would fork an extra probe child on
// its first use to find out whether pidfds work.
func (r *Reaper) Start(path string, argv []string, attr *syscall.ProcAttr) (pid int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err = syscall.ForkExec(path, argv, attr)
	if err != nil {
		return 0, err
	}
	r.tracked[pid] = true
	return pid, nil
}

// Reap collects every child that has ended, without blocking. It returns the
// exits of tracked children; the others are orphans, counted and discarded.
// none is true when no child at all is left (wait4 reports ECHILD). err is
// any other failure of wait4, which ends this round of reaping; it is not
// expected (EINVAL would mean bad arguments) and the caller logs it.
func (r *Reaper) Reap() (exits []Exit, none bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws unix.WaitStatus
		pid, err := linux.Wait4(-1, &ws, unix.WNOHANG)
		if errors.Is(err, unix.ECHILD) {
			return exits, true, nil
		}
		if err != nil || pid <= 0 {
			return exits, false, err
		}
		if r.tracked[pid] {
			delete(r.tracked, pid)
			exits = append(exits, Exit{Pid: pid, Status: ws})
		} else {
			r.orphans++
		}
	}
}

// Orphans returns how many untracked children have been reaped.
func (r *Reaper) Orphans() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.orphans
}

// BecomeSubreaper makes the calling process inherit its orphaned descendants
// when it is not PID 1, so that it can reap them like an init. It reports
// whether it had to (false for PID 1, which inherits them anyway).
func BecomeSubreaper() (bool, error) {
	if os.Getpid() == 1 {
		return false, nil
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return false, os.NewSyscallError("prctl(PR_SET_CHILD_SUBREAPER)", err)
	}
	return true, nil
}
