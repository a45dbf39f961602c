package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/init/proctree"
)

// Options say how Launch runs nodeinit.
type Options struct {
	// PID1 runs nodeinit as PID 1 of a new pid namespace; without it
	// nodeinit is an ordinary child of the test and registers as child
	// subreaper. Under an emulator (Emulated) unshare(1) forks it as PID 1,
	// and Outer is unshare's pid.
	PID1 bool
	// MountNS runs it, as PID 1, in a new mount namespace with a /proc of
	// its own (unshare --pid --fork --mount-proc). Propagation is unshare's
	// --propagation for it ("private" when empty; "unchanged" keeps the
	// host's, so that mounts made inside reach a runtime outside), and each
	// mount point in ReadOnly is remounted read-only in it first.
	MountNS     bool
	Propagation string
	ReadOnly    []string
	// Unshare are more of unshare's flags with MountNS (--user
	// --map-root-user for a user namespace).
	Unshare []string
	// Env is added to the test's own environment.
	Env []string
	// Terminal, when set, is a terminal (the slave of OpenPTY) that becomes
	// nodeinit's stdin, stdout, stderr and controlling terminal, in a
	// session of its own, as under `podman run -it`. Its output is then the
	// terminal's, not Log's.
	Terminal *os.File
	// Stdin is nodeinit's stdin when there is no Terminal (default: none).
	Stdin *os.File
	// Stdout, when set, is nodeinit's stdout and stderr instead of the
	// files that Log and Stderr read (a pipe, say).
	Stdout *os.File
	// Binary is the nodeinit to run; default: BuildRaced("./cmd/nodeinit").
	Binary string
	// Dir is the run's directory (Path); default: a new temporary one.
	Dir string
	// Prefix is a command that runs first and execs nodeinit with its
	// arguments appended (`nohup`, or a shell that ignores a signal and
	// runs `exec "$@"`); nodeinit keeps its pid.
	Prefix []string
}

// Node is one run of nodeinit, started by Launch.
type Node struct {
	tb      testing.TB
	cmd     *exec.Cmd
	dir     string
	wrapped bool // nodeinit is unshare's child, not cmd itself
	Started time.Time
	done    chan struct{}
	err     error
}

// readOnlyThenExec remounts each argument before "--" read-only (a bind
// remount: it changes only this mount namespace's mount, not the hierarchy),
// then runs the command after "--".
const readOnlyThenExec = `while [ "$1" != -- ]; do mount -o remount,bind,ro "$1" || exit 99; shift; done; shift; exec "$@"`

// Launch starts nodeinit with args and returns at once. Its stdout and
// stderr, which the children inherit, go to files in a directory of the
// test's own (Path). When the test ends, a nodeinit still running gets TERM,
// then KILL, and its log is printed. nodeinit starts with every signal at
// its default action, even where the test process was started ignoring some
// (nohup): ignore one with Prefix.
func Launch(tb testing.TB, o Options, args ...string) *Node {
	tb.Helper()
	defaultSignalsForChildren()
	if o.PID1 || o.MountNS {
		RequireRoot(tb)
	}
	bin := o.Binary
	if bin == "" {
		bin = BuildRaced(tb, "./cmd/nodeinit")
	}
	n := &Node{tb: tb, dir: o.Dir, done: make(chan struct{})}
	if n.dir == "" {
		n.dir = tb.TempDir()
	}

	argv := append(append(append([]string(nil), o.Prefix...), bin), args...)
	// Under an emulator the test process cannot clone into a new pid
	// namespace itself (qemu-user refuses CLONE_NEWPID with EINVAL):
	// unshare(1), a native program, forks the emulated nodeinit as PID 1 of
	// one, in the test's mount namespace and with the host's /proc, as the
	// clone does.
	viaUnshare := o.PID1 && !o.MountNS && Emulated()
	if o.MountNS || viaUnshare {
		unshare := RequireTool(tb, "unshare")
		pre := []string{unshare, "--pid", "--fork"}
		if o.MountNS {
			pre = append(pre, "--mount-proc")
			if o.Propagation != "" {
				pre = append(pre, "--propagation", o.Propagation)
			}
			pre = append(pre, o.Unshare...)
		}
		pre = append(pre, "--")
		if o.MountNS && len(o.ReadOnly) > 0 {
			pre = append(append(append(pre, "/bin/sh", "-c", readOnlyThenExec, "sh"), o.ReadOnly...), "--")
		}
		argv = append(pre, argv...)
		n.wrapped = true
	}
	n.cmd = exec.Command(argv[0], argv[1:]...)
	n.cmd.Env = append(os.Environ(), o.Env...)
	n.cmd.SysProcAttr = &syscall.SysProcAttr{}
	if o.PID1 && !o.MountNS && !viaUnshare {
		n.cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWPID
	}
	if o.Terminal != nil {
		n.cmd.Stdin, n.cmd.Stdout, n.cmd.Stderr = o.Terminal, o.Terminal, o.Terminal
		n.cmd.SysProcAttr.Setsid, n.cmd.SysProcAttr.Setctty = true, true
		n.cmd.SysProcAttr.Ctty = 0
	} else {
		if o.Stdout != nil {
			n.cmd.Stdout, n.cmd.Stderr = o.Stdout, o.Stdout
		} else {
			out, errf := n.create("nodeinit.log"), n.create("nodeinit.stderr")
			defer out.Close()
			defer errf.Close()
			n.cmd.Stdout, n.cmd.Stderr = out, errf
		}
		if o.Stdin != nil {
			n.cmd.Stdin = o.Stdin
		}
	}
	n.Started = time.Now()
	if err := n.cmd.Start(); err != nil {
		tb.Fatalf("start nodeinit: %v", err)
	}
	go func() {
		n.err = n.cmd.Wait()
		close(n.done)
	}()
	tb.Cleanup(n.cleanup)
	return n
}

