// Package integration runs the built nodeinit binary for real — as PID 1 of
// a new pid namespace and as a child subreaper — with the project's task
// helper as executor and proxy, and checks what a node operator would see:
// exit codes, signals delivered, zombies reaped, processes ended.
package integration

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/test/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// mode is how nodeinit runs: as PID 1 of a new pid namespace, or as an
// ordinary child that registers as subreaper.
type mode string

const (
	asPID1      mode = "pid1"
	asSubreaper mode = "subreaper"
)

var modes = []mode{asPID1, asSubreaper}

// forEachMode runs a subtest in each mode. PID 1 needs root.
func forEachMode(t *testing.T, f func(t *testing.T, m mode)) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			if m == asPID1 {
				testenv.RequireRoot(t)
			}
			f(t, m)
		})
	}
}

// binaries builds nodeinit and the task helper.
func binaries(t *testing.T) (nodeinit, task string) {
	t.Helper()
	return testenv.BuildRaced(t, "./cmd/nodeinit"), testenv.Build(t, "./test/helpers/task")
}

// instance is one running nodeinit.
type instance struct {
	t       *testing.T
	cmd     *exec.Cmd
	stdout  string
	stderr  string
	started time.Time
	done    chan struct{}
	err     error
}

// start runs nodeinit with args in the given mode. Its stdout and stderr,
// which the children inherit, go to files in the test's directory.
func start(t *testing.T, m mode, args ...string) *instance {
	t.Helper()
	nodeinit, _ := binaries(t)
	dir := t.TempDir()
	i := &instance{t: t, stdout: filepath.Join(dir, "stdout"), stderr: filepath.Join(dir, "stderr"), done: make(chan struct{})}
	out, err := os.Create(i.stdout)
	if err != nil {
		t.Fatal(err)
	}
	errf, err := os.Create(i.stderr)
	if err != nil {
		t.Fatal(err)
	}
	i.cmd = exec.Command(nodeinit, args...)
	i.cmd.Stdout, i.cmd.Stderr = out, errf
	if m == asPID1 {
		i.cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	}
	i.started = time.Now()
	if err := i.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out.Close()
	errf.Close()
	go func() {
		i.err = i.cmd.Wait()
		close(i.done)
	}()
	t.Cleanup(func() {
		select {
		case <-i.done:
		default:
			_ = i.cmd.Process.Kill()
			<-i.done
			t.Logf("nodeinit log:\n%s", i.log())
		}
	})
	return i
}

func (i *instance) signal(sig syscall.Signal) {
	i.t.Helper()
	if err := i.cmd.Process.Signal(sig); err != nil {
		i.t.Fatalf("signal %v: %v", sig, err)
	}
}

// wait waits for nodeinit to exit and returns its exit code and how long it
// ran.
func (i *instance) wait(timeout time.Duration) int {
	i.t.Helper()
	select {
	case <-i.done:
	case <-time.After(timeout):
		i.t.Fatalf("nodeinit still running after %v; log:\n%s", timeout, i.log())
	}
	var ee *exec.ExitError
	if errors.As(i.err, &ee) {
		return ee.ExitCode()
	}
	if i.err != nil {
		i.t.Fatalf("wait: %v", i.err)
	}
	return 0
}

func (i *instance) running() bool {
	select {
	case <-i.done:
		return false
	default:
		return true
	}
}

func (i *instance) log() string {
	b, _ := os.ReadFile(i.stdout)
	return string(b)
}

func (i *instance) errlog() string {
	b, _ := os.ReadFile(i.stderr)
	return string(b)
}

// waitFor waits until cond holds, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
