package signals

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/internal/linux"
)

// carryEnv is the environment variable in which a nodeinit that re-executes
// itself (to enter a private mount namespace) tells the new image what it
// knew of signals: which were ignored when it started, and which TERM or INT
// it caught before the re-exec. The re-executed nodeinit removes it before
// anything can start a child.
const carryEnv = "NODEINIT_SIGNALS"

// Carried is what a re-exec passed on.
type Carried struct {
	Valid   bool // the variable was there: this process is the re-executed one
	Ignored []syscall.Signal
	Pending []syscall.Signal
}

// TakeCarried reads and removes CarryEnv.
func TakeCarried() (Carried, error) {
	v, ok := os.LookupEnv(carryEnv)
	if !ok {
		return Carried{}, nil
	}
	if err := os.Unsetenv(carryEnv); err != nil {
		return Carried{}, fmt.Errorf("remove %s from the environment: %w", carryEnv, err)
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
			*into = append(*into, sig)
		}
	}
	return c, nil
}

// ForExec prepares the process for re-executing itself and returns the
// CarryEnv entry for the new image's environment. Every TERM or INT sent
// before it was called is passed on as pending, so the executor still gets
// it. Such a signal is in one of three places: still pending in the kernel
// (no thread has taken it yet, which on a busy machine can last
// milliseconds), in the Go runtime on its way to a channel, or on the
// channel. ForExec takes the first kind off the kernel's queue itself, then
// waits until the runtime has put every signal it took on a channel
// (signal.Stop does), keeping them caught meanwhile on a second channel.
// From then until the new image catches them again, TERM and INT are
// ignored rather than left to their default action, which would end
// nodeinit: one that arrives in that instant is lost, never fatal.
func (s *Set) ForExec() string {
	terminating := s.wanted(unix.SIGTERM, unix.SIGINT)
	pending := takeKernelPending(terminating)
	hold := make(chan os.Signal, cap(s.Terminating))
	if len(terminating) > 0 { // Notify with no signal would catch them all
		signal.Notify(hold, terminating...)
	}
	signal.Stop(s.Terminating)
	signal.Ignore(unix.SIGTERM, unix.SIGINT)
	for _, c := range []chan os.Signal{s.Terminating, hold} {
		for drained := false; !drained; {
			select {
			case sig := <-c:
				pending = append(pending, Name(sig.(syscall.Signal)))
			default:
				drained = true
			}
		}
	}
	ignored := make([]string, len(s.IgnoredAtStart))
	for i, sig := range s.IgnoredAtStart {
		ignored[i] = Name(sig)
	}
	return carryEnv + "=ignored=" + strings.Join(ignored, ",") + ";pending=" + strings.Join(pending, ",")
}

// takeKernelPending takes every signal of sigs that the kernel holds for
// the process but no thread has handled yet, with rt_sigtimedwait and no
// wait, and returns their names.
func takeKernelPending(sigs []os.Signal) []string {
	nums := make([]unix.Signal, len(sigs))
	for i, sig := range sigs {
		nums[i] = sig.(syscall.Signal)
	}
	set := linux.Sigset(nums...)
	var taken []string
	for sig, ok := linux.TakePending(&set); ok; sig, ok = linux.TakePending(&set) {
		taken = append(taken, Name(sig))
	}
	return taken
}
