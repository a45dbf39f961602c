package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/test/testenv"
)

func TestExitCodeOfTheExecutorIsNodeinits(t *testing.T) {
	_, task := binaries(t)
	forEachMode(t, func(t *testing.T, m mode) {
		for _, code := range []int{0, 1, 3, 42, 255} {
			i := start(t, m, "--run-proxy=false", "--", task, "--lifetime=1ms", "--exit="+strconv.Itoa(code))
			if got := i.Wait(10 * time.Second); got != code {
				t.Errorf("executor exit %d: nodeinit exited %d; log:\n%s", code, got, i.Log())
			}
		}
	})
}

func TestDeathBySignalGives128PlusSignal(t *testing.T) {
	_, task := binaries(t)
	forEachMode(t, func(t *testing.T, m mode) {
		for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSEGV, syscall.SIGTERM, syscall.SIGABRT} {
			name := strings.TrimPrefix(fmt.Sprint(sig), "SIG")
			i := start(t, m, "--run-proxy=false", "--", task, "--lifetime=1ms", "--die-by="+unixName(sig))
			if got, want := i.Wait(10*time.Second), 128+int(sig); got != want {
				t.Errorf("executor killed by %s: nodeinit exited %d, want %d; log:\n%s", name, got, want, i.Log())
			}
		}
	})
}

func unixName(sig syscall.Signal) string {
	return map[syscall.Signal]string{syscall.SIGKILL: "KILL", syscall.SIGSEGV: "SEGV", syscall.SIGTERM: "TERM", syscall.SIGABRT: "ABRT"}[sig]
}

func TestCommandsThatCannotRun(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-executable")
	badInterp := filepath.Join(dir, "bad-interpreter")
	must(t, os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644))
	must(t, os.WriteFile(badInterp, []byte("#!/nonexistent/interpreter\n"), 0o755))
	_, task := binaries(t)
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string // in the log, naming the path
	}{
		{"missing executor", []string{"--run-proxy=false", filepath.Join(dir, "missing")}, 127, filepath.Join(dir, "missing")},
		{"executor not in PATH", []string{"--run-proxy=false", "no-such-kubelet"}, 127, "no-such-kubelet"},
		{"executor not executable", []string{"--run-proxy=false", notExec}, 126, notExec},
		{"executor is a directory", []string{"--run-proxy=false", dir}, 126, dir},
		{"executor's interpreter missing", []string{"--run-proxy=false", badInterp}, 126, "bad interpreter"},
		{"missing proxy", []string{"--proxy-path=" + filepath.Join(dir, "kube-proxy"), task}, 127, filepath.Join(dir, "kube-proxy")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i := start(t, asSubreaper, tc.args...)
			if got := i.Wait(10 * time.Second); got != tc.code {
				t.Errorf("exit %d, want %d; log:\n%s", got, tc.code, i.Log())
			}
			if !strings.Contains(i.Log(), tc.msg) {
				t.Errorf("log does not name %q:\n%s", tc.msg, i.Log())
			}
			if strings.Count(strings.TrimSpace(i.Log()), "\n") > 8 {
				t.Errorf("too much said for one failure:\n%s", i.Log())
			}
		})
	}
}

func TestUsageErrorsExitTwoWithOneLineOnStderr(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		msg  string
	}{
		{"no executor", nil, "no EXECUTOR"},
		{"unknown flag", []string{"--no-such-flag", "/bin/true"}, "unknown flag: --no-such-flag"},
		{"bad duration", []string{"--shutdown-grace-period=soon", "/bin/true"}, "shutdown-grace-period"},
		{"negative grace period", []string{"--shutdown-grace-period=-1s", "/bin/true"}, "shutdown-grace-period"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i := start(t, asSubreaper, tc.args...)
			if got := i.Wait(10 * time.Second); got != 2 {
				t.Errorf("exit %d, want 2", got)
			}
			lines := strings.Split(strings.TrimSpace(i.Stderr()), "\n")
			if !strings.Contains(lines[0], tc.msg) || len(lines) > 2 {
				t.Errorf("stderr = %q, want one line with %q and a hint", i.Stderr(), tc.msg)
			}
			if i.Log() != "" {
				t.Errorf("stdout not empty on a usage error: %q", i.Log())
			}
		})
	}
}

