package integration

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// terminal is the user's side of a pseudo-terminal that nodeinit runs on,
// as under `podman run -it`.
type terminal struct {
	t      *testing.T
	master *os.File
	out    bytes.Buffer // everything read so far
}

// onTerminal starts nodeinit with a new pseudo-terminal as its stdin,
// stdout, stderr and controlling terminal.
func onTerminal(t *testing.T, m mode, args ...string) (*testenv.Node, *terminal) {
	t.Helper()
	master, slave, err := testenv.OpenPTY()
	must(t, err)
	t.Cleanup(func() { master.Close() })
	i := testenv.Launch(t, testenv.Options{PID1: m == asPID1, Terminal: slave}, args...)
	slave.Close()
	return i, &terminal{t: t, master: master}
}

func (term *terminal) write(s string) {
	term.t.Helper()
	if _, err := term.master.WriteString(s); err != nil {
		term.t.Fatalf("write to the terminal: %v", err)
	}
}

// expect reads the terminal until its output holds want.
func (term *terminal) expect(want string, timeout time.Duration) {
	term.t.Helper()
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 4096)
	for !strings.Contains(term.out.String(), want) {
		if err := term.master.SetReadDeadline(deadline); err != nil {
			term.t.Fatal(err)
		}
		n, err := term.master.Read(buf)
		term.out.Write(buf[:n])
		if err != nil && !strings.Contains(term.out.String(), want) {
			term.t.Fatalf("the terminal shows no %q (%v); it shows:\n%s", want, err, term.out.String())
		}
	}
}

// drainUntil reads the terminal until done is closed or the timeout, so
// that a failure can show everything the terminal showed.
func (term *terminal) drainUntil(done <-chan struct{}, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 4096)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return
		default:
		}
		_ = term.master.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		n, _ := term.master.Read(buf)
		term.out.Write(buf[:n])
	}
}

// The executor owns the terminal: it reads what the user types, and its
// process group is the terminal's foreground group (tini's tcsetpgrp).
func TestTheExecutorReadsTheTerminal(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		_, task := binaries(t)
		report := filepath.Join(t.TempDir(), "proxy.json")
		i, term := onTerminal(t, m, "--proxy-path="+task, "--proxy-arg=--report="+report,
			"--", "/bin/sh", "-c", `echo ready; read line; echo "got:$line"; exit 3`)
		term.expect("ready", 10*time.Second)
		// The foreground group of nodeinit's terminal is the executor's,
		// and neither nodeinit's nor the proxy's.
		st, err := testenv.ReadStat(i.Pid())
		must(t, err)
		kids, err := testenv.Children(i.Pid())
		must(t, err)
		var fg bool
		for _, k := range kids {
			ks, err := testenv.ReadStat(k)
			if err == nil && ks.Comm == "sh" && ks.Pgrp == st.Tpgid {
				fg = true
			}
		}
		if !fg || st.Tpgid == st.Pgrp {
			t.Errorf("the terminal's foreground group is %d; nodeinit's is %d: not the executor's", st.Tpgid, st.Pgrp)
		}
		i.WaitForFile(10*time.Second, report)
		proxy := testenv.ReadReport(t, report)
		if proxy.Pgid == proxy.Foreground {
			t.Errorf("the proxy is in the terminal's foreground group %d", proxy.Foreground)
		}
		if proxy.Stdin != os.DevNull {
			t.Errorf("the proxy's stdin is %q, want %s", proxy.Stdin, os.DevNull)
		}
		term.write("hello\n")
		term.expect("got:hello", 5*time.Second)
		if code := i.Wait(10 * time.Second); code != 3 {
			t.Errorf("exit %d, want the executor's 3", code)
		}
	})
}

// Ctrl-C on the terminal reaches the executor (the foreground group) at
// once, as under tini; nodeinit exits with its 128+INT, long before the
// grace period.
func TestCtrlCEndsTheExecutor(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		i, term := onTerminal(t, m, "--run-proxy=false", "--shutdown-grace-period=30s",
			"--", "/bin/sh", "-c", `echo ready; exec cat`)
		term.expect("ready", 10*time.Second)
		sent := time.Now()
		term.write("\x03")
		if code := i.Wait(10 * time.Second); code != 128+int(syscall.SIGINT) {
			t.Errorf("exit %d after Ctrl-C, want 130", code)
		}
		if took := time.Since(sent); took > 5*time.Second {
			t.Errorf("Ctrl-C took %v to end the executor", took)
		}
	})
}

