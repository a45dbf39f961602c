package integration

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// rtEvent is one line of the stand-in runtime's --record file.
type rtEvent struct {
	name string
	at   time.Time
	pid  int // in the runtime's pid namespace
}

// readRuntimeRecord reads the stand-in runtime's record; none before it
// exists.
func readRuntimeRecord(t *testing.T, path string) []rtEvent {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	must(t, err)
	var out []rtEvent
	for sc := bufio.NewScanner(bytes.NewReader(data)); sc.Scan(); {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			continue // a line being written
		}
		ns, err1 := strconv.ParseInt(f[1], 10, 64)
		pid, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil {
			t.Fatalf("bad runtime record line %q", sc.Text())
		}
		out = append(out, rtEvent{f[0], time.Unix(0, ns), pid})
	}
	return out
}

func events(evs []rtEvent, name string) []rtEvent {
	var out []rtEvent
	for _, e := range evs {
		if e.name == name {
			out = append(out, e)
		}
	}
	return out
}

// runtimeRun is nodeinit with the stand-in runtime as its runtime and the
// task helper as its proxy and executor, each recording what it gets.
type runtimeRun struct {
	*testenv.Node
	socket, rtRec, exStarts, exRec, exReady, pxRec, pxStarts string
}

// startWithRuntime starts nodeinit in mode m; rtArgs go to the runtime,
// flags to nodeinit (before the executor).
func startWithRuntime(t *testing.T, m mode, rtArgs []string, flags ...string) *runtimeRun {
	t.Helper()
	_, task := binaries(t)
	rt := testenv.Build(t, "./test/helpers/runtime")
	dir := t.TempDir()
	// A unix socket's path is short: t.TempDir's, with the test's name,
	// may be too long.
	sockDir, err := os.MkdirTemp("", "rt")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	r := &runtimeRun{socket: filepath.Join(sockDir, "cri.sock"), rtRec: filepath.Join(dir, "runtime.rec"),
		exStarts: filepath.Join(dir, "executor.starts"), exRec: filepath.Join(dir, "executor.rec"),
		exReady: filepath.Join(dir, "executor.ready"), pxRec: filepath.Join(dir, "proxy.rec"), pxStarts: filepath.Join(dir, "proxy.starts")}
	args := []string{"--proxy-path=" + task, "--proxy-arg=--record=" + r.pxRec, "--proxy-arg=--starts=" + r.pxStarts,
		"--runtime-path=" + rt, "--runtime-socket=" + r.socket,
		"--runtime-arg=--socket=" + r.socket, "--runtime-arg=--record=" + r.rtRec}
	for _, a := range rtArgs {
		args = append(args, "--runtime-arg="+a)
	}
	args = append(args, flags...)
	args = append(args, "--", task, "--starts="+r.exStarts, "--record="+r.exRec, "--ready="+r.exReady)
	r.Node = start(t, m, args...)
	return r
}

// firstStart waits for the task helper's first start line in path: the
// proxy and the executor start together, and either may write first.
func firstStart(t *testing.T, path string) time.Time {
	t.Helper()
	var at []time.Time
	testenv.WaitFor(t, 10*time.Second, "a start in "+filepath.Base(path), func() bool {
		if _, err := os.Stat(path); err == nil {
			at = testenv.ReadStarts(t, path)
		}
		return len(at) > 0
	})
	return at[0]
}

func (r *runtimeRun) record(t *testing.T) []rtEvent { return readRuntimeRecord(t, r.rtRec) }

// waitRuntime waits until the runtime's record has n events named name.
func (r *runtimeRun) waitRuntime(t *testing.T, n int, name string) []rtEvent {
	t.Helper()
	var got []rtEvent
	testenv.WaitFor(t, 30*time.Second, "the runtime to record "+name, func() bool {
		got = events(r.record(t), name)
		if len(got) < n && !r.Running() {
			t.Fatalf("nodeinit ended before the runtime recorded %s; log:\n%s", name, r.Log())
		}
		return len(got) >= n
	})
	return got
}

// runtimePid is the runtime's pid as the test sees it: nodeinit's child
// running the stand-in runtime.
func (r *runtimeRun) runtimePid(t *testing.T) int {
	t.Helper()
	kids, err := testenv.Children(r.Pid())
	must(t, err)
	for _, k := range kids {
		if exe, _ := testenv.Program(k); filepath.Base(exe) == "runtime" {
			return k
		}
	}
	t.Fatalf("no runtime among nodeinit's children %v", kids)
	return 0
}

