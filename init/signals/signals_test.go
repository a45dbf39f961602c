package signals

import (
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/mountns"
)

func TestEveryCatchableSignalHasARoute(t *testing.T) {
	caught := Caught()
	for _, sig := range Kept {
		if slices.Contains(caught, sig) {
			t.Errorf("%s is kept by the kernel or the Go runtime, yet caught", Name(sig))
		}
	}
	if len(caught)+len(Kept) != lastSignal {
		t.Errorf("%d caught + %d kept, want all %d signals", len(caught), len(Kept), lastSignal)
	}
	want := map[syscall.Signal]Route{
		unix.SIGCHLD: Reap, unix.SIGTERM: Terminate, unix.SIGINT: Terminate, unix.SIGPWR: Terminate, 37: Terminate,
		unix.SIGHUP: Both, unix.SIGUSR1: Status,
		unix.SIGQUIT: Executor, unix.SIGSEGV: Executor, unix.SIGABRT: Executor, unix.SIGPIPE: Executor,
		unix.SIGTSTP: Executor, unix.SIGTTIN: Executor, unix.SIGCONT: Executor, unix.SIGWINCH: Executor, 64: Executor,
	}
	for sig, r := range want {
		if got := RouteOf(sig); got != r {
			t.Errorf("RouteOf(%s) = %v, want %v", Name(sig), got, r)
		}
	}
}

func TestNamesRoundTrip(t *testing.T) {
	for s := syscall.Signal(1); s <= lastSignal; s++ {
		got, ok := Parse(Name(s))
		if !ok || got != s {
			t.Errorf("Parse(Name(%d)) = %d, %v", s, got, ok)
		}
	}
	if Name(unix.SIGTERM) != "TERM" || Name(40) != "40" {
		t.Errorf("names: %q %q", Name(unix.SIGTERM), Name(40))
	}
}

// asReexecuted sets the environment a re-exec into a private mount
// namespace gives the new image: the mount namespace's marker, naming one
// the process left and carrying this process's mark, and the carried
// signals.
func asReexecuted(t *testing.T, fields string) {
	t.Helper()
	mark, err := mountns.ProcessMark()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(mountns.MarkerEnv, "mnt:[1];self="+mark)
	t.Setenv(carryEnv, fields)
}

func TestCarriedAcrossTheReexec(t *testing.T) {
	asReexecuted(t, "ignored=HUP,TSTP;pending=TERM,INT")
	c, err := TakeCarried()
	if err != nil {
		t.Fatal(err)
	}
	if !c.Valid || !slices.Equal(c.Ignored, []syscall.Signal{unix.SIGHUP, unix.SIGTSTP}) || !slices.Equal(c.Pending, []syscall.Signal{unix.SIGTERM, unix.SIGINT}) {
		t.Errorf("carried %+v", c)
	}
	if _, still := syscall.Getenv(carryEnv); still {
		t.Error("the variable is still in the environment, where a child would see it")
	}
	for _, bad := range []string{"ignored=NOPE", "stale=1", "pending=TERM;x=y"} {
		asReexecuted(t, bad)
		if _, err := TakeCarried(); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	asReexecuted(t, "ignored=;pending=")
	if c, err := TakeCarried(); err != nil || !c.Valid || len(c.Ignored)+len(c.Pending) != 0 {
		t.Errorf("empty lists: %+v, %v", c, err)
	}
}

// The variable changes nothing unless nodeinit's own re-exec set it: one
// in the environment nodeinit was started with (a user's, an image's) is
// removed, so no child sees it, and ignored.
func TestCarriedOnlyFromItsOwnReexec(t *testing.T) {
	mark, err := mountns.ProcessMark()
	if err != nil {
		t.Fatal(err)
	}
	current, err := mountns.Current()
	if err != nil {
		t.Fatal(err)
	}
	const fields = "ignored=HUP,INT;pending=TERM"
	for _, tc := range []struct {
		name, marker, value string
		markerSet           bool
	}{
		{name: "no re-exec marker", value: fields},
		{name: "a stale marker: the namespace it names is this one", marker: current + ";self=" + mark, markerSet: true, value: fields},
		{name: "a marker set by hand, without the process's mark", marker: "mnt:[1]", markerSet: true, value: fields},
		{name: "a marker with another process's mark", marker: "mnt:[1];self=1/2/3:4", markerSet: true, value: fields},
		{name: "not even well-formed", value: "ignored=NOPE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.markerSet {
				t.Setenv(mountns.MarkerEnv, tc.marker)
			} else {
				t.Setenv(mountns.MarkerEnv, "")
				os.Unsetenv(mountns.MarkerEnv)
			}
			t.Setenv(carryEnv, tc.value)
			c, err := TakeCarried()
			if err != nil || c.Valid || len(c.Ignored)+len(c.Pending) != 0 {
				t.Errorf("taken: %+v, %v; want it ignored", c, err)
			}
			if _, still := syscall.Getenv(carryEnv); still {
				t.Error("the variable is still in the environment, where a child would see it")
			}
		})
	}
}

// However many TERMs a re-exec found (the kernel's queue, and both of
// ForExec's channels, can each hold one), they are carried as one, and the
// new image's refill can never block on them: nine used to hang PID 1.
func TestCarriedSignalsAreASetAndNeverBlock(t *testing.T) {
	asReexecuted(t, "ignored=HUP,HUP;pending="+strings.Repeat("TERM,", 9)+"INT,TERM,INT")
	c, err := TakeCarried()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Pending, []syscall.Signal{unix.SIGTERM, unix.SIGINT}) || !slices.Equal(c.Ignored, []syscall.Signal{unix.SIGHUP}) {
		t.Errorf("carried %+v, want pending TERM,INT and ignored HUP once each", c)
	}

	// A Carried made by hand, beyond the channel's capacity.
	many := Carried{Valid: true, Pending: slices.Repeat([]syscall.Signal{unix.SIGTERM}, 3*8)}
	done := make(chan *Set, 1)
	go func() { done <- CatchTerminating(many) }()
	select {
	case s := <-done:
		signal.Stop(s.Terminating)
		if n := len(s.Terminating); n != cap(s.Terminating) {
			t.Errorf("%d TERMs queued, want the channel full (%d) and the rest dropped", n, cap(s.Terminating))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("CatchTerminating blocked on the carried signals")
	}
}

func TestTheKernelsIgnoredActionIsSeen(t *testing.T) {
	// SIGTTIN is one the Go runtime leaves alone: its action is the
	// kernel's, as inherited. The test sets it to SIG_DFL and then to
	// SIG_IGN itself, whatever it inherited, and puts that back.
	var dfl, ign, old [4]uint64
	ign[0] = sigIgn
	set := func(a *[4]uint64, o *[4]uint64) {
		if _, _, errno := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(unix.SIGTTIN), uintptrOf(a), uintptrOf(o), 8, 0, 0); errno != 0 {
			t.Fatal(errno)
		}
	}
	set(&dfl, &old)
	defer set(&old, nil)
	if isIgnored(unix.SIGTTIN) || slices.Contains(ignoredNow(), unix.SIGTTIN) {
		t.Error("SIGTTIN set to SIG_DFL is seen as ignored")
	}
	set(&ign, nil)
	if !isIgnored(unix.SIGTTIN) || !slices.Contains(ignoredNow(), unix.SIGTTIN) {
		t.Error("SIGTTIN set to SIG_IGN is not seen as ignored")
	}
}
