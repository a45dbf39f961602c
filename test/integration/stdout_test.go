package integration

import (
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// nodeinit's stdout is a pipe that nobody reads, full before nodeinit
// writes its first line. It still starts the executor, handles signals,
// reaps, and exits with the executor's status.
func TestUnreadStdoutNeverBlocksSignalsOrReaping(t *testing.T) {
	_, task := binaries(t)
	r, w, err := os.Pipe()
	must(t, err)
	defer r.Close()
	fillPipe(t, w)
	ready := t.TempDir() + "/ready"
	i := testenv.Launch(t, testenv.Options{Stdout: w}, "--run-proxy=false", "--", task, "--ready="+ready, "--exit=9")
	w.Close()
	i.WaitForFile(10*time.Second, ready)
	i.Signal(syscall.SIGUSR1) // more log lines that cannot be written
	sent := time.Now()
	i.Signal(syscall.SIGTERM)
	if code := i.Wait(15 * time.Second); code != 9 {
		t.Errorf("exit %d, want the executor's 9", code)
	}
	// The log flush on exit gives up after its bound.
	if d := time.Since(sent); d > 5*time.Second {
		t.Errorf("took %v to exit after TERM", d)
	}
}

// fillPipe writes to w until the pipe has no room for one more byte.
func fillPipe(t *testing.T, w *os.File) {
	t.Helper()
	fd := int(w.Fd())
	must(t, unix.SetNonblock(fd, true))
	chunk := make([]byte, 4096)
	for _, size := range []int{len(chunk), 1} {
		for {
			if _, err := unix.Write(fd, chunk[:size]); err != nil {
				if err != unix.EAGAIN {
					t.Fatalf("fill the pipe: %v", err)
				}
				break
			}
		}
	}
	must(t, unix.SetNonblock(fd, false))
}

// nodeinit's stdout is a pipe whose reader is gone: every log write fails
// with EPIPE, and nodeinit still runs the executor and exits with its status.
func TestClosedStdoutIsNotFatal(t *testing.T) {
	_, task := binaries(t)
	r, w, err := os.Pipe()
	must(t, err)
	r.Close()
	ready := t.TempDir() + "/ready"
	i := testenv.Launch(t, testenv.Options{Stdout: w}, "--run-proxy=false", "--", task, "--ready="+ready, "--exit=8")
	w.Close()
	i.WaitForFile(10*time.Second, ready)
	i.Signal(syscall.SIGUSR1) // more log lines into the broken pipe
	i.Signal(syscall.SIGTERM)
	if code := i.Wait(15 * time.Second); code != 8 {
		t.Errorf("nodeinit exited %d, want the executor's 8", code)
	}
}