// The executor and the proxy start only once the runtime answers the CRI's
// Version call: a socket that is there but answers "not initialized" is
// not enough.
func TestTheExecutorStartsOnlyOnceTheRuntimeAnswers(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		r := startWithRuntime(t, m, []string{"--listen-after=300ms", "--ready-after=1s"})
		r.WaitForFile(30*time.Second, r.exReady)
		evs := r.record(t)
		listen, answered := events(evs, "listen"), events(evs, "answered")
		if len(listen) != 1 || len(answered) != 1 {
			t.Fatalf("runtime record %v, want one listen and one answered", evs)
		}
		exStart, pxStart := firstStart(t, r.exStarts), firstStart(t, r.pxStarts)
		if !exStart.After(answered[0].at) || !pxStart.After(answered[0].at) {
			t.Errorf("the executor started at %v and the proxy at %v, before the runtime answered at %v",
				exStart, pxStart, answered[0].at)
		}
		if !answered[0].at.After(listen[0].at) {
			t.Errorf("the runtime answered at %v, before it listened at %v", answered[0].at, listen[0].at)
		}
		line := r.WaitForLog(5*time.Second, 'I', "The container runtime answers on its socket", r.socket)
		t.Logf("%s; the socket answered \"not initialized\" for %v; the executor started %v after the runtime answered", line,
			answered[0].at.Sub(listen[0].at).Round(time.Millisecond), exStart.Sub(answered[0].at).Round(time.Millisecond))
		if code := r.Stop(30 * time.Second); code != 0 {
			t.Errorf("exit %d, want the executor's 0; log:\n%s", code, r.Log())
		}
	})
}

// A runtime that never answers ends nodeinit with 1 and one error line,
// within the wait's bound: the executor never starts, the runtime is
// stopped.
func TestARuntimeThatNeverAnswersEndsNodeinitWithOne(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		r := startWithRuntime(t, m, []string{"--listen-after=1h"}, "--runtime-wait-timeout=1s")
		code := r.Wait(30 * time.Second)
		took := time.Since(r.Started)
		if code != 1 {
			t.Errorf("exit %d, want 1; log:\n%s", code, r.Log())
		}
		if errs := r.Lines('E'); len(errs) != 1 || !strings.Contains(errs[0], "did not answer on its socket") || !strings.Contains(errs[0], r.socket) {
			t.Errorf("error lines %q, want one naming the socket", errs)
		} else {
			t.Logf("%s (exit after %v)", errs[0], took.Round(time.Millisecond))
		}
		if _, err := os.Stat(r.exStarts); err == nil {
			t.Error("the executor was started")
		}
		if terms := events(r.record(t), "TERM"); len(terms) != 1 {
			t.Errorf("the runtime recorded %d TERMs, want 1", len(terms))
		}
		if took > 15*time.Second {
			t.Errorf("nodeinit took %v to give up after a 1s wait", took)
		}
	})
}

// A TERM while nodeinit waits for the runtime stops the runtime; the
// executor never starts, and nodeinit exits 143 as though it had been
// ended by the TERM.
func TestATermWhileWaitingForTheRuntimeStopsIt(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		r := startWithRuntime(t, m, []string{"--listen-after=1h"})
		r.WaitForLog(30*time.Second, 'I', "Waiting for the container runtime to answer")
		r.waitRuntime(t, 1, "start")
		if code := r.Stop(30 * time.Second); code != 128+int(syscall.SIGTERM) {
			t.Errorf("exit %d, want 143; log:\n%s", code, r.Log())
		}
		if _, err := os.Stat(r.exStarts); err == nil {
			t.Error("the executor was started")
		}
		if terms := events(r.record(t), "TERM"); len(terms) != 1 {
			t.Errorf("the runtime recorded %d TERMs, want 1", len(terms))
		}
	})
}

