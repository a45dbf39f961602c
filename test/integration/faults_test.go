package integration

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"github.com/nodeinit/nodeinit/test/testenv"
)

// A burst of 10,000 mixed signals, then TERM: nodeinit survives the burst
// and still shuts down gracefully with the executor's status.
func TestSignalStormThenGracefulShutdown(t *testing.T) {
	_, task := binaries(t)
	forEachMode(t, func(t *testing.T, m mode) {
		dir := t.TempDir()
		ex, px := filepath.Join(dir, "executor"), filepath.Join(dir, "proxy")
		i := start(t, m, "--proxy-path="+task, "--proxy-arg=--ready="+px+".ready",
			"--", task, "--record="+ex+".rec", "--ready="+ex+".ready", "--exit=6")
		testenv.WaitFor(t, 10*time.Second, "tasks ready", func() bool { return exists(ex+".ready") && exists(px+".ready") })
		storm := []syscall.Signal{syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGCHLD}
		for n := 0; n < 10000; n++ {
			must(t, syscall.Kill(i.Pid(), storm[n%len(storm)]))
		}
		// A signal sent after the storm and passed on shows that nodeinit
		// came through it and still forwards. It shares its queue with the
		// storm's HUP, USR1, USR2 and WINCH, and os/signal drops a signal
		// whose queue is full: it is sent again until it gets through.
		lastSent := time.Time{}
		testenv.WaitFor(t, 15*time.Second, "VTALRM passed on after the storm", func() bool {
			if !i.Running() {
				t.Fatalf("nodeinit died in the storm; log:\n%s", testenv.Tail(i.Log(), 10))
			}
			if time.Since(lastSent) > 100*time.Millisecond {
				i.Signal(syscall.SIGVTALRM)
				lastSent = time.Now()
			}
			return strings.Contains(recorded(ex+".rec"), "VTALRM")
		})
		i.Signal(syscall.SIGTERM)
		if got := i.Wait(15 * time.Second); got != 6 {
			t.Fatalf("exit %d after the storm and TERM, want the executor's 6", got)
		}
		recs := testenv.ReadRecord(t, ex+".rec")
		if len(recs) == 0 || recs[len(recs)-1].Signal != "TERM" {
			t.Errorf("executor's last signal is not TERM: %s", recs[max(0, len(recs)-5):].Signals())
		}
		if strings.Contains(i.Log(), "Restarted task") {
			t.Errorf("the storm made the proxy restart")
		}
	})
}

// Many runs in which the executor, the proxy and hundreds of orphans all
// end in the same instant: the exit code is never wrong or lost. A hundred
// runs here (about 6 s), a thousand in TestLongExitStatusSurvivesSimultaneousDeaths.
func TestExitStatusSurvivesSimultaneousDeaths(t *testing.T) {
	exitStatusSurvivesSimultaneousDeaths(t, 100)
}

func exitStatusSurvivesSimultaneousDeaths(t *testing.T, runs int) {
	testenv.RequireRoot(t)
	_, task := binaries(t)
	for n := 0; n < runs; n++ {
		code := n % 256
		i := start(t, asPID1, "--proxy-path="+task, "--proxy-arg=--lifetime=15ms", "--proxy-arg=--exit=1",
			"--", task, "--orphans=100", "--lifetime=15ms", "--exit="+strconv.Itoa(code))
		if got := i.Wait(20 * time.Second); got != code {
			t.Fatalf("run %d: exit %d, want %d; log:\n%s", n, got, code, i.Log())
		}
	}
}

// A proxy that exits at once keeps being restarted, no faster than the
// backoff allows, and the executor is untouched.
func TestProxyCrashLoopFollowsBackoff(t *testing.T) {
	_, task := binaries(t)
	dir := t.TempDir()
	starts, ex := filepath.Join(dir, "starts"), filepath.Join(dir, "executor")
	i := start(t, asSubreaper, "--proxy-path="+task, "--proxy-arg=--starts="+starts, "--proxy-arg=--lifetime=1ns", "--proxy-arg=--exit=3",
		"--proxy-restart-backoff=20ms", "--proxy-restart-backoff-max=160ms",
		"--", task, "--record="+ex+".rec", "--report="+ex+".json")
	// 20+40+80 ms, then every 160 ms: 12 starts take about 1.6 s.
	testenv.WaitFor(t, 20*time.Second, "twelve proxy starts", func() bool { return countLines(t, starts) >= 12 })
	if got := i.Stop(10 * time.Second); got != 0 {
		t.Fatalf("exit %d", got)
	}
	at := testenv.ReadStarts(t, starts)
	// Never sooner than the backoff: a start too many would show as a gap
	// too short.
	want := []time.Duration{20, 40, 80}
	for k := 1; k < len(at); k++ {
		w := 160 * time.Millisecond
		if k <= len(want) {
			w = want[k-1] * time.Millisecond
		}
		if gap := at[k].Sub(at[k-1]); gap < w {
			t.Errorf("restart %d came %v after the previous start, sooner than the backoff's %v", k, gap, w)
		}
	}
	if recs := testenv.ReadRecord(t, ex+".rec"); recs.Signals() != "TERM" {
		t.Errorf("the crash loop reached the executor: it got %q", recs.Signals())
	}
	if c := strings.Count(i.Log(), `task="executor"`); c != 1 {
		t.Errorf("executor started %d times", c)
	}
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return 0
	}
	must(t, err)
	defer f.Close()
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); {
		n++
	}
	return n
}

