package e2e

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// klogLine is klog's header with the process id 1: "I1130 07:45:01.123456       1 file.go:42] ".
var klogLine = regexp.MustCompile(`(?m)^[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d{6}\s+1 [^ \]]+:\d+\] `)

func TestNodeinitIsPID1AndLogsToPodmanLogs(t *testing.T) {
	e := start(t)
	c := e.runDetached(t, nil, taskNode(nil)...)
	c.waitFile(t, "executor.ready")
	c.waitFile(t, "proxy.ready")

	pid := c.hostPID(t)
	if got := nsPID(t, pid); got != 1 {
		t.Errorf("the container's main process has pid %d in the container, want 1", got)
	}
	if comm := strings.TrimSpace(readProc(t, pid, "comm")); comm != "nodeinit" {
		t.Errorf("the container's main process is %q, want nodeinit", comm)
	}
	top := e.must(t, "top", c.name, "pid", "ppid", "comm")
	if !regexp.MustCompile(`(?m)^\s*1\s+0\s+nodeinit\s*$`).MatchString(top) {
		t.Errorf("podman top does not show nodeinit as pid 1:\n%s", top)
	}
	for _, task := range []string{"executor", "proxy"} {
		r := testenv.ReadReport(t, c.path(task+".json"))
		if r.Ppid != 1 {
			t.Errorf("%s's parent is pid %d, want nodeinit (1)", task, r.Ppid)
		}
		if r.Pgid != r.Pid {
			t.Errorf("%s (pid %d) is in process group %d, want its own", task, r.Pid, r.Pgid)
		}
	}
	logs := c.logs(t)
	if !klogLine.MatchString(logs) {
		t.Errorf("podman logs shows no klog line from pid 1:\n%s", logs)
	}
}

func TestStopEndsExecutorFirstProxyLastAndReportsExecutorStatus(t *testing.T) {
	e := start(t)
	// The executor ends with 7 on TERM, so the container's status shows it is the executor's.
	c := e.runDetached(t, nil, taskNode(nil, "--exit=7")...)
	c.waitFile(t, "executor.ready")
	c.waitFile(t, "proxy.ready")

	const stopTimeout = 30 * time.Second
	began := time.Now()
	e.must(t, "stop", "--time", strconv.Itoa(int(stopTimeout/time.Second)), c.name)
	took := time.Since(began)
	// Well inside the timeout: nodeinit stopped everything, podman never had to SIGKILL.
	if took > stopTimeout/3 {
		t.Errorf("podman stop took %v, want well inside its %v timeout", took, stopTimeout)
	}
	t.Logf("podman stop took %v", took)

	if got := strings.TrimSpace(e.must(t, "wait", c.name)); got != "7" {
		t.Errorf("podman wait: %s, want the executor's 7", got)
	}
	if got := e.inspect(t, c.name, "{{.State.ExitCode}}"); got != "7" {
		t.Errorf("podman inspect exit code %s, want the executor's 7", got)
	}
	execTerm := signalTimes(t, c.path("executor.rec"), "TERM")
	proxyTerm := signalTimes(t, c.path("proxy.rec"), "TERM")
	if len(execTerm) == 0 || len(proxyTerm) == 0 {
		t.Fatalf("TERM reached executor %d times and proxy %d times, want both", len(execTerm), len(proxyTerm))
	}
	if execTerm[0] >= proxyTerm[0] {
		t.Errorf("the proxy saw TERM %v before the executor did; want executor first, proxy last",
			time.Duration(execTerm[0]-proxyTerm[0]))
	}
}

func TestHUPReachesExecutorAndContainerKeepsRunning(t *testing.T) {
	e := start(t)
	c := e.runDetached(t, nil, taskNode(nil)...)
	c.waitFile(t, "executor.ready")
	c.waitFile(t, "proxy.ready")

	e.must(t, "kill", "--signal", "HUP", c.name)
	waitFor(t, c.rec, 20*time.Second, "HUP in the executor's and the proxy's records", -1, func() bool {
		return recorded(c.path("executor.rec"), "HUP") && recorded(c.path("proxy.rec"), "HUP")
	})
	if got := e.inspect(t, c.name, "{{.State.Status}}"); got != "running" {
		t.Errorf("after HUP the container is %s, want running", got)
	}
	if recorded(c.path("executor.rec"), "TERM") {
		t.Error("HUP was turned into a TERM for the executor")
	}
}

func TestExecutorExitCodeIsContainerExitCode(t *testing.T) {
	e := start(t)
	c := e.runDetached(t, nil, taskNode(nil, "--lifetime=300ms", "--exit=3")...)
	if got := strings.TrimSpace(e.must(t, "wait", c.name)); got != "3" {
		t.Errorf("podman wait: %s, want 3", got)
	}
	if got := e.inspect(t, c.name, "{{.State.ExitCode}}"); got != "3" {
		t.Errorf("podman inspect exit code %s, want 3", got)
	}
	// The proxy is stopped by nodeinit, not left to the runtime.
	if len(signalTimes(t, c.path("proxy.rec"), "TERM")) == 0 {
		t.Error("the proxy got no TERM when the executor ended")
	}
}

func TestExecutorKilledBySignalGives128PlusSignal(t *testing.T) {
	e := start(t)
	for _, tc := range []struct {
		signal string
		want   int
	}{{"KILL", 128 + 9}, {"TERM", 128 + 15}} {
		t.Run(tc.signal, func(t *testing.T) {
			// Attached, as a Mesos task or a systemd unit runs it: podman run's
			// own status is the container's.
			got := e.exitCode(t, append([]string{"run", "--rm", "--network=none", e.image},
				"--run-proxy=false", "--", taskPath, "--lifetime=200ms", "--die-by="+tc.signal)...)
			if got != tc.want {
				t.Errorf("executor died by SIG%s: container exit status %d, want %d", tc.signal, got, tc.want)
			}
		})
	}
}

func TestOrphansInContainerAreReaped(t *testing.T) {
	e := start(t)
	const orphans = 200
	c := e.runDetached(t, nil, taskNode(nil, "--orphans="+strconv.Itoa(orphans))...)
	c.waitFile(t, "executor.ready")
	pid := c.hostPID(t)

	// A reaped zombie makes no event we could wait on from outside, so look
	// again with growing pauses for a few seconds; an init that does not reap
	// leaves all of them there for good.
	var zombies []int
	for pause := 10 * time.Millisecond; ; pause *= 2 {
		zombies = zombies[:0]
		for p, state := range pidNamespaceMembers(t, pid) {
			if state == "Z" {
				zombies = append(zombies, p)
			}
		}
		if len(zombies) == 0 || pause > 3*time.Second {
			break
		}
		time.Sleep(pause)
	}
	if len(zombies) > 0 {
		t.Errorf("%d zombies left in the container (host pids %v)\npodman top:\n%s",
			len(zombies), zombies, e.must(t, "top", c.name, "pid", "ppid", "state", "comm"))
	}
	top := e.must(t, "top", c.name, "pid", "state", "comm")
	for line := range strings.Lines(top) {
		if f := strings.Fields(line); len(f) == 3 && f[1] == "Z" {
			t.Errorf("podman top shows a zombie:\n%s", top)
			break
		}
	}
}

func readProc(t *testing.T, pid int, name string) string {
	t.Helper()
	return readFile(t, "/proc/"+strconv.Itoa(pid)+"/"+name)
}
