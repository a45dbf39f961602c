package integration

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// nodeinit's stdout is a pipe that nobody reads. Its log fills the pipe, yet
// it keeps handling signals, reaps, and exits with the executor's status.
func TestUnreadStdoutNeverBlocksSignalsOrReaping(t *testing.T) {
	nodeinit, task := binaries(t)
	r, w, err := os.Pipe()
	must(t, err)
	defer r.Close()
	ready := filepath.Join(t.TempDir(), "ready")
	// The executor fills the pipe they share, so nodeinit's next log line
	// finds it full.
	cmd := exec.Command(nodeinit, "--run-proxy=false", "--", task, "--ready="+ready, "--exit=9", "--fill-stdout=1000000")
	cmd.Stdout, cmd.Stderr = w, w
	must(t, cmd.Start())
	w.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	waitFor(t, 10*time.Second, "executor ready", func() bool { return exists(ready) })
	time.Sleep(100 * time.Millisecond)
	must(t, cmd.Process.Signal(syscall.SIGUSR1))
	time.Sleep(100 * time.Millisecond)
	sent := time.Now()
	must(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-done:
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != 9 {
			t.Errorf("exit %d, want the executor's 9", code)
		}
		// The log flush on exit gives up after its timeout.
		if d := time.Since(sent); d > 5*time.Second {
			t.Errorf("took %v to exit after TERM", d)
		}
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("nodeinit hung with its stdout pipe full")
	}
	buf := make([]byte, 1<<16)
	n, _ := r.Read(buf)
	if !strings.Contains(string(buf[:n]), "Starting nodeinit") {
		t.Errorf("the pipe does not start with nodeinit's log: %q", buf[:min(n, 200)])
	}
}

// nodeinit's stdout is a pipe whose reader is gone: every log write fails
// with EPIPE (SIGPIPE is caught, not fatal), and nodeinit still runs the
// executor and exits with its status.
func TestClosedStdoutIsNotFatal(t *testing.T) {
	nodeinit, task := binaries(t)
	r, w, err := os.Pipe()
	must(t, err)
	r.Close()
	ready := filepath.Join(t.TempDir(), "ready")
	cmd := exec.Command(nodeinit, "--run-proxy=false", "--", task, "--ready="+ready, "--exit=8")
	cmd.Stdout = w
	must(t, cmd.Start())
	w.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	waitFor(t, 10*time.Second, "executor ready", func() bool { return exists(ready) })
	must(t, cmd.Process.Signal(syscall.SIGUSR1)) // more log lines into the broken pipe
	must(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 8 {
			t.Errorf("nodeinit ended with %v, want exit status 8", err)
		}
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("nodeinit hung with a closed stdout")
	}
}
