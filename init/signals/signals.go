// Package signals owns nodeinit's signal table: which signals it catches,
// what it does with each (the Route), which it leaves alone, and catching
// them early enough that none is lost while nodeinit starts (docs/design.md,
// rules 2 and 3).
//
// nodeinit passes on every signal that can be caught, as tini and dumb-init
// do, with four exceptions: SIGCHLD (it reaps), SIGUSR1 (it logs a status
// line), and the signals the Go runtime keeps for itself — SIGURG
// (goroutine preemption), SIGPROF (the runtime's profiler takes it before
// any handler could) and signals 32, 33 and 34 (the thread-control signals
// of glibc, of the Go runtime itself and of musl). SIGKILL and SIGSTOP
// cannot be caught. A fault signal (SEGV, BUS, FPE, ILL, TRAP, SYS, ABRT)
// that another process sends is caught and passed on like any other; a real
// fault inside nodeinit still crashes it with the runtime's trace, because
// the Go runtime tells the two apart by the signal's origin.
//
// A signal that is ignored when nodeinit starts stays ignored, for nodeinit
// and, by inheritance, for its children: nodeinit does not catch it. The Go
// runtime keeps an inherited SIG_IGN only for SIGHUP and SIGINT, and leaves
// SIGTSTP, SIGTTIN, SIGTTOU and SIGCONT untouched; for every other signal it
// installs its own handler before nodeinit's code runs, so an inherited
// SIG_IGN of, say, SIGQUIT cannot be seen and that signal is passed on.
package signals

