//go:build k8s

package k8s

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// server is a long-running program the fixture started: etcd, a control
// plane component, containerd. Its output goes to NAME.log in the fixture's
// directory; it is stopped by its pid.
type server struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// startServer starts argv in a process group of its own (a TERM the test
// receives is not its), with its output in dir/NAME.log. If the test
// process dies without stopping it (a test binary's timeout panic), the
// kernel kills it.
func startServer(dir, name string, argv ...string) (*server, error) {
	return startServerEnv(dir, name, nil, argv...)
}

// startServerEnv is startServer with env added to the server's
// environment (a later entry wins).
func startServerEnv(dir, name string, env []string, argv ...string) (*server, error) {
	s := &server{name: name, log: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	out, err := os.Create(s.log)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	s.cmd = exec.Command(argv[0], argv[1:]...)
	if env != nil {
		s.cmd.Env = append(os.Environ(), env...)
	}
	s.cmd.Stdout, s.cmd.Stderr = out, out
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	return s, nil
}

// running reports whether the server has not exited.
func (s *server) running() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// stop sends TERM to the server's pid and waits up to grace for it to end,
// then sends KILL and waits up to 5 s more.
func (s *server) stop(grace time.Duration) error {
	if !s.running() {
		return nil
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		return nil
	case <-time.After(grace):
	}
	_ = s.cmd.Process.Kill()
	select {
	case <-s.done:
		return fmt.Errorf("%s (pid %d) ignored TERM for %v and was killed", s.name, s.cmd.Process.Pid, grace)
	case <-time.After(5 * time.Second):
		return fmt.Errorf("%s (pid %d) still runs 5s after KILL", s.name, s.cmd.Process.Pid)
	}
}

// tail is the end of the server's log, for failure messages.
func (s *server) tail() string {
	b, _ := os.ReadFile(s.log)
	return fmt.Sprintf("--- %s (%s), last lines:\n%s", s.name, s.log, testenv.Tail(string(b), 30))
}

// run runs a short command with a bound and returns its combined output;
// the error holds the output too.
func run(timeout time.Duration, argv ...string) (string, error) {
	return runInput(timeout, "", argv...)
}

// runInput is run with input on the command's stdin.
func runInput(timeout time.Duration, input string, argv ...string) (string, error) {
	return runCmd(timeout, input, false, argv...)
}

// stdoutOf is run for a command whose stdout is its answer: it returns
// stdout alone, and stderr only in the error.
func stdoutOf(timeout time.Duration, argv ...string) (string, error) {
	return runCmd(timeout, "", true, argv...)
}

func runCmd(timeout time.Duration, input string, split bool, argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin = strings.NewReader(input)
	cmd.WaitDelay = time.Second
	var out []byte
	var err error
	if split {
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err = cmd.Output()
		if err != nil {
			out = append(out, stderr.String()...)
		}
	} else {
		out, err = cmd.CombinedOutput()
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("timed out after %v", timeout)
	}
	if err != nil {
		return string(out), fmt.Errorf("%s: %w\n%s", strings.Join(argv, " "), err, testenv.Tail(string(out), 20))
	}
	return string(out), nil
}
