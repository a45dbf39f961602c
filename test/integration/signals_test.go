package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/init/signals"
	"github.com/nodeinit/nodeinit/test/testenv"
)

// Every signal nodeinit can catch reaches the executor's process group, as
// under tini and dumb-init, one by one and in order — the fault signals
// (SEGV, BUS, FPE, ILL, TRAP, SYS, ABRT) too, which nodeinit survives even
// as PID 1 — except CHLD (reaped) and USR1 (the status line); HUP reaches
// the proxy as well.
func TestEveryCatchableSignalReachesTheExecutor(t *testing.T) {
	_, task := binaries(t)
	forEachMode(t, func(t *testing.T, m mode) {
		dir := t.TempDir()
		ex, px := filepath.Join(dir, "executor"), filepath.Join(dir, "proxy")
		i := start(t, m, "--proxy-path="+task, "--proxy-arg=--record="+px+".rec", "--proxy-arg=--ready="+px+".ready",
			"--", task, "--record="+ex+".rec", "--ready="+ex+".ready", "--exit=7")
		i.WaitForFile(10*time.Second, ex+".ready")
		i.WaitForFile(10*time.Second, px+".ready")

		var want []string
		for _, sig := range signals.Caught() {
			switch signals.RouteOf(sig) {
			case signals.Reap, signals.Terminate, signals.Status:
				continue
			}
			i.Signal(sig)
			want = append(want, signals.Name(sig))
			testenv.WaitFor(t, 5*time.Second, signals.Name(sig)+" recorded by the executor", func() bool {
				return recorded(ex+".rec") == strings.Join(want, ",")
			})
		}
		// USR1 is nodeinit's own: a status line, nothing passed on.
		i.Signal(unix.SIGUSR1)
		i.WaitForLog(5*time.Second, 'I', `"Task status"`, `task="proxy"`)
		if got := recorded(ex + ".rec"); got != strings.Join(want, ",") {
			t.Errorf("the executor got more than was sent: %s", got)
		}
		if got := recorded(px + ".rec"); got != "HUP" {
			t.Errorf("proxy got %q, want HUP alone", got)
		}
		for _, trace := range []string{"goroutine ", "PC=", "signal arrived during"} {
			if strings.Contains(i.Log(), trace) {
				t.Fatalf("nodeinit printed a Go trace (%q):\n%s", trace, i.Log())
			}
		}
		i.Signal(unix.SIGTERM)
		if code := i.Wait(10 * time.Second); code != 7 {
			t.Errorf("exit %d after TERM, want the executor's 7; log:\n%s", code, i.Log())
		}
	})
}

// recorded is the task helper's record file as a list of signal names.
func recorded(path string) string {
	b, _ := os.ReadFile(path)
	var names []string
	for l := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		if name, _, ok := strings.Cut(l, " "); ok {
			names = append(names, name)
		}
	}
	return strings.Join(names, ",")
}

