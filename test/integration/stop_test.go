package integration

import (
	"context"
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

// An executor that KILL cannot end (here: frozen by the cgroup v1 freezer,
// as a process in uninterruptible sleep would be) holds nodeinit for the
// grace period and the 2 s reap bound, twice at most: once waiting for the
// executor, once for the rest. Then nodeinit exits 137, naming it.
func TestAnExecutorThatSurvivesKillIsNamedAndLeftBehind(t *testing.T) {
	testenv.RequireRoot(t)
	freezer := "/sys/fs/cgroup/freezer"
	_, err := os.Stat(filepath.Join(freezer, "cgroup.procs"))
	testenv.Require(t, err == nil, "needs the cgroup v1 freezer at "+freezer)
	_, task := binaries(t)
	dir := t.TempDir()
	ready, rec := filepath.Join(dir, "ready"), filepath.Join(dir, "executor.rec")
	i := start(t, asSubreaper, "--run-proxy=false", "--shutdown-grace-period=300ms",
		"--", task, "--ignore-term", "--record="+rec, "--ready="+ready)
	i.WaitForFile(10*time.Second, ready)
	kids, err := testenv.Children(i.Pid())
	must(t, err)
	if len(kids) != 1 {
		t.Fatalf("nodeinit's children: %v", kids)
	}
	executor := kids[0]
	cg := filepath.Join(freezer, "nodeinit-test-"+strconv.Itoa(os.Getpid())+"-"+strconv.Itoa(executor))
	must(t, os.Mkdir(cg, 0o755))
	t.Cleanup(func() {
		_ = os.WriteFile(filepath.Join(cg, "freezer.state"), []byte("THAWED"), 0o644)
		_ = syscall.Kill(executor, syscall.SIGKILL)
		testenv.WaitFor(t, 10*time.Second, "the thawed executor to be gone", func() bool {
			_, err := os.Stat("/proc/" + strconv.Itoa(executor))
			return errors.Is(err, os.ErrNotExist)
		})
		if err := os.Remove(cg); err != nil {
			t.Errorf("remove the freezer cgroup: %v", err)
		}
	})
	// The TERM reaches it before it is frozen: frozen, it records nothing.
	i.Signal(syscall.SIGTERM)
	testenv.WaitFor(t, 5*time.Second, "the executor to record the TERM", func() bool { return recorded(rec) == "TERM" })
	stopped := time.Now()
	must(t, os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(executor)), 0o644))
	must(t, os.WriteFile(filepath.Join(cg, "freezer.state"), []byte("FROZEN"), 0o644))

	code := i.Wait(15 * time.Second)
	took := time.Since(stopped)
	if code != 137 {
		t.Errorf("exit %d, want 137 (the executor, as though KILL had ended it); log:\n%s", code, i.Log())
	}
	// 300 ms grace, 2 s bound for the executor; 300 ms and 2 s for the rest.
	if took < 4*time.Second || took > 7*time.Second {
		t.Errorf("nodeinit exited %v after TERM, want about 4.6 s; log:\n%s", took, i.Log())
	}
	pid := strconv.Itoa(executor)
	if lines := i.Lines('E', "could not be reaped after KILL", pid); len(lines) != 1 {
		t.Errorf("no one error line naming the executor %s; log:\n%s", pid, i.Log())
	}
	if lines := i.Lines('E', "Exiting with processes that could not be reaped", pid); len(lines) != 1 {
		t.Errorf("no one last line naming the executor %s; log:\n%s", pid, i.Log())
	}
}

// More TERMs than the channel holds, carried across the re-exec, once
// blocked PID 1 for good before it read its flags. Such a variable from
// outside is ignored now (TestTheCarriedSignalsFromOutsideChangeNothing),
// and the re-exec carries a set (TestTermWhileStartingIsKeptForTheExecutor,
// and the unit tests of package signals); nodeinit still starts at once.
func TestCarriedTermsNeverHangTheStart(t *testing.T) {
	nodeinit, _ := binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeinit, "--version")
	cmd.Env = append(os.Environ(), "NODEINIT_SIGNALS=ignored=;pending="+strings.Repeat("TERM,", 20)+"INT")
	out, err := cmd.Output()
	if ctx.Err() != nil {
		t.Fatal("nodeinit --version did not return with 21 carried signals")
	}
	if err != nil || !strings.HasPrefix(string(out), "nodeinit ") {
		t.Errorf("nodeinit --version: %v, %q", err, out)
	}
}

// The help says what nodeinit does with signals: it passes on every one.
func TestTheHelpSaysEverySignalIsPassedOn(t *testing.T) {
	nodeinit, _ := binaries(t)
	out, err := exec.Command(nodeinit, "--help").Output()
	must(t, err)
	if !strings.Contains(string(out), "passes on every signal it can catch") || strings.Contains(string(out), "TERM, INT and HUP") {
		t.Errorf("--help:\n%s", out)
	}
}

// The stop signals of other runtimes — PWR (LXC, Incus) and SIGRTMIN+3
// (systemd-style images) — stop the node as TERM does: the drain first,
// then TERM to the executor, which as a Go program would ignore either.
func TestPwrAndRtmin3StopTheNodeLikeTerm(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGPWR, 37} {
		t.Run(strconv.Itoa(int(sig)), func(t *testing.T) {
			i, rec := drainNode(t, asSubreaper, 200*time.Millisecond, "--graceful-node-shutdown-delay=20s")
			i.Signal(sig)
			if code := i.Wait(10 * time.Second); code != 0 {
				t.Fatalf("exit %d, want the executor's 0; log:\n%s", code, i.Log())
			}
			if got := testenv.ReadRecord(t, rec).Signals(); got != "INHIBIT,PREPARE,RELEASED,TERM" {
				t.Errorf("the executor saw %s, want INHIBIT,PREPARE,RELEASED,TERM", got)
			}
			i.WaitForLog(time.Second, 'I', "Forwarded signal to the executor", `signal="TERM"`, "received=")
		})
	}
}