func TestHelpAndVersionExitZero(t *testing.T) {
	i := start(t, asSubreaper, "--help")
	if got := i.Wait(5 * time.Second); got != 0 || !strings.Contains(i.Log(), "--shutdown-grace-period") || !strings.Contains(i.Log(), "--vmodule") {
		t.Errorf("--help: exit %d, stdout:\n%s", got, i.Log())
	}
	i = start(t, asSubreaper, "--version")
	if got := i.Wait(5 * time.Second); got != 0 || !strings.HasPrefix(i.Log(), "nodeinit ") {
		t.Errorf("--version: exit %d, stdout %q", got, i.Log())
	}
}

func TestNotPID1RegistersAsSubreaperOnce(t *testing.T) {
	_, task := binaries(t)
	i := start(t, asSubreaper, "--run-proxy=false", task, "--lifetime=1ms")
	if code := i.Wait(10 * time.Second); code != 0 {
		t.Errorf("exit %d, want the executor's 0", code)
	}
	if n := strings.Count(i.Log(), "registered as child subreaper"); n != 1 {
		t.Errorf("subreaper registration logged %d times:\n%s", n, i.Log())
	}
	if i.Stderr() != "" {
		t.Errorf("stderr not empty: %q", i.Stderr())
	}
}

// TERM and INT reach the executor at once and the proxy once the executor
// has ended: executor first, proxy last.
func TestTermAndIntReachExecutorThenProxy(t *testing.T) {
	_, task := binaries(t)
	forEachMode(t, func(t *testing.T, m mode) {
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
			dir := t.TempDir()
			ex, px := filepath.Join(dir, "executor"), filepath.Join(dir, "proxy")
			i := start(t, m, "--proxy-path="+task, "--proxy-arg=--record="+px+".rec", "--proxy-arg=--ready="+px+".ready",
				"--", task, "--record="+ex+".rec", "--ready="+ex+".ready", "--exit=7")
			testenv.WaitFor(t, 10*time.Second, "tasks ready", func() bool { return exists(ex+".ready") && exists(px+".ready") })
			i.Signal(sig)
			if got := i.Wait(10 * time.Second); got != 7 {
				t.Fatalf("exit %d, want the executor's 7; log:\n%s", got, i.Log())
			}
			name := strings.TrimPrefix(unixSigName(sig), "SIG")
			exRec, pxRec := testenv.ReadRecord(t, ex+".rec"), testenv.ReadRecord(t, px+".rec")
			if exRec.Signals() != name {
				t.Errorf("executor got %q, want %s", exRec.Signals(), name)
			}
			if pxRec.Signals() != "TERM" {
				t.Errorf("proxy got %q, want TERM", pxRec.Signals())
			}
			if len(exRec) == 1 && len(pxRec) == 1 && pxRec[0].At.Before(exRec[0].At) {
				t.Errorf("proxy got TERM at %v, before the executor got %s at %v", pxRec[0].At, name, exRec[0].At)
			}
		}
	})
}

func unixSigName(sig syscall.Signal) string {
	return map[syscall.Signal]string{syscall.SIGTERM: "SIGTERM", syscall.SIGINT: "SIGINT"}[sig]
}

// HUP is forwarded to both at once, and nothing ends.
func TestHupReachesExecutorAndProxyAndOnlyForwards(t *testing.T) {
	_, task := binaries(t)
	forEachMode(t, func(t *testing.T, m mode) {
		dir := t.TempDir()
		ex, px := filepath.Join(dir, "executor"), filepath.Join(dir, "proxy")
		i := start(t, m, "--proxy-path="+task, "--proxy-arg=--record="+px+".rec", "--proxy-arg=--ready="+px+".ready",
			"--", task, "--record="+ex+".rec", "--ready="+ex+".ready")
		testenv.WaitFor(t, 10*time.Second, "tasks ready", func() bool { return exists(ex+".ready") && exists(px+".ready") })
		i.Signal(syscall.SIGHUP)
		testenv.WaitFor(t, 5*time.Second, "HUP recorded by both", func() bool {
			e, _ := os.ReadFile(ex + ".rec")
			p, _ := os.ReadFile(px + ".rec")
			return strings.HasPrefix(string(e), "HUP ") && strings.HasPrefix(string(p), "HUP ")
		})
		// The status line comes after the HUP has been handled: by then a
		// restart or an end would show.
		i.Signal(syscall.SIGUSR1)
		i.WaitForLog(5*time.Second, 'I', `"Task status"`, `task="proxy"`)
		if !i.Running() {
			t.Fatalf("nodeinit ended after HUP; log:\n%s", i.Log())
		}
		if n := strings.Count(i.Log(), "Started task"); n != 2 || strings.Contains(i.Log(), "Restarted") {
			t.Errorf("HUP restarted something; log:\n%s", i.Log())
		}
		i.Signal(syscall.SIGTERM)
		if got := i.Wait(10 * time.Second); got != 0 {
			t.Errorf("exit %d after TERM, want 0", got)
		}
	})
}