// A signal ignored when nodeinit starts (nohup, a shell's trap ”, a
// runtime that ignores HUP) stays ignored for nodeinit and its children:
// under nohup a HUP neither reaches nor ends the executor. Without the
// ignore, the same HUP ends it.
func TestSignalsIgnoredAtStartStayIgnored(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		for _, tc := range []struct{ ignored, private bool }{{true, false}, {false, false}, {true, true}} {
			ignored := tc.ignored
			t.Run(fmt.Sprintf("ignored=%v/private-mountns=%v", ignored, tc.private), func(t *testing.T) {
				dir := t.TempDir()
				status := filepath.Join(dir, "status")
				var prefix []string
				if ignored {
					prefix = []string{"/bin/sh", "-c", `trap "" HUP INT TSTP; exec "$@"`, "sh"}
				}
				// A C program as executor: it keeps the actions it inherits
				// (a Go one would catch what it is given).
				args := []string{"--run-proxy=false"}
				if tc.private {
					// Across the re-exec into the namespace, carried.
					testenv.RequireRoot(t)
					args = append(args, "--private-mountns")
				}
				i := testenv.Launch(t, testenv.Options{PID1: m == asPID1, Prefix: prefix}, append(args, "--",
					// grep inherits the shell's actions: its own status shows them.
					"/bin/sh", "-c", `grep -E '^Sig(Ign|Cgt)' /proc/self/status > `+status+`.tmp && mv `+status+`.tmp `+status+`; exec sleep 60`)...)
				i.WaitForFile(10*time.Second, status)
				if tc.private {
					i.WaitForLog(5*time.Second, 'I', "Running in a private mount namespace")
				}
				b, err := os.ReadFile(status)
				must(t, err)
				ign := sigMask(t, string(b), "SigIgn")
				for _, sig := range []syscall.Signal{unix.SIGHUP, unix.SIGINT, unix.SIGTSTP} {
					if got := ign&(1<<(sig-1)) != 0; got != ignored {
						t.Errorf("the executor's %s ignored: %v, want %v (SigIgn %016x)", signals.Name(sig), got, ignored, ign)
					}
				}
				i.Signal(unix.SIGHUP)
				if !ignored {
					if code := i.Wait(10 * time.Second); code != 128+int(unix.SIGHUP) {
						t.Errorf("exit %d after HUP, want 129 (the executor ended by it)", code)
					}
					return
				}
				i.Status(5*time.Second, 'I', `"Task status"`) // it comes after the HUP was handled
				if !i.Running() {
					t.Fatalf("nodeinit ended after a HUP it was started ignoring; log:\n%s", i.Log())
				}
				i.WaitForLog(5*time.Second, 'I', "ignored when nodeinit started", "HUP,INT,TSTP")
				if code := i.Stop(10 * time.Second); code != 128+int(unix.SIGTERM) {
					t.Errorf("exit %d after TERM, want 143", code)
				}
			})
		}
	})
}

// NODEINIT_SIGNALS is nodeinit's own, from one image of its re-exec to
// the next. Set in the environment nodeinit starts with (with a forged
// re-exec marker too), it changes nothing: the signals it names as ignored
// are caught and passed on as ever, the TERM it names as pending stops
// nothing, and no child sees it. Across nodeinit's own re-exec into a
// private mount namespace the signals ignored at start stay ignored
// (TestSignalsIgnoredAtStartStayIgnored).
func TestTheCarriedSignalsFromOutsideChangeNothing(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		for _, forged := range []bool{false, true} {
			t.Run(fmt.Sprintf("forged-marker=%v", forged), func(t *testing.T) {
				dir := t.TempDir()
				status, env := filepath.Join(dir, "status"), filepath.Join(dir, "environ")
				o := testenv.Options{PID1: m == asPID1, Env: []string{"NODEINIT_SIGNALS=ignored=HUP,INT,TSTP;pending=TERM"}}
				if forged {
					o.Env = append(o.Env, "NODEINIT_MOUNTNS_FROM=mnt:[1]")
				}
				i := testenv.Launch(t, o, "--run-proxy=false", "--",
					"/bin/sh", "-c", `tr '\0' '\n' < /proc/self/environ > `+env+` && grep -E '^Sig(Ign|Cgt)' /proc/self/status > `+status+`.tmp && mv `+status+`.tmp `+status+`; exec sleep 60`)
				i.WaitForFile(10*time.Second, status)
				b, err := os.ReadFile(status)
				must(t, err)
				ign := sigMask(t, string(b), "SigIgn")
				for _, sig := range []syscall.Signal{unix.SIGHUP, unix.SIGINT, unix.SIGTSTP} {
					if ign&(1<<(sig-1)) != 0 {
						t.Errorf("the executor's %s is ignored (SigIgn %016x): the variable from outside changed nodeinit's dispositions", signals.Name(sig), ign)
					}
				}
				e, err := os.ReadFile(env)
				must(t, err)
				if strings.Contains(string(e), "NODEINIT_SIGNALS") {
					t.Errorf("the executor's environment has NODEINIT_SIGNALS:\n%s", e)
				}
				if l := i.Lines('I', "ignored when nodeinit started"); len(l) > 0 {
					t.Errorf("nodeinit took signals as ignored at start: %s", l[0])
				}
				// The HUP is caught and passed on: it ends the executor.
				i.Signal(unix.SIGHUP)
				if code := i.Wait(10 * time.Second); code != 128+int(unix.SIGHUP) {
					t.Errorf("exit %d after HUP, want 129 (the executor ended by it); log:\n%s", code, i.Log())
				}
				if l := i.Lines('I', "Forwarded signal to the executor", `signal="TERM"`); len(l) > 0 {
					t.Errorf("the carried TERM from outside was passed on: %s", l[0])
				}
			})
		}
	})
}

