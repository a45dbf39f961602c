package signals

import (
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/internal/linux"
	"github.com/nodeinit/nodeinit/mountns"
)

// carryEnv is the environment variable in which a nodeinit that re-executes
// itself (to enter a private mount namespace) tells the new image what it
// knew of signals: which were ignored when it started, and which stop
// signals (TERM, INT, PWR, SIGRTMIN+3) it caught before the re-exec. The
// new image removes it before anything can start a child, and honours it
// only as its own re-exec's (see TakeCarried).
const carryEnv = "NODEINIT_SIGNALS"

// Carried is what a re-exec passed on.
type Carried struct {
	Valid   bool // the variable was there: this process is the re-executed one
	Ignored []syscall.Signal
	// Pending is a set, each Stop signal at most once: the kernel too
	// holds a standard signal pending once, however often it was sent,
	// and a TERM can have reached both of ForExec's channels.
	Pending []syscall.Signal
}

// TakeCarried reads and removes CarryEnv. It takes what the variable says
// only on the path of nodeinit's own re-exec: the mount namespace's re-exec
// marker is there and is this process's own (mountns.ValidMarker: it names
// a namespace other than this one and carries this process's mark, its
// pid, start time and executable, which the execve keeps, and which a
// variable set before nodeinit started could name only by guessing its
// start time to the clock tick). That marker is the one mark of the
// re-executed process: the image before the re-exec removed any variable
// it was started with (TakeCarried runs first thing in every image) and
// set this one itself. A variable in the environment nodeinit was started
// with, a user's or an image's, is removed and changes nothing: the
// signals ignored at start are then read from the kernel.
func TakeCarried() (Carried, error) {
	v, ok := os.LookupEnv(carryEnv)
	if !ok {
		return Carried{}, nil
	}
	if err := os.Unsetenv(carryEnv); err != nil {
		return Carried{}, fmt.Errorf("remove %s from the environment: %w", carryEnv, err)
	}
	if !reexecuted() {
		return Carried{}, nil
	}
	c := Carried{Valid: true}
	for field := range strings.SplitSeq(v, ";") {
		key, list, _ := strings.Cut(field, "=")
		var into *[]syscall.Signal
		switch key {
		case "ignored":
			into = &c.Ignored
		case "pending":
			into = &c.Pending
		default:
			return Carried{}, fmt.Errorf("%s=%q: unknown field %q", carryEnv, v, key)
		}
		for name := range strings.SplitSeq(list, ",") {
			if name == "" {
				continue
			}
			sig, ok := Parse(name)
			if !ok {
				return Carried{}, fmt.Errorf("%s=%q: unknown signal %q", carryEnv, v, name)
			}
			*into = addOnce(*into, sig)
		}
	}
	return c, nil
}

// reexecuted says whether this process is its own re-exec into a private
// mount namespace (see TakeCarried).
func reexecuted() bool {
	from, marked := os.LookupEnv(mountns.MarkerEnv)
	return marked && mountns.ValidMarker(from)
}

// ForExec prepares the process for re-executing itself and returns the
// CarryEnv entry for the new image's environment. Every stop signal sent
// before it was called is passed on as pending, so the executor still gets
// it. Such a signal is in one of three places: still pending in the kernel
// (no thread has taken it yet, which on a busy machine can last
// milliseconds), in the Go runtime on its way to a channel, or on the
// channel. ForExec takes the first kind off the kernel's queue itself, then
// waits until the runtime has put every signal it took on a channel
// (signal.Stop does), keeping them caught meanwhile on a second channel.
// What it found is carried as a set: one TERM and one INT at most.
//
// From then until the execve, the stop signals are ignored rather than left
// to their default action: one that arrives then is lost, never fatal. INT
// stays ignored in the new image until CatchTerminating catches it (the Go
// runtime keeps an inherited SIG_IGN for HUP and INT). TERM does not: the
// new image's runtime installs its own handler for it as it starts, before
// any of nodeinit's code runs, and a TERM in the time until
// CatchTerminating (the runtime's start and package init: about 3 ms on a
// 2-core VM, docs/benchmarks.md) ends it, before it has started any child:
// with status 143, or 2 as PID 1 of a pid namespace, where the kernel drops
// the runtime's own default action and the runtime exits instead. That is
// the same window every Go program has when it starts, nodeinit's first
// image too; a pure-Go program cannot close it (the runtime unblocks TERM
// on every thread and installs its handler before package init). The
// container's runtime sees nodeinit exit, and nothing is left running.
func (s *Set) ForExec() string {
	terminating := s.wanted(Stop...)
	pending := takeKernelPending(terminating)
	hold := make(chan os.Signal, cap(s.Terminating))
	if len(terminating) > 0 { // Notify with no signal would catch them all
		signal.Notify(hold, terminating...)
	}
	signal.Stop(s.Terminating)
	signal.Ignore(terminating...)
	for _, c := range []chan os.Signal{s.Terminating, hold} {
		for drained := false; !drained; {
			select {
			case sig := <-c:
				pending = addOnce(pending, sig.(syscall.Signal))
			default:
				drained = true
			}
		}
	}
	return carryEnv + "=ignored=" + names(s.IgnoredAtStart) + ";pending=" + names(pending)
}

// addOnce adds sig to the set sigs.
func addOnce(sigs []syscall.Signal, sig syscall.Signal) []syscall.Signal {
	if slices.Contains(sigs, sig) {
		return sigs
	}
	return append(sigs, sig)
}

// names is sigs' names, comma-separated.
func names(sigs []syscall.Signal) string {
	out := make([]string, len(sigs))
	for i, sig := range sigs {
		out[i] = Name(sig)
	}
	return strings.Join(out, ",")
}

// takeKernelPending takes every signal of sigs that the kernel holds for
// the process but no thread has handled yet, with rt_sigtimedwait and no
// wait.
func takeKernelPending(sigs []os.Signal) []syscall.Signal {
	nums := make([]unix.Signal, len(sigs))
	for i, sig := range sigs {
		nums[i] = sig.(syscall.Signal)
	}
	set := linux.Sigset(nums...)
	var taken []syscall.Signal
	for sig, ok := linux.TakePending(&set); ok; sig, ok = linux.TakePending(&set) {
		taken = addOnce(taken, sig)
	}
	return taken
}
