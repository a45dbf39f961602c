package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// A newcomer's first try: `podman run -it IMAGE -- /bin/sh` gives a working
// shell. nodeinit hands the executor the container's terminal: the shell
// reads what is typed, Ctrl-C ends the command in the foreground and not
// the shell, and the shell's exit status is the container's.
func TestPodmanRunItGivesAWorkingShell(t *testing.T) {
	e := start(t)
	master, slave, err := testenv.OpenPTY()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	name := "nodeinit-e2e-it-" + randomID()
	cmd := e.command("run", "-it", "--rm", "--name", name, e.image, "--run-proxy=false", "--", "/bin/sh")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	done := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		select {
		case <-done:
			return
		default:
		}
		_, _ = e.podman("rm", "--force", name)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})

	var out bytes.Buffer
	expect := func(want string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		buf := make([]byte, 4096)
		for !strings.Contains(out.String(), want) {
			_ = master.SetReadDeadline(deadline)
			n, err := master.Read(buf)
			out.Write(buf[:n])
			if err != nil && !strings.Contains(out.String(), want) {
				t.Fatalf("the terminal shows no %q (%v); it shows:\n%s", want, err, out.String())
			}
		}
	}
	write := func(s string) {
		t.Helper()
		if _, err := master.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	write("echo hello $((6 * 7))\n")
	expect("hello 42")
	token := fmt.Sprintf("30.%06d", time.Now().Nanosecond()/1000)
	write("sleep " + token + "\n")
	testenv.WaitFor(t, 30*time.Second, "sleep running in the container", func() bool {
		return len(testenv.ProcessesWithArg("sleep\x00"+token)) == 1
	})
	write("\x03")
	testenv.WaitFor(t, 10*time.Second, "sleep ended by Ctrl-C", func() bool {
		return len(testenv.ProcessesWithArg("sleep\x00"+token)) == 0
	})
	write("echo status $?\n")
	expect("status 130")
	write("exit 3\n")
	select {
	case <-done:
		var ee *exec.ExitError
		if !errors.As(waitErr, &ee) || ee.ExitCode() != 3 {
			t.Errorf("podman run -it ended with %v, want the shell's exit status 3; terminal:\n%s", waitErr, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the shell did not exit; terminal:\n%s", out.String())
	}
}
