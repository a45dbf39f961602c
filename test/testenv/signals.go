package testenv

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The tests expect the nodeinit they launch to start with every signal at
// its default action, as a container runtime starts it; a test that wants
// one ignored says so itself (a shell's trap ” in Options.Prefix). A test
// process started from a shell that ignores some (nohup ignores HUP; a
// non-interactive shell's background job, INT and QUIT) would hand them on
// ignored: execve keeps SIG_IGN, and so does Go's exec, whose child resets
// only the signals the runtime handles. Go handles most signals from the
// start whatever their inherited action, but keeps an inherited SIG_IGN of
// HUP and INT and leaves TSTP, TTIN, TTOU and CONT to the kernel.
//
// execve resets a caught signal to its default, and the runtime resets the
// ones it handles in the child before execve: so the test process catches
// each of those it was started ignoring and drops it, which for itself is
// the same as ignoring it, and every program it starts from then on gets
// the default action.
var inheritedIgnore = []syscall.Signal{unix.SIGHUP, unix.SIGINT, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU, unix.SIGCONT}

var defaultSignalsOnce sync.Once

// defaultSignalsForChildren does the above, once per test process.
func defaultSignalsForChildren() {
	defaultSignalsOnce.Do(func() {
		var ignored []os.Signal
		for _, sig := range inheritedIgnore {
			if isIgnored(sig) {
				ignored = append(ignored, sig)
			}
		}
		if len(ignored) > 0 { // Notify with none would catch every signal
			// Never read: os/signal drops what does not fit.
			signal.Notify(make(chan os.Signal, 1), ignored...)
		}
	})
}

// isIgnored reads sig's action from the kernel: os/signal's Ignored knows
// only what the runtime recorded.
func isIgnored(sig syscall.Signal) bool {
	// struct kernel_sigaction: the handler first, then at most three words.
	var act [4]uint64
	_, _, errno := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), 0, uintptr(unsafe.Pointer(&act)), 8, 0, 0)
	return errno == 0 && act[0] == 1 // SIG_IGN
}