// With pids.max reached, the proxy's respawn fails with EAGAIN: nodeinit
// keeps running, retries on its backoff, and recovers once pids free up.
func TestPidExhaustionIsRetriedWithBackoff(t *testing.T) {
	testenv.RequireRoot(t)
	pidsRoot := pidsHierarchy(t)
	cg := filepath.Join(pidsRoot, fmt.Sprintf("nodeinit-test-%d", os.Getpid()))
	must(t, os.Mkdir(cg, 0o755))
	t.Cleanup(func() {
		// Whatever is left, on a failure too, is killed; the cgroup can be
		// removed once the last of it has left.
		testenv.WaitFor(t, 10*time.Second, "the test's pids cgroup to be removed", func() bool {
			err := os.Remove(cg)
			if err == nil || errors.Is(err, fs.ErrNotExist) {
				return true
			}
			procs, _ := os.ReadFile(filepath.Join(cg, "cgroup.procs"))
			for _, f := range strings.Fields(string(procs)) {
				if pid, err := strconv.Atoi(f); err == nil {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			return false
		})
	})
	nodeinit, task := binaries(t)
	dir := t.TempDir()
	starts := filepath.Join(dir, "starts")
	out, err := os.Create(filepath.Join(dir, "log"))
	must(t, err)
	defer out.Close()
	// Join the cgroup before exec, so nodeinit and its children count.
	executor := filepath.Join(dir, "executor.json")
	cmd := exec.Command("/bin/sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, cg,
		nodeinit, "--proxy-path="+task, "--proxy-arg=--starts="+starts, "--proxy-arg=--lifetime=50ms",
		"--proxy-restart-backoff=50ms", "--proxy-restart-backoff-max=100ms", "--", task, "--report="+executor)
	cmd.Stdout, cmd.Stderr = out, out
	must(t, cmd.Start())
	defer cmd.Process.Kill()
	testenv.WaitFor(t, 10*time.Second, "first proxy start", func() bool { return exists(starts) && exists(executor) })

	// The executor leaves the limit: it is a Go program too, and one that
	// needs another thread while no task may be made dies of it. What is
	// under test is nodeinit and the proxy.
	exePid := testenv.ReadReport(t, executor).Pid
	t.Cleanup(func() { syscall.Kill(exePid, syscall.SIGKILL) }) // if nodeinit did not end it
	must(t, os.WriteFile(filepath.Join(pidsRoot, "cgroup.procs"), []byte(strconv.Itoa(exePid)), 0o644))
	// No new task may be made in the cgroup now: every respawn fails.
	must(t, os.WriteFile(filepath.Join(cg, "pids.max"), []byte("1"), 0o644))
	logPath := out.Name()
	testenv.WaitFor(t, 10*time.Second, "respawns refused", func() bool {
		b, _ := os.ReadFile(logPath)
		return strings.Count(string(b), "resource temporarily unavailable") >= 3
	})
	before := countLines(t, starts)
	must(t, os.WriteFile(filepath.Join(cg, "pids.max"), []byte("max"), 0o644))
	testenv.WaitFor(t, 10*time.Second, "proxy started again", func() bool { return countLines(t, starts) > before })

	must(t, cmd.Process.Signal(syscall.SIGTERM))
	if err := cmd.Wait(); err != nil {
		b, _ := os.ReadFile(logPath)
		t.Fatalf("nodeinit: %v; log:\n%s", err, testenv.Tail(string(b), 15))
	}
}

// pidsHierarchy returns the directory of a cgroup in which a pids limit can
// be set: the v1 pids hierarchy, or the v2 root when it delegates pids.
func pidsHierarchy(t *testing.T) string {
	t.Helper()
	mounts, err := mountinfo.GetMounts(nil)
	must(t, err)
	var v2 string
	for _, m := range mounts {
		switch {
		case m.FSType == "cgroup" && slices.Contains(strings.Split(m.VFSOptions, ","), "pids"):
			return m.Mountpoint
		case m.FSType == "cgroup2" && v2 == "":
			v2 = m.Mountpoint
		}
	}
	if v2 != "" {
		sub, _ := os.ReadFile(filepath.Join(v2, "cgroup.subtree_control"))
		if strings.Contains(string(sub), "pids") {
			return v2
		}
	}
	testenv.Require(t, false, "needs a cgroup hierarchy with the pids controller")
	return ""
}
