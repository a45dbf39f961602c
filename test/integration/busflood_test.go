package integration

import (
	"bufio"
	"fmt"
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

// The kubelet connects to the bus once and never retries: a connect
// refused because the bus's listen backlog is full turns graceful node
// shutdown off for its life. A process of the node outside the executor's
// tree that connects and closes in a loop, from more threads than the
// machine has cores, must not fill it: every call of the executor's,
// each on a new connection, is answered, and nodeinit's log, at -v=2,
// stays a few lines.
func TestAConnectFloodFromOutsideCostsTheExecutorNoCall(t *testing.T) {
	connectFlood(t, 3*time.Second, 10, false)
}

// connectFlood runs nodeinit as PID 1 at -v=2 with an executor that makes
// calls busctl-like calls on the bus, spread over length, while a process
// in nodeinit's pid namespace, not below the executor, floods the bus's
// socket from four threads for length: with connects that wait for room
// in a full backlog, or (nonblock) fail at once and try again.
func connectFlood(t *testing.T, length time.Duration, calls int, nonblock bool) {
	testenv.RequireRoot(t)
	nsenter := testenv.RequireTool(t, "nsenter")
	helper := testenv.Build(t, "./test/helpers/busflood")
	report := filepath.Join(t.TempDir(), "calls")
	i := testenv.Launch(t, testenv.Options{PID1: true}, "-v=2", "--run-proxy=false", "--graceful-node-shutdown",
		"--", helper, "call", "--wait", "--calls="+strconv.Itoa(calls), "--timeout=5s", "--every="+(length/time.Duration(calls+2)).String(), "--report="+report)
	i.WaitForFile(10*time.Second, report+".tmp")
	kids, err := testenv.Children(i.Pid())
	must(t, err)
	if len(kids) != 1 {
		t.Fatalf("nodeinit's children: %v, want the executor alone", kids)
	}
	executor := kids[0]
	socket := busSocket(t, executor)

	// The flooder enters nodeinit's pid namespace: a process of the node,
	// as kube-proxy or a shell would be, whose parent is outside the
	// executor's tree.
	flooder := exec.Command(nsenter, "--target", strconv.Itoa(i.Pid()), "--pid", "--",
		helper, "flood", "--socket="+socket, "--threads=4", "--for="+length.String(), "--nonblock="+strconv.FormatBool(nonblock))
	out, err := flooder.StdoutPipe()
	must(t, err)
	flooder.Stderr = os.Stderr
	must(t, flooder.Start())
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "flooding" {
		t.Fatalf("the flooder said %q, not that it floods", lines.Text())
	}
	// A moment for the backlog to fill, then the calls.
	time.Sleep(300 * time.Millisecond)
	must(t, syscall.Kill(executor, syscall.SIGUSR2))
	started := time.Now()
	i.WaitForFile(time.Duration(calls)*6*time.Second, report)
	took := time.Since(started)
	var flood string
	if lines.Scan() {
		flood = lines.Text()
	}
	must(t, flooder.Wait())
	status := i.Status(10*time.Second, 'I', "refusedConnections=")
	if code := i.Stop(10 * time.Second); code != 0 {
		t.Errorf("exit %d after TERM, want the executor's 0", code)
	}

	got, err := os.ReadFile(report)
	must(t, err)
	ok := strings.Count(string(got), "ok\n")
	log := i.Log()
	nlines := strings.Count(log, "\n")
	t.Logf("%d of %d calls answered in %v under a %v flood (%s); nodeinit logged %d lines; its status: %s",
		ok, calls, took.Round(time.Millisecond), length, flood, nlines, status[strings.Index(status, "]")+1:])
	if ok != calls {
		t.Errorf("%d of %d calls answered under the flood:\n%s", ok, calls, got)
	}
	if n := len(i.Lines('I', "Refused a D-Bus connection")); n > 3 {
		t.Errorf("%d log lines about refusals, want the first and a summary", n)
	}
	if testing.Verbose() {
		t.Log(log)
	}
	if nlines > 60 {
		t.Errorf("nodeinit logged %d lines at -v=2 under the flood", nlines)
	}
	if !strings.Contains(flood, "connects=") {
		t.Errorf("the flooder reported %q", flood)
	}
}

// busSocket is the path of the bus's socket, from the executor's
// DBUS_SYSTEM_BUS_ADDRESS.
func busSocket(t *testing.T, executor int) string {
	t.Helper()
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", executor))
	must(t, err)
	for kv := range strings.SplitSeq(string(environ), "\x00") {
		if a, ok := strings.CutPrefix(kv, "DBUS_SYSTEM_BUS_ADDRESS=unix:path="); ok {
			return a
		}
	}
	t.Fatalf("the executor has no bus address of the form unix:path=")
	return ""
}