// A runtime that dies while the node runs is restarted after the backoff;
// the executor and the proxy are not touched.
func TestTheRuntimeIsRespawnedAndTheExecutorUntouched(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		r := startWithRuntime(t, m, nil, "--proxy-restart-backoff=300ms")
		r.WaitForFile(30*time.Second, r.exReady)
		firstStart(t, r.pxStarts)
		r.waitRuntime(t, 1, "answered")
		pid := r.runtimePid(t)
		killed := time.Now()
		must(t, syscall.Kill(pid, syscall.SIGKILL))
		starts := r.waitRuntime(t, 2, "start")
		if gap := starts[1].at.Sub(killed); gap < 250*time.Millisecond {
			t.Errorf("the runtime was restarted %v after it was killed, before its backoff of 300ms", gap)
		}
		r.WaitForLog(10*time.Second, 'I', "Container runtime ended; restarting after backoff", "killed by signal SIGKILL")
		r.WaitForLog(10*time.Second, 'I', "Restarted task", "task=\"runtime\"")
		r.waitRuntime(t, 2, "listen")
		if n := len(testenv.ReadStarts(t, r.exStarts)); n != 1 {
			t.Errorf("the executor started %d times, want once", n)
		}
		if n := len(testenv.ReadStarts(t, r.pxStarts)); n != 1 {
			t.Errorf("the proxy started %d times, want once", n)
		}
		if s := recorded(r.exRec); s != "" {
			t.Errorf("the executor got %q", s)
		}
		line := r.Status(10*time.Second, 'I', "Task status", `task="runtime"`, "restarts=1")
		t.Logf("respawned %v after the KILL; %s", starts[1].at.Sub(killed).Round(time.Millisecond), line)
		r.Status(10*time.Second, 'I', "Container runtime status", r.socket, "socketExists=true")
		if code := r.Stop(30 * time.Second); code != 0 {
			t.Errorf("exit %d, want 0; log:\n%s", code, r.Log())
		}
	})
}

// A TERM stops the executor, then the proxy once the executor has ended,
// then the runtime once the proxy has ended, then the shims the runtime
// left (reparented to nodeinit), all within the grace period.
func TestTheStopOrderIsExecutorProxyRuntimeThenItsShims(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		r := startWithRuntime(t, m, []string{"--shims=2"}, "--shutdown-grace-period=20s")
		r.WaitForFile(30*time.Second, r.exReady)
		firstStart(t, r.pxStarts) // its TERM handler is in place
		r.waitRuntime(t, 2, "shim-start")
		stopped := time.Now()
		if code := r.Stop(30 * time.Second); code != 0 {
			t.Errorf("exit %d, want 0; log:\n%s", code, r.Log())
		}
		took := time.Since(stopped)
		ex, px := testenv.ReadRecord(t, r.exRec), testenv.ReadRecord(t, r.pxRec)
		evs := r.record(t)
		rtTerm, shimTerms := events(evs, "TERM"), events(evs, "shim-TERM")
		if ex.Signals() != "TERM" || px.Signals() != "TERM" || len(rtTerm) != 1 || len(shimTerms) != 2 {
			t.Fatalf("executor got %q, proxy %q, runtime %d TERMs, shims %d; want one TERM each", ex.Signals(), px.Signals(), len(rtTerm), len(shimTerms))
		}
		// The two shims get theirs at once, in either order.
		first := shimTerms[0].at
		if shimTerms[1].at.Before(first) {
			first = shimTerms[1].at
		}
		order := []time.Time{ex[0].At, px[0].At, rtTerm[0].at, first}
		if !slices.IsSortedFunc(order, func(a, b time.Time) int { return a.Compare(b) }) {
			t.Errorf("TERM reached executor %v, proxy %v, runtime %v, shims %v %v: want that order",
				ex[0].At, px[0].At, rtTerm[0].at, shimTerms[0].at, shimTerms[1].at)
		}
		if took > 10*time.Second {
			t.Errorf("the stop took %v", took)
		}
		t.Logf("stopped in %v: proxy %v after the executor, runtime %v after the proxy, shims %v after the runtime", took.Round(time.Millisecond),
			px[0].At.Sub(ex[0].At).Round(time.Microsecond), rtTerm[0].at.Sub(px[0].At).Round(time.Microsecond),
			first.Sub(rtTerm[0].at).Round(time.Microsecond))
		if left := testenv.ProcessesWithArg(r.rtRec); len(left) > 0 {
			t.Errorf("left running: %v", left)
		}
	})
}

// Shims that ignore TERM are killed at the end of the grace period: the
// stop is bounded by it.
func TestShimsThatIgnoreTermAreKilledAtTheGracePeriod(t *testing.T) {
	forEachMode(t, func(t *testing.T, m mode) {
		r := startWithRuntime(t, m, []string{"--shims=1", "--shim-ignore-term"}, "--shutdown-grace-period=1s")
		r.WaitForFile(30*time.Second, r.exReady)
		firstStart(t, r.pxStarts)
		r.waitRuntime(t, 1, "shim-start")
		stopped := time.Now()
		if code := r.Stop(30 * time.Second); code != 0 {
			t.Errorf("exit %d, want 0; log:\n%s", code, r.Log())
		}
		took := time.Since(stopped)
		if n := len(events(r.record(t), "shim-TERM")); n != 1 {
			t.Errorf("the shim recorded %d TERMs, want 1", n)
		}
		if took < time.Second || took > 8*time.Second {
			t.Errorf("the stop took %v, want the grace period of 1s and little more", took)
		}
		r.WaitForLog(time.Second, 'I', "Grace period over; killing what is left")
		if left := testenv.ProcessesWithArg(r.rtRec); len(left) > 0 {
			t.Errorf("left running: %v", left)
		}
		t.Logf("stopped in %v", took.Round(time.Millisecond))
	})
}