// Orphans that the kernel hands nodeinit are all reaped.
func TestReapsTwoThousandOrphans(t *testing.T) {
	_, task := binaries(t)
	forEachMode(t, func(t *testing.T, m mode) {
		dir := t.TempDir()
		ready := filepath.Join(dir, "ready")
		i := start(t, m, "--run-proxy=false", "--", task, "--orphans=2000", "--ready="+ready)
		testenv.WaitFor(t, 30*time.Second, "orphans made", func() bool { return exists(ready) })
		testenv.WaitFor(t, 10*time.Second, "no zombie left", func() bool { return len(testenv.Zombies(i.Pid())) == 0 })
		i.Signal(syscall.SIGTERM)
		if got := i.Wait(10 * time.Second); got != 0 {
			t.Fatalf("exit %d", got)
		}
		switch n, ok := orphansReaped(i); {
		case !ok:
			t.Errorf("no one line counts the orphans reaped:\n%s", testenv.Tail(i.Log(), 3))
		case n < 2000:
			t.Errorf("log counts %d orphans reaped, want at least 2000:\n%s", n, testenv.Tail(i.Log(), 3))
		}
	})
}

// orphansReaped is the number of orphans nodeinit's closing line says it
// reaped; ok is false when the log holds no one such line.
func orphansReaped(i *testenv.Node) (n int, ok bool) {
	lines := i.Lines('I', `"All processes have ended"`)
	if len(lines) != 1 {
		return 0, false
	}
	m := regexp.MustCompile(`\borphansReaped=(\d+)\b`).FindStringSubmatch(lines[0])
	if m == nil {
		return 0, false
	}
	n, err := strconv.Atoi(m[1])
	return n, err == nil
}

// The executor ends in the same instant as hundreds of orphans: its status
// must come through every time.
func TestExecutorStatusIsNeverLostAmongDyingOrphans(t *testing.T) {
	_, task := binaries(t)
	forEachMode(t, func(t *testing.T, m mode) {
		for n := 0; n < 20; n++ {
			code := 10 + n
			i := start(t, m, "--run-proxy=false", "--", task, "--orphans=300", "--lifetime=1ns", "--exit="+strconv.Itoa(code))
			if got := i.Wait(20 * time.Second); got != code {
				t.Fatalf("run %d: exit %d, want %d; log:\n%s", n, got, code, i.Log())
			}
		}
	})
}

// A proxy that keeps exiting is started again after delays that double up
// to the cap.
func TestProxyRespawnsWithGrowingDelays(t *testing.T) {
	_, task := binaries(t)
	forEachMode(t, func(t *testing.T, m mode) {
		starts := filepath.Join(t.TempDir(), "starts")
		i := start(t, m, "--proxy-path="+task, "--proxy-arg=--starts="+starts, "--proxy-arg=--lifetime=1ns", "--proxy-arg=--exit=1",
			"--proxy-restart-backoff=100ms", "--proxy-restart-backoff-max=400ms",
			"--", task)
		// Starts at about 0, 0.1, 0.3, 0.7, 1.1 and 1.5 s.
		testenv.WaitFor(t, 20*time.Second, "six proxy starts", func() bool { return countLines(t, starts) >= 6 })
		if got := i.Stop(10 * time.Second); got != 0 {
			t.Fatalf("exit %d", got)
		}
		at := testenv.ReadStarts(t, starts)
		// Never sooner than the backoff: a start too many would show as a
		// gap too short.
		want := []time.Duration{100, 200, 400, 400, 400, 400, 400, 400}
		for k := 1; k < len(at); k++ {
			if gap, w := at[k].Sub(at[k-1]), want[k-1]*time.Millisecond; gap < w {
				t.Errorf("restart %d came %v after the previous start, want at least %v", k, gap, w)
			}
		}
	})
}

