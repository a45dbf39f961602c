package integration

import (
	"errors"
	"fmt"
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

// A leftover that ignores TERM and forks all the time escapes any one
// sweep of kills; nodeinit kills again until none is left, and exits at
// most the grace period plus its 2 s reap bound after the executor ended.
// As a subreaper this used to wait without limit. Each run takes 1.5 s by
// its nature: one in each mode here, five in each in
// TestLongAForkingLeftoverCannotHoldTheShutdown.
func TestAForkingLeftoverCannotHoldTheShutdown(t *testing.T) {
	aForkingLeftoverCannotHoldTheShutdown(t, 1)
}

func aForkingLeftoverCannotHoldTheShutdown(t *testing.T, runs int) {
	forEachMode(t, func(t *testing.T, m mode) {
		for run := range runs {
			token := fmt.Sprintf("1000.%d%06d", run, time.Now().Nanosecond()/1000)
			script := `setsid sh -c 'trap "" TERM; while :; do sleep ` + token + ` & sleep 0.002; done' & sleep 0.5; exit 0`
			i := start(t, m, "--run-proxy=false", "--shutdown-grace-period=1s", "--", "/bin/sh", "-c", script)
			code := i.Wait(10 * time.Second)
			took := time.Since(i.Started)
			if code != 0 {
				t.Errorf("run %d: exit %d, want the executor's 0; log:\n%s", run, code, i.Log())
			}
			// The executor ran 0.5 s; then 1 s of grace and at most 2 s more.
			if took > 3500*time.Millisecond+time.Second {
				t.Errorf("run %d: nodeinit took %v, more than the executor's 0.5 s + 1 s grace + 2 s bound (+1 s slack)", run, took)
			}
			if left := testenv.ProcessesWithArg("sleep\x00" + token); len(left) > 0 {
				t.Errorf("run %d: %d sleeps of the leftover outlived nodeinit: %v", run, len(left), left)
				for _, p := range left {
					_ = syscall.Kill(p, syscall.SIGKILL)
				}
			}
		}
	})
}

// A leftover that no signal ends (frozen by the cgroup v1 freezer, it sits
// in uninterruptible sleep) is named in one error line, and nodeinit exits
// anyway at the grace period plus the reap bound.
func TestALeftoverThatCannotBeReapedIsNamedAndLeftBehind(t *testing.T) {
	testenv.RequireRoot(t)
	freezer := "/sys/fs/cgroup/freezer"
	_, err := os.Stat(filepath.Join(freezer, "freezer.state"))
	if os.IsNotExist(err) {
		_, err = os.Stat(filepath.Join(freezer, "cgroup.procs"))
	}
	testenv.Require(t, err == nil, "needs the cgroup v1 freezer at "+freezer)
	_, task := binaries(t)
	token := (time.Hour + time.Duration(time.Now().Nanosecond()%1000000)*time.Millisecond).String()
	ready := filepath.Join(t.TempDir(), "ready")
	i := start(t, asSubreaper, "--run-proxy=false", "--shutdown-grace-period=500ms",
		"--", task, "--grandchild="+token, "--ready="+ready)
	i.WaitForFile(10*time.Second, ready)
	left := testenv.ProcessesWithArg("grandchild\x00" + token)
	if len(left) != 1 {
		t.Fatalf("grandchild not found: %v", left)
	}
	cg := filepath.Join(freezer, "nodeinit-test-"+strconv.Itoa(os.Getpid())+"-"+strconv.Itoa(left[0]))
	must(t, os.Mkdir(cg, 0o755))
	t.Cleanup(func() {
		_ = os.WriteFile(filepath.Join(cg, "freezer.state"), []byte("THAWED"), 0o644)
		_ = syscall.Kill(left[0], syscall.SIGKILL)
		// A killed process leaves its cgroup only at the very end of its
		// exit, after its command line is gone: the cgroup is busy until
		// then, and removing it is the one sign that it is empty.
		var err error
		testenv.WaitFor(t, 10*time.Second, "the killed leftover to leave the freezer cgroup", func() bool {
			err = os.Remove(cg)
			return !errors.Is(err, syscall.EBUSY)
		})
		if err != nil {
			t.Errorf("remove the freezer cgroup: %v", err)
		}
	})
	must(t, os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(left[0])), 0o644))
	must(t, os.WriteFile(filepath.Join(cg, "freezer.state"), []byte("FROZEN"), 0o644))
	testenv.WaitFor(t, 5*time.Second, "the leftover frozen", func() bool {
		b, _ := os.ReadFile(filepath.Join(cg, "freezer.state"))
		return strings.TrimSpace(string(b)) == "FROZEN"
	})

	stopped := time.Now()
	i.Signal(syscall.SIGTERM)
	if code := i.Wait(10 * time.Second); code != 0 {
		t.Errorf("exit %d, want the executor's 0", code)
	}
	// The executor ends at once; then 500 ms of grace and the 2 s bound.
	if took := time.Since(stopped); took < 2500*time.Millisecond || took > 4*time.Second {
		t.Errorf("nodeinit exited %v after TERM, want just after 2.5 s", took)
	}
	lines := i.Lines('E', "could not be reaped", strconv.Itoa(left[0]))
	if len(lines) != 1 {
		t.Errorf("no one error line naming the leftover %d; log:\n%s", left[0], i.Log())
	}
}

// As a subreaper nodeinit walks only its own subtree at shutdown: a host
// with thousands of other processes does not make it cost more. What is
// compared is nodeinit's processor time, not its wall time: reading every
// process of the host with 5,000 others costs it over 100 ms of processor
// time (against 6 to 10 ms for the whole run without), while other work on
// a shared machine slows its wall time by as much and more and leaves its
// processor time nearly alone.
func TestShutdownDoesNotScanTheHost(t *testing.T) {
	_, task := binaries(t)
	nodeinit, _ := binaries(t)
	type cost struct{ cpu, wall time.Duration }
	measure := func() cost {
		var cpu, wall []time.Duration
		for range 9 {
			i := testenv.Launch(t, testenv.Options{Binary: nodeinit}, "--run-proxy=false", "--", "/bin/true")
			if code := i.Wait(10 * time.Second); code != 0 {
				t.Fatalf("exit %d; log:\n%s", code, i.Log())
			}
			wall = append(wall, time.Since(i.Started))
			cpu = append(cpu, i.CPUTime())
		}
		slices.Sort(cpu)
		slices.Sort(wall)
		return cost{cpu[len(cpu)/2], wall[len(wall)/2]}
	}
	quiet := measure()

	const others = 5000
	hold := exec.Command(task, "hold", strconv.Itoa(others))
	hold.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := hold.StdoutPipe()
	must(t, err)
	must(t, hold.Start())
	t.Cleanup(func() {
		_ = syscall.Kill(-hold.Process.Pid, syscall.SIGKILL)
		_ = hold.Wait()
	})
	buf := make([]byte, 64)
	n, _ := out.Read(buf) // "holding N" once every holder is forked
	if !strings.HasPrefix(string(buf[:n]), "holding") {
		t.Fatalf("the holders did not start: %q", buf[:n])
	}
	busy := measure()
	t.Logf("start to exit as a subreaper, median of 9: processor time %v alone, %v with %d other processes (wall time %v, %v)",
		quiet.cpu, busy.cpu, others, quiet.wall, busy.wall)
	if busy.cpu > quiet.cpu*3/2+5*time.Millisecond {
		t.Errorf("with %d other processes on the host nodeinit used %v of processor time, against %v without", others, busy.cpu, quiet.cpu)
	}
}