// An interactive shell as executor has job control: Ctrl-Z stops its
// foreground job and gives it the terminal back, and nodeinit itself is
// never stopped.
func TestTheExecutorsShellHasJobControl(t *testing.T) {
	bash := testenv.RequireTool(t, "bash")
	forEachMode(t, func(t *testing.T, m mode) {
		token := "30." + strconv.Itoa(time.Now().Nanosecond()/1000)
		i, term := onTerminal(t, m, "--run-proxy=false", "--", bash, "--norc", "--noprofile", "-i")
		term.write("PS1='prompt> '\n")
		term.expect("prompt> ", 10*time.Second)
		term.write("sleep " + token + "\n")
		testenv.WaitFor(t, 5*time.Second, "sleep running", func() bool {
			return len(testenv.ProcessesWithArg("sleep\x00"+token)) == 1
		})
		term.write("\x1a") // Ctrl-Z
		term.expect("Stopped", 5*time.Second)
		if st, err := testenv.ReadStat(i.Pid()); err != nil || st.State == "T" {
			t.Errorf("nodeinit is stopped (%+v, %v)", st, err)
		}
		// fg gives the job the terminal back (bash's own tcsetpgrp); Ctrl-C
		// then reaches it and not bash.
		term.write("fg\n")
		testenv.WaitFor(t, 5*time.Second, "sleep continued", func() bool {
			ps := testenv.ProcessesWithArg("sleep\x00" + token)
			if len(ps) != 1 {
				return false
			}
			st, err := testenv.ReadStat(ps[0])
			return err == nil && st.State != "T"
		})
		term.write("\x03")
		testenv.WaitFor(t, 5*time.Second, "sleep ended by Ctrl-C", func() bool {
			return len(testenv.ProcessesWithArg("sleep\x00"+token)) == 0
		})
		term.write("echo $?\n")
		term.expect("130", 5*time.Second)
		term.write("exit 5\n")
		term.drainUntil(i.Done(), 10*time.Second)
		if i.Running() {
			t.Fatalf("the shell did not exit; terminal:\n%q", term.out.String())
		}
		if code := i.Wait(time.Second); code != 5 {
			t.Errorf("exit %d, want the shell's 5; terminal:\n%s", code, term.out.String())
		}
		if strings.Contains(term.out.String(), "no job control") {
			t.Errorf("the shell has no job control:\n%s", term.out.String())
		}
	})
}

// A terminal on stdin that is not nodeinit's controlling terminal (it was
// started in a session of its own) cannot be handed over; nodeinit starts
// the executor anyway, without it.
func TestATerminalThatIsNotOursIsLeftAlone(t *testing.T) {
	master, slave, err := testenv.OpenPTY()
	must(t, err)
	defer master.Close()
	defer slave.Close()
	i := testenv.Launch(t, testenv.Options{Stdin: slave}, "--run-proxy=false", "--", "/bin/sh", "-c", "exit 4")
	if code := i.Wait(10 * time.Second); code != 4 {
		t.Errorf("exit %d, want the executor's 4; log:\n%s", code, i.Log())
	}
	if strings.Contains(i.Log(), "controlling terminal") {
		t.Errorf("nodeinit took a terminal that is not its own:\n%s", i.Log())
	}
}

// The first command a newcomer tries: `script` gives nodeinit a terminal,
// and `cat` reads it until Ctrl-D.
func TestScriptRunsCatUnderNodeinit(t *testing.T) {
	script := testenv.RequireTool(t, "script")
	nodeinit, _ := binaries(t)
	master, slave, err := testenv.OpenPTY()
	must(t, err)
	defer master.Close()
	cmd := exec.Command(script, "-qec", nodeinit+" --run-proxy=false -- cat", "/dev/null")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	must(t, cmd.Start())
	slave.Close()
	term := &terminal{t: t, master: master}
	term.expect("Started task", 10*time.Second)
	term.write("typed line\n")
	term.expect("typed line\r\ntyped line", 5*time.Second) // the echo, then cat's copy
	term.write("\x04")                                     // Ctrl-D: cat reads EOF and exits 0
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		if err != nil {
			t.Errorf("script exited %v, want 0 (cat's status); terminal:\n%s", err, term.out.String())
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("cat under nodeinit did not end on Ctrl-D; terminal:\n%s", term.out.String())
	}
}
