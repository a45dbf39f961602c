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

	"golang.org/x/sys/unix"

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
// with thousands of other processes does not make it do more. What is
// compared is the read calls nodeinit made from start to exit (the kernel's
// count in /proc/PID/io, read while it is a zombie): finding descendants
// without the kernel's lists of children means reading a file of every
// process, 5,000 more reads with 5,000 other processes, against some 100 for
// the whole run without; and the count is the same however loaded the
// machine is. Processor time, which other work on a 2-core machine changes
// by twice as much as a run costs, is bounded only loosely: a scan of the
// host costs over 100 ms of it, a run 6 to 15 ms.
func TestShutdownDoesNotScanTheHost(t *testing.T) {
	_, task := binaries(t)
	nodeinit, _ := binaries(t)
	type cost struct {
		cpu          time.Duration
		reads, bytes int64
	}
	once := func() cost {
		out, err := os.Create(filepath.Join(t.TempDir(), "nodeinit.log"))
		must(t, err)
		defer out.Close()
		cmd := exec.Command(nodeinit, "--run-proxy=false", "--", "/bin/true")
		cmd.Stdout, cmd.Stderr = out, out
		must(t, cmd.Start())
		pid := cmd.Process.Pid
		// Wait for the exit, leaving the zombie: its /proc/PID/io holds
		// the counts of all its threads until it is reaped.
		var info unix.Siginfo
		for {
			err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
			if err != unix.EINTR {
				must(t, err)
				break
			}
		}
		io, ioErr := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
		err = cmd.Wait()
		log, _ := os.ReadFile(out.Name())
		if err != nil {
			t.Fatalf("nodeinit: %v; log:\n%s", err, log)
		}
		must(t, ioErr)
		c := cost{cpu: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()}
		for l := range strings.SplitSeq(string(io), "\n") {
			k, v, _ := strings.Cut(l, ": ")
			switch k {
			case "syscr":
				c.reads, err = strconv.ParseInt(v, 10, 64)
			case "rchar":
				c.bytes, err = strconv.ParseInt(v, 10, 64)
			}
			must(t, err)
		}
		return c
	}
	measure := func() cost {
		var cpu []time.Duration
		var reads, bytes []int64
		for range 9 {
			c := once()
			cpu, reads, bytes = append(cpu, c.cpu), append(reads, c.reads), append(bytes, c.bytes)
		}
		slices.Sort(cpu)
		slices.Sort(reads)
		slices.Sort(bytes)
		return cost{cpu[len(cpu)/2], reads[len(reads)/2], bytes[len(bytes)/2]}
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
	t.Logf("start to exit as a subreaper, median of 9: %d read calls (%d bytes) and %v of processor time alone, %d (%d bytes) and %v with %d other processes",
		quiet.reads, quiet.bytes, quiet.cpu, busy.reads, busy.bytes, busy.cpu, others)
	if busy.reads > quiet.reads+others/5 {
		t.Errorf("with %d other processes on the host nodeinit made %d read calls, against %d without: it reads the host's processes", others, busy.reads, quiet.reads)
	}
	if busy.cpu > quiet.cpu*3+50*time.Millisecond {
		t.Errorf("with %d other processes on the host nodeinit used %v of processor time, against %v without", others, busy.cpu, quiet.cpu)
	}
}