func sigMask(t *testing.T, status, key string) uint64 {
	t.Helper()
	for l := range strings.SplitSeq(status, "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			var mask uint64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%x", &mask); err != nil {
				t.Fatal(err)
			}
			return mask
		}
	}
	t.Fatalf("no %s in %q", key, status)
	return 0
}

// TERMs that come while nodeinit is still starting — here while it reads
// its config file, which the test holds back — are kept and passed to the
// executor once it runs, in a re-exec into a private mount namespace too.
func TestTermWhileStartingIsKeptForTheExecutor(t *testing.T) {
	_, task := binaries(t)
	for _, private := range []bool{false, true} {
		t.Run(fmt.Sprintf("private-mountns=%v", private), func(t *testing.T) { testTermWhileStarting(t, task, private) })
	}
}

func testTermWhileStarting(t *testing.T, task string, private bool) {
	forEachMode(t, func(t *testing.T, m mode) {
		if private {
			testenv.RequireRoot(t)
		}
		dir := t.TempDir()
		fifo := filepath.Join(dir, "nodeinit.yaml")
		must(t, unix.Mkfifo(fifo, 0o600))
		args := []string{"--config=" + fifo, "--run-proxy=false"}
		if private {
			args = append(args, "--private-mountns")
		}
		rec := filepath.Join(dir, "executor.rec")
		i := start(t, m, append(args, "--", task, "--record="+rec, "--exit=3")...)
		config := "kind: NodeInitConfig\napiVersion: nodeinit/v1alpha1\n"
		// The open for writing returns once nodeinit has opened the
		// file to read it: it is in main, TERM is caught, the rest of
		// its start is held.
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		must(t, err)
		// More TERMs than the channel they wait on holds, each taken by
		// the runtime before the next: across a re-exec they are carried
		// as one.
		for range 20 {
			i.Signal(unix.SIGTERM)
			time.Sleep(time.Millisecond)
		}
		_, err = w.WriteString(config)
		must(t, err)
		must(t, w.Close())
		if private {
			// The re-executed nodeinit reads the file again. Wait until it
			// waits in open for a writer: an open for writing before that
			// could meet the first image's reader, which exec is about to
			// close, and the copy written would be lost with it.
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
				env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", i.Pid()))
				if strings.Contains(string(env), "NODEINIT_MOUNTNS_FROM=") && inFifoOpen(i.Pid()) {
					break
				}
				if time.Now().After(deadline) {
					w, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/wchan", i.Pid()))
					var ws []string
					for _, f := range w {
						b, _ := os.ReadFile(f)
						ws = append(ws, string(b))
					}
					t.Fatalf("the re-executed nodeinit did not open the file: re-executed %v, threads waiting in %q; log:\n%s%s",
						strings.Contains(string(env), "NODEINIT_MOUNTNS_FROM="), ws, i.Log(), i.Stderr())
				}
			}
			w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
			must(t, err)
			_, err = w.WriteString(config)
			must(t, err)
			must(t, w.Close())
		}
		code := i.Wait(10 * time.Second)
		if i.Signaled() {
			t.Fatalf("the TERM ended nodeinit itself; log:\n%s", i.Log())
		}
		// The executor got the TERM: it exits 3 when it has caught it,
		// 143 when it came before its own handler was set up.
		if code != 3 && code != 143 {
			t.Errorf("exit %d, want the executor's 3 (or 143); log:\n%s%s", code, i.Log(), i.Stderr())
		}
		i.WaitForLog(time.Second, 'I', "Forwarded signal to the executor", `signal="TERM"`)
	})
}