// When the executor ends, the proxy and every leftover get TERM, and what
// ignores it is killed when the grace period is over.
func TestExecutorDeathEndsProxyAndLeftoversWithinGracePeriod(t *testing.T) {
	_, task := binaries(t)
	forEachMode(t, func(t *testing.T, m mode) {
		// A unique lifetime for the grandchild finds it among all processes.
		token := (time.Hour + time.Duration(time.Now().Nanosecond()%1000000)*time.Millisecond).String()
		dir := t.TempDir()
		ready := filepath.Join(dir, "ready")
		i := start(t, m, "--shutdown-grace-period=700ms",
			"--proxy-path="+task, "--proxy-arg=--ignore-term",
			"--", task, "--grandchild="+token, "--ready="+ready, "--lifetime=300ms", "--exit=5")
		testenv.WaitFor(t, 10*time.Second, "executor ready", func() bool { return exists(ready) })
		grandchild := "grandchild\x00" + token
		if len(testenv.ProcessesWithArg(grandchild)) != 1 {
			t.Fatalf("grandchild not running")
		}
		began := time.Now()
		if got := i.Wait(10 * time.Second); got != 5 {
			t.Fatalf("exit %d, want 5; log:\n%s", got, i.Log())
		}
		// The executor ran ~300ms, then the grace period of 700ms.
		if d := time.Since(began); d > 3*time.Second {
			t.Errorf("nodeinit took %v to end after the executor", d)
		}
		if ps := testenv.ProcessesWithArg(grandchild); len(ps) != 0 {
			t.Errorf("leftover grandchild %v still alive after nodeinit exited", ps)
		}
		if !strings.Contains(i.Log(), "Grace period over; killing what is left") {
			t.Errorf("log does not say the rest was killed:\n%s", i.Log())
		}
	})
}

// An executor that ignores TERM is killed once the grace period is over,
// and nodeinit reports 128+SIGKILL.
func TestTermIgnoringExecutorIsKilledAfterGracePeriod(t *testing.T) {
	_, task := binaries(t)
	forEachMode(t, func(t *testing.T, m mode) {
		ready := filepath.Join(t.TempDir(), "ready")
		i := start(t, m, "--run-proxy=false", "--shutdown-grace-period=500ms", "--", task, "--ignore-term", "--ready="+ready)
		testenv.WaitFor(t, 10*time.Second, "executor ready", func() bool { return exists(ready) })
		sent := time.Now()
		i.Signal(syscall.SIGTERM)
		got := i.Wait(10 * time.Second)
		took := time.Since(sent)
		if got != 137 {
			t.Errorf("exit %d, want 137 (SIGKILL)", got)
		}
		if took < 500*time.Millisecond || took > 3*time.Second {
			t.Errorf("ended %v after TERM, want just after the 500ms grace period", took)
		}
	})
}

// SIGUSR1 logs one status line per task, and one of nodeinit itself with
// its goroutines and the Go runtime's memory, which a soak watches for a
// leak.
func TestUsr1LogsTaskStatus(t *testing.T) {
	_, task := binaries(t)
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	i := start(t, asSubreaper, "--proxy-path="+task, "--", task, "--ready="+ready)
	testenv.WaitFor(t, 10*time.Second, "executor ready", func() bool { return exists(ready) })
	i.Status(5*time.Second, 'I', `"Task status"`, `task="proxy"`)
	for _, want := range []string{`task="executor"`, `task="proxy"`, `state="running"`, `phase="running"`, `restarts=0`, `lastExit="none"`} {
		if !strings.Contains(i.Log(), want) {
			t.Errorf("status dump lacks %s:\n%s", want, i.Log())
		}
	}
	line := i.WaitForLog(5*time.Second, 'I', `"Init status"`)
	// The Go runtime's figures: a leak shows in heapLive; the rest tell
	// the heap kept for the next collection and the stacks from it.
	for _, field := range []string{"goroutines", "heapGoal", "heapHeld", "stacks", "goMapped"} {
		if m := regexp.MustCompile(` ` + field + `=(\d+)`).FindStringSubmatch(line); m == nil || m[1] == "0" {
			t.Errorf("nodeinit's own status line gives no %s: %q", field, line)
		}
	}
	if !regexp.MustCompile(` heapLive=\d+ `).MatchString(line) || !regexp.MustCompile(` gcCycles=\d+$`).MatchString(line) {
		t.Errorf("nodeinit's own status line gives no heapLive or gcCycles: %q", line)
	}
	if code := i.Stop(10 * time.Second); code != 0 {
		t.Errorf("exit %d after TERM, want the executor's 0", code)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