func (n *Node) create(name string) *os.File {
	f, err := os.Create(n.Path(name))
	if err != nil {
		n.tb.Fatal(err)
	}
	return f
}

func (n *Node) cleanup() {
	if !n.Running() {
		if n.tb.Failed() {
			// What made nodeinit end, for a failure that does not say.
			n.tb.Logf("nodeinit had ended (%v); the end of its log:\n%s", n.err, Tail(n.Log(), 10))
		}
		return
	}
	if pid, ok := n.pid(); ok {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	select {
	case <-n.done:
	case <-time.After(15 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.done
	}
	n.tb.Logf("nodeinit was still running at the end of the test; its log:\n%s", n.Log())
}

// Path is name in the run's directory, for reports, ready files and the
// like; nodeinit's own output is Path("nodeinit.log").
func (n *Node) Path(name string) string { return filepath.Join(n.dir, name) }

// Pid is nodeinit's pid as the test sees it. It fails the test when
// nodeinit has not started yet or has ended.
func (n *Node) Pid() int {
	n.tb.Helper()
	var pid int
	WaitFor(n.tb, 10*time.Second, "nodeinit's pid", func() bool {
		p, ok := n.pid()
		pid = p
		return ok || !n.Running()
	})
	if pid == 0 {
		n.tb.Fatalf("nodeinit ended before its pid was read (%v); log:\n%s", n.err, n.Log())
	}
	return pid
}

// pid finds nodeinit: cmd itself, or unshare's one child (a shell that
// remounts first execs nodeinit).
func (n *Node) pid() (int, bool) {
	p := n.cmd.Process.Pid
	if !n.wrapped {
		return p, n.Running()
	}
	children, err := Children(p)
	if err != nil || len(children) != 1 {
		return 0, false
	}
	return children[0], true
}

// Outer is the pid of the process the test started: nodeinit itself, or the
// unshare that forked it (MountNS, or PID1 under an emulator).
func (n *Node) Outer() int { return n.cmd.Process.Pid }

// Signal sends sig to nodeinit.
func (n *Node) Signal(sig syscall.Signal) {
	n.tb.Helper()
	if err := syscall.Kill(n.Pid(), sig); err != nil {
		n.tb.Fatalf("signal %v to nodeinit: %v", sig, err)
	}
}

// Done is closed when nodeinit has exited.
func (n *Node) Done() <-chan struct{} { return n.done }

// Running reports whether nodeinit has not exited yet.
func (n *Node) Running() bool {
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// Wait waits up to timeout for nodeinit to exit and returns its exit code
// (128+S when a signal S ended it); it fails the test at the timeout.
func (n *Node) Wait(timeout time.Duration) int {
	n.tb.Helper()
	select {
	case <-n.done:
	case <-time.After(timeout):
		n.tb.Fatalf("nodeinit still running after %v; log:\n%s", timeout, n.Log())
	}
	return n.ExitCode()
}

// Signaled reports whether a signal ended nodeinit itself, rather than
// nodeinit exiting with a code (which may be 128+S for its executor's
// signal); call it once Done is closed.
func (n *Node) Signaled() bool {
	ws, ok := n.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled()
}

// ExitCode is the code nodeinit exited with; call it once Done is closed.
func (n *Node) ExitCode() int {
	n.tb.Helper()
	var ee *exec.ExitError
	switch {
	case errors.As(n.err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	case n.err != nil:
		n.tb.Fatalf("wait for nodeinit: %v", n.err)
	}
	return 0
}

// CPUTime is the processor time, user and system, that the process the test
// started used, with that of the children it reaped (wait4's rusage): for
// a cost that must not grow with something, the one measure that the load
// of other work on the machine hardly moves. Call it once Done is closed.
func (n *Node) CPUTime() time.Duration {
	return n.cmd.ProcessState.UserTime() + n.cmd.ProcessState.SystemTime()
}

// Stop sends TERM and waits up to timeout for the exit code.
func (n *Node) Stop(timeout time.Duration) int {
	n.tb.Helper()
	n.Signal(syscall.SIGTERM)
	return n.Wait(timeout)
}

// Log is what nodeinit and its children wrote to stdout so far.
func (n *Node) Log() string {
	b, _ := os.ReadFile(n.Path("nodeinit.log"))
	return string(b)
}

// Stderr is what was written to nodeinit's stderr.
func (n *Node) Stderr() string {
	b, _ := os.ReadFile(n.Path("nodeinit.stderr"))
	return string(b)
}

// Lines returns the lines of nodeinit's log at klog severity sev (I, W, E)
// that contain every one of words.
func (n *Node) Lines(sev byte, words ...string) []string {
	var out []string
	for l := range strings.SplitSeq(n.Log(), "\n") {
		if len(l) == 0 || l[0] != sev {
			continue
		}
		if !slices.ContainsFunc(words, func(w string) bool { return !strings.Contains(l, w) }) {
			out = append(out, l)
		}
	}
	return out
}

// WaitForLog waits until the log has a line at severity sev with every one
// of words, and returns it; it fails the test at the timeout or when
// nodeinit ends without writing it.
func (n *Node) WaitForLog(timeout time.Duration, sev byte, words ...string) string {
	n.tb.Helper()
	var line string
	WaitFor(n.tb, timeout, fmt.Sprintf("a log line %c %q", sev, words), func() bool {
		running := n.Running() // before reading: a last line is read after the exit
		if l := n.Lines(sev, words...); len(l) > 0 {
			line = l[0]
			return true
		}
		if !running {
			n.tb.Fatalf("nodeinit ended without logging %c %q; log:\n%s", sev, words, n.Log())
		}
		return false
	})
	return line
}

// Status asks nodeinit for its status lines with USR1 until it has logged
// a new line at severity sev with every one of words, and returns that
// line. nodeinit catches USR1 only once its executor has started, and one
// sent before that is ignored, as documented: so USR1 goes again every
// half second without an answer, and a test may see more than one dump.
func (n *Node) Status(timeout time.Duration, sev byte, words ...string) string {
	n.tb.Helper()
	before := len(n.Lines(sev, words...))
	var line string
	var asked time.Time
	WaitFor(n.tb, timeout, fmt.Sprintf("a status line %c %q after USR1", sev, words), func() bool {
		if l := n.Lines(sev, words...); len(l) > before {
			line = l[before]
			return true
		}
		if !n.Running() {
			n.tb.Fatalf("nodeinit ended without logging %c %q; log:\n%s", sev, words, n.Log())
		}
		if time.Since(asked) > 500*time.Millisecond {
			n.Signal(syscall.SIGUSR1)
			asked = time.Now()
		}
		return false
	})
	return line
}

// WaitForFile waits until path exists, failing the test at the timeout or
// when nodeinit has ended without it appearing.
func (n *Node) WaitForFile(timeout time.Duration, path string) {
	n.tb.Helper()
	WaitFor(n.tb, timeout, "file "+filepath.Base(path), func() bool {
		running := n.Running()
		if _, err := os.Stat(path); err == nil {
			return true
		}
		if !running {
			n.tb.Fatalf("nodeinit ended (%v) before %s appeared; log:\n%s", n.err, path, n.Log())
		}
		return false
	})
}

// Report waits for the task helper's --report file at Path(name) and reads it.
func (n *Node) Report(name string) Report {
	n.tb.Helper()
	n.WaitForFile(20*time.Second, n.Path(name))
	return ReadReport(n.tb, n.Path(name))
}

// WaitFor waits until cond holds, checking every few milliseconds, and fails
// the test after timeout. The condition is an event the test cannot be told
// of (a file, a process state): reading it again is the only way to learn it.
func WaitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Children lists the children of pid, from every thread's
// /proc/PID/task/TID/children.
func Children(pid int) ([]int, error) { return proctree.Children("/proc", pid) }