// inFifoOpen reports whether a thread of pid waits in open(2) on a FIFO
// with no writer.
func inFifoOpen(pid int) bool {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/wchan", pid))
	for _, w := range tasks {
		if b, _ := os.ReadFile(w); string(b) == "wait_for_partner" {
			return true
		}
	}
	return false
}

// The table in the README is the one in the code: every signal is named
// under what nodeinit does with it.
func TestTheReadmeSignalTableMatchesTheCode(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "README.md"))
	must(t, err)
	text := string(readme)
	row := func(what string) string {
		for l := range strings.SplitSeq(text, "\n") {
			if strings.HasPrefix(l, "| "+what+" ") {
				return l
			}
		}
		t.Fatalf("README has no signal table row %q", what)
		return ""
	}
	kept := row("kept")
	for _, sig := range signals.Kept {
		if name := signals.Name(sig); !slices.Contains(strings.FieldsFunc(kept, func(r rune) bool { return strings.ContainsRune(" |,`", r) }), name) {
			t.Errorf("README's kept row does not name %s: %s", name, kept)
		}
	}
	words := func(r string) []string {
		return strings.FieldsFunc(r, func(c rune) bool { return strings.ContainsRune(" |,`:;()", c) })
	}
	forwarded := row("executor")
	for _, sig := range signals.Caught() {
		if signals.RouteOf(sig) != signals.Executor {
			continue
		}
		name := signals.Name(sig)
		if sig >= 35 { // named as the range "35 to 64"
			name = "35"
		}
		if !slices.Contains(words(forwarded), name) {
			t.Errorf("README's executor row does not name %s: %s", signals.Name(sig), forwarded)
		}
	}
	for what, sigs := range map[string][]syscall.Signal{
		"reaped": {unix.SIGCHLD}, "status": {unix.SIGUSR1}, "graceful": {unix.SIGTERM, unix.SIGINT, unix.SIGPWR, 37}, "both": {unix.SIGHUP},
	} {
		r := row(what)
		for _, sig := range sigs {
			if !strings.Contains(r, signals.Name(sig)) {
				t.Errorf("README's %s row does not name %s: %s", what, signals.Name(sig), r)
			}
		}
	}
}

// The executor runs in a process group of its own, and a signal reaches the
// whole group: what the executor started (a shell's child here) gets it
// too, as with dumb-init and tini -g. The proxy is in another group.
func TestASignalReachesTheExecutorsWholeProcessGroup(t *testing.T) {
	_, task := binaries(t)
	forEachMode(t, func(t *testing.T, m mode) {
		dir := t.TempDir()
		child, px := filepath.Join(dir, "child"), filepath.Join(dir, "proxy")
		// The shell waits for its child, which records what it gets.
		i := start(t, m, "--proxy-path="+task, "--proxy-arg=--report="+px+".json",
			"--", "/bin/sh", "-c", task+` --record=`+child+`.rec --report=`+child+`.json --exit=4 & wait $!; exit $?`)
		i.WaitForFile(10*time.Second, child+".json")
		i.WaitForFile(10*time.Second, px+".json")
		c, p := testenv.ReadReport(t, child+".json"), testenv.ReadReport(t, px+".json")
		if c.Pgid == p.Pgid {
			t.Errorf("the executor's child and the proxy share process group %d", c.Pgid)
		}
		// WINCH: the shell ignores it, so the executor lives on.
		i.Signal(syscall.SIGWINCH)
		testenv.WaitFor(t, 5*time.Second, "WINCH at the executor's child", func() bool { return recorded(child+".rec") == "WINCH" })
		// The shell dies of the TERM too (its default); its child exits 4.
		if code := i.Stop(10 * time.Second); code != 128+int(syscall.SIGTERM) && code != 4 {
			t.Errorf("exit %d after TERM, want the shell's 143 (or its child's 4)", code)
		}
		if got := recorded(child + ".rec"); got != "WINCH,TERM" {
			t.Errorf("the executor's child got %s, want WINCH,TERM", got)
		}
	})
}