// --write-flags shows the runtime's line after the executor's and the
// proxy's, and the executor's --container-runtime-endpoint with the line
// that says why; without --runtime-path nothing of it.
func TestWriteFlagsShowsTheRuntime(t *testing.T) {
	nodeinit := testenv.BuildRaced(t, "./cmd/nodeinit")
	run := func(args ...string) (stdout, stderr string) {
		t.Helper()
		cmd := exec.Command(nodeinit, append([]string{"--write-flags", "--proxy-path=/opt/kube-proxy"}, args...)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, errb.String())
		}
		return out.String(), errb.String()
	}
	out, errs := run("--", "/opt/kubelet", "--v=2")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || strings.Contains(out, "runtime") {
		t.Errorf("without a runtime --write-flags printed:\n%s", out)
	}
	if strings.Contains(errs, "runtime") {
		t.Errorf("without a runtime --write-flags said:\n%s", errs)
	}

	out, errs = run("--runtime-path=/opt/containerd", "--runtime-arg=--config", "--runtime-arg=/etc/c d.toml",
		"--runtime-socket=/run/node/c.sock", "--", "/opt/kubelet", "--v=2")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []string{"/opt/kubelet --v=2 --container-runtime-endpoint=unix:///run/node/c.sock",
		"/opt/kube-proxy --v=0 --proxy-mode=iptables", "/opt/containerd --config '/etc/c d.toml'"}
	if len(lines) != 3 || !strings.HasPrefix(lines[0], want[0]) || !strings.HasPrefix(lines[1], want[1]) || lines[2] != want[2] {
		t.Errorf("--write-flags printed:\n%s\nwant lines starting:\n%s", out, strings.Join(want, "\n"))
	}
	if !strings.Contains(errs, "nodeinit: Passing the executor the runtime's socket") {
		t.Errorf("--write-flags did not say why it passes the endpoint:\n%s", errs)
	}

	out, errs = run("--runtime-path=/opt/containerd", "--pass-runtime-endpoint=false", "--", "/opt/kubelet")
	if strings.Contains(out, "container-runtime-endpoint") || !strings.Contains(errs, "runtime.passEndpoint off") {
		t.Errorf("with --pass-runtime-endpoint=false --write-flags printed:\n%s\n%s", out, errs)
	}
}

// Bad runtime settings fail as every bad setting does: 2 and one line for a
// flag, 255 for the config file, 127 for a runtime that is not there.
func TestBadRuntimeSettingsFailWithTheirCodes(t *testing.T) {
	nodeinit := testenv.BuildRaced(t, "./cmd/nodeinit")
	dir := t.TempDir()
	conf := filepath.Join(dir, "nodeinit.yaml")
	must(t, os.WriteFile(conf, []byte("kind: NodeInitConfig\napiVersion: nodeinit/v1alpha1\nruntime: {path: containerd, waitTimeout: 0s}\n"), 0o644))
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"relative socket", []string{"--runtime-path=containerd", "--runtime-socket=c.sock", "--", "true"}, 2,
			`nodeinit: invalid argument "c.sock" for "--runtime-socket" flag: must be the absolute path of a unix socket`},
		{"bad duration", []string{"--runtime-wait-timeout=10", "--", "true"}, 2, `invalid argument "10" for "--runtime-wait-timeout" flag`},
		{"bad file", []string{"--config=" + conf, "--", "true"}, 255,
			"Invalid NodeInitConfig " + conf + "\n  runtime.waitTimeout: Invalid value: \"0s\": must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(nodeinit, tc.args...)
			var errb bytes.Buffer
			cmd.Stderr = &errb
			err := cmd.Run()
			code := -1
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			if code != tc.code || !strings.Contains(errb.String(), tc.stderr) {
				t.Errorf("exit %d with %q, want %d with %q", code, errb.String(), tc.code, tc.stderr)
			}
		})
	}
	t.Run("runtime not found", func(t *testing.T) {
		i := start(t, asSubreaper, "--run-proxy=false", "--runtime-path=/nonexistent/containerd", "--", "true")
		if code := i.Wait(10 * time.Second); code != 127 {
			t.Errorf("exit %d, want 127; log:\n%s", code, i.Log())
		}
		if l := i.Lines('E', "Cannot start", "runtime", "/nonexistent/containerd"); len(l) != 1 {
			t.Errorf("want one line naming the runtime; log:\n%s", i.Log())
		}
	})
}