import (
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Route is what nodeinit does with a signal it catches.
type Route int

const (
	// Reap: collect every child that ended (SIGCHLD).
	Reap Route = iota
	// Terminate: stop the node: pass TERM (INT as INT) to the executor's
	// process group and start the grace period (see Stop).
	Terminate
	// Both: pass it to the executor's and the proxy's process groups (HUP).
	Both
	// Executor: pass it to the executor's process group (every other one).
	Executor
	// Status: log a status line (USR1).
	Status
)

// RouteOf says what nodeinit does with sig.
func RouteOf(sig syscall.Signal) Route {
	switch sig {
	case unix.SIGCHLD:
		return Reap
	case unix.SIGTERM, unix.SIGINT, unix.SIGPWR, sigRTMin3:
		return Terminate
	case unix.SIGHUP:
		return Both
	case unix.SIGUSR1:
		return Status
	}
	return Executor
}

// sigRTMin3 is SIGRTMIN+3 as glibc, systemd, podman and Docker number it
// (glibc's SIGRTMIN is 34): the stop signal of systemd-style images.
const sigRTMin3 syscall.Signal = 37

// Stop are the signals that stop the node: TERM and INT, and the stop
// signals of other runtimes, which a Go kubelet ignores: PWR (LXC and Incus
// halt a container with it) and SIGRTMIN+3 (systemd's, the STOPSIGNAL of
// systemd-style node images). The executor gets each as ForExecutor says.
var Stop = []syscall.Signal{unix.SIGTERM, unix.SIGINT, unix.SIGPWR, sigRTMin3}

// ForExecutor is the signal a stop signal is passed on as: INT stays INT
// (a kubelet handles both), PWR and SIGRTMIN+3 become TERM.
func ForExecutor(sig syscall.Signal) syscall.Signal {
	if sig == unix.SIGINT {
		return sig
	}
	return unix.SIGTERM
}

// Kept are the signals nodeinit never catches: they cannot be caught
// (KILL, STOP) or the Go runtime keeps them (URG, PROF, 32, 33, 34).
var Kept = []syscall.Signal{unix.SIGKILL, unix.SIGSTOP, unix.SIGURG, unix.SIGPROF, 32, 33, 34}

// lastSignal is the highest signal number on Linux (SIGRTMAX).
const lastSignal = 64

// Caught lists every signal nodeinit catches unless it was ignored at
// start, in number order.
func Caught() []syscall.Signal {
	var out []syscall.Signal
	for s := syscall.Signal(1); s <= lastSignal; s++ {
		if !slices.Contains(Kept, s) {
			out = append(out, s)
		}
	}
	return out
}

// Name is a signal's name without SIG ("TERM"), or its number for a
// real-time signal ("40"), whose names differ between C libraries.
func Name(sig syscall.Signal) string {
	if n := unix.SignalName(sig); n != "" {
		return strings.TrimPrefix(n, "SIG")
	}
	return strconv.Itoa(int(sig))
}

// Parse is the inverse of Name.
func Parse(name string) (syscall.Signal, bool) {
	for s := syscall.Signal(1); s <= lastSignal; s++ {
		if Name(s) == name {
			return s, true
		}
	}
	return 0, false
}

// Set is the signals nodeinit has caught, on a channel per kind. os/signal
// drops a signal when its channel is full, so each kind has its own: a
// storm of HUPs or USR1s can fill only theirs, never hide the TERM that
// follows it, nor a SIGCHLD (one pending SIGCHLD is enough: every wakeup
// reaps all children that have ended).
type Set struct {
	Child       chan os.Signal
	Terminating chan os.Signal
	Other       chan os.Signal

	// IgnoredAtStart are the signals that were ignored when nodeinit
	// started (by its own first process, across a re-exec), and that it
	// therefore does not catch.
	IgnoredAtStart []syscall.Signal

	rest chan struct{} // closed once CatchBeforeFork has caught its signals
}

// CatchTerminating catches the Stop signals at once, unless they were
// ignored at start: it is the first thing nodeinit does, so that a TERM
// sent while it starts is kept for the executor instead of ending nodeinit
// by the Go runtime's default, and a stop signal of another runtime is not
// ignored by it. carried is what a re-exec passed on (see ForExec).
func CatchTerminating(carried Carried) *Set {
	s := &Set{
		Child:       make(chan os.Signal, 1),
		Terminating: make(chan os.Signal, 8),
		Other:       make(chan os.Signal, 64),
		rest:        make(chan struct{}),
	}
	if carried.Valid {
		s.IgnoredAtStart = carried.Ignored
	} else {
		s.IgnoredAtStart = ignoredNow()
	}
	if t := s.wanted(Stop...); len(t) > 0 { // Notify with none would catch all
		signal.Notify(s.Terminating, t...)
	}
	// Pending is a set of at most four, below the channel's capacity;
	// the refill never blocks all the same: PID 1 must not hang on what
	// its environment says.
	for _, sig := range carried.Pending {
		select {
		case s.Terminating <- sig:
		default:
		}
	}
	return s
}

// CatchBeforeFork catches, on a goroutine, SIGCHLD and every other signal
// that would end, crash or stop nodeinit if it came unhandled (see
// beforeFork), and returns at once: os/signal enables each signal with a
// round trip to the runtime's signal thread, which would delay the start.
// Wait blocks until it is done; nodeinit waits before its first fork, so
// that no child's end and no such signal is missed from then on.
func (s *Set) CatchBeforeFork() {
	go func() {
		defer close(s.rest)
		signal.Notify(s.Child, unix.SIGCHLD)
		if o := s.wanted(beforeFork...); len(o) > 0 {
			signal.Notify(s.Other, o...)
		}
	}()
}

// Wait returns once CatchBeforeFork has caught its signals.
func (s *Set) Wait() { <-s.rest }

// CatchForwarded catches the signals left, those the Go runtime ignores
// while nodeinit has not caught them (USR1, USR2, PIPE, ALRM, CONT, XCPU,
// XFSZ, VTALRM, WINCH, IO, PWR and the real-time ones). nodeinit calls it
// right after the executor has started: before, there is nobody to pass
// them to, and enabling these 41 before the first fork would cost the start
// about a millisecond (docs/benchmarks.md). One that comes before it is
// done is ignored, as it would be had nodeinit not started yet.
func (s *Set) CatchForwarded() {
	var rest []syscall.Signal
	for _, sig := range Caught() {
		if r := RouteOf(sig); r != Reap && r != Terminate && !slices.Contains(beforeFork, sig) {
			rest = append(rest, sig)
		}
	}
	if o := s.wanted(rest...); len(o) > 0 {
		signal.Notify(s.Other, o...)
	}
}

// beforeFork are the signals, besides TERM, INT and CHLD, that nodeinit
// catches before its first fork: those whose action in a Go program that
// has not caught them would end it (HUP), crash it with a trace (QUIT,
// ABRT, STKFLT, SYS and the fault signals sent with kill), or stop it
// (TSTP, TTIN, TTOU, which the runtime leaves to the kernel's default).
var beforeFork = []syscall.Signal{
	unix.SIGHUP, unix.SIGQUIT, unix.SIGILL, unix.SIGTRAP, unix.SIGABRT, unix.SIGBUS, unix.SIGFPE, unix.SIGSEGV,
	unix.SIGSTKFLT, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU, unix.SIGSYS,
}

// wanted returns the signals of sigs that were not ignored at start.
func (s *Set) wanted(sigs ...syscall.Signal) []os.Signal {
	var out []os.Signal
	for _, sig := range sigs {
		if !slices.Contains(s.IgnoredAtStart, sig) {
			out = append(out, sig)
		}
	}
	return out
}

// ignoredNow lists the signals whose action is SIG_IGN now, before nodeinit
// catches anything: the ones the Go runtime lets it see (see the package
// comment).
func ignoredNow() []syscall.Signal {
	var out []syscall.Signal
	for _, sig := range []syscall.Signal{unix.SIGHUP, unix.SIGINT, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU, unix.SIGCONT} {
		if isIgnored(sig) {
			out = append(out, sig)
		}
	}
	return out
}

// isIgnored reads sig's action from the kernel. signal.Ignored would not do:
// it knows only what the Go runtime recorded, which leaves out the signals
// it never handles (TSTP, TTIN, TTOU, CONT).
func isIgnored(sig syscall.Signal) bool {
	// struct kernel_sigaction: the handler comes first; the rest (flags,
	// restorer, mask) is at most three more words.
	var act [4]uint64
	_, _, errno := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), 0, uintptrOf(&act), 8, 0, 0)
	return errno == 0 && act[0] == sigIgn
}

// sigIgn is SIG_IGN's value as the kernel stores it.
const sigIgn = 1

func uintptrOf(p *[4]uint64) uintptr {
	if p == nil {
		return 0
	}
	return uintptr(unsafe.Pointer(p))
}
