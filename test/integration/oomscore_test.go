package integration

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/internal/procstatus"
	"github.com/nodeinit/nodeinit/test/testenv"
)

// capSysResource is CAP_SYS_RESOURCE's bit in a capability set.
const capSysResource = 24

// mayLowerOOMScores says whether this test process has CAP_SYS_RESOURCE in
// its effective set: then so has the nodeinit it starts as root, outside a
// user namespace.
func mayLowerOOMScores(t *testing.T) bool {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return caps&(1<<capSysResource) != 0
		}
	}
	t.Fatal("no CapEff in /proc/self/status")
	return false
}

// oomScoreAdj reads a process's OOM score adjustment and its OOM score.
func oomScoreAdj(t *testing.T, pid int) (adj, score int) {
	t.Helper()
	for _, f := range []struct {
		name string
		v    *int
	}{{"oom_score_adj", &adj}, {"oom_score", &score}} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f.name))
		if err != nil {
			t.Fatal(err)
		}
		if *f.v, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
			t.Fatal(err)
		}
	}
	return adj, score
}

// atOOMScore runs nodeinit at a start value of adj, as a container runtime
// (or the kubelet, for a pod's containers) sets the one nodeinit starts
// with. Through /proc/self, not choom: in a new pid namespace choom would
// write to its pid there, 1, which in the host's /proc is the host's init.
func atOOMScore(adj int) []string {
	return []string{"/bin/sh", "-c", `echo "$0" >/proc/self/oom_score_adj && exec "$@"`, strconv.Itoa(adj)}
}

// nodeinit makes itself the OOM killer's last choice where it may
// (CAP_SYS_RESOURCE), and says so; its children, the proxy respawned
// included, start at the value nodeinit started with, not at nodeinit's.
func TestChildrenStartAtTheOOMScoreNodeinitStartedWith(t *testing.T) {
	_, task := binaries(t)
	testenv.RequireRoot(t)
	const start = 500
	dir := t.TempDir()
	starts := filepath.Join(dir, "starts")
	n := testenv.Launch(t, testenv.Options{PID1: true, Prefix: atOOMScore(start), Dir: dir},
		"--proxy-path="+task, "--proxy-arg=--report="+filepath.Join(dir, "proxy.json"), "--proxy-arg=--starts="+starts,
		"--proxy-arg=--lifetime=200ms", "--proxy-arg=--exit=1", "--proxy-restart-backoff=100ms",
		"--", task, "--report="+filepath.Join(dir, "executor.json"))
	testenv.WaitFor(t, 20*time.Second, "two starts of the proxy", func() bool { return countLines(t, starts) >= 2 })
	pid := n.Pid()
	adj, score := oomScoreAdj(t, pid)
	executor, proxy := n.Report("executor.json"), n.Report("proxy.json")
	if code := n.Stop(10 * time.Second); code != 0 {
		t.Fatalf("nodeinit exited %d", code)
	}
	if executor.OOMScoreAdj != start || proxy.OOMScoreAdj != start {
		t.Errorf("the executor started at %d, the proxy (start %d) at %d; want both at nodeinit's start value %d",
			executor.OOMScoreAdj, countLines(t, starts), proxy.OOMScoreAdj, start)
	}
	lowered, refused := n.Lines('I', "Lowered nodeinit's OOM score adjustment"), n.Lines('W', "OOM score adjustment stays at")
	if mayLowerOOMScores(t) {
		if adj != -1000 || score != 0 || len(lowered) != 1 || len(refused) != 0 {
			t.Errorf("with CAP_SYS_RESOURCE nodeinit is at %d (OOM score %d), logged %q and %q; want -1000, score 0, one line saying so",
				adj, score, lowered, refused)
		}
	} else if adj != start || len(refused) != 1 || len(lowered) != 0 {
		t.Errorf("without CAP_SYS_RESOURCE nodeinit is at %d, logged %q and %q; want its start value %d and one warning",
			adj, lowered, refused, start)
	}
	t.Logf("nodeinit at %d (OOM score %d), executor and proxy at %d, %d", adj, score, executor.OOMScoreAdj, proxy.OOMScoreAdj)
}

// In a user namespace nodeinit lacks CAP_SYS_RESOURCE over the host, where
// its OOM score counts: one warning says it stays where it is and what that
// means, and it and its children keep the value it started with.
func TestWithoutCapSysResourceOneLineSaysNodeinitMayBeOOMKilled(t *testing.T) {
	_, task := binaries(t)
	testenv.RequireRoot(t)
	const start = 200
	dir := t.TempDir()
	n := testenv.Launch(t, testenv.Options{MountNS: true, Unshare: []string{"--user", "--map-root-user"}, Prefix: atOOMScore(start), Dir: dir},
		"--run-proxy=false", "--", task, "--report="+filepath.Join(dir, "executor.json"))
	executor := n.Report("executor.json")
	adj, _ := oomScoreAdj(t, n.Pid())
	if code := n.Stop(10 * time.Second); code != 0 {
		t.Fatalf("nodeinit exited %d", code)
	}
	want := fmt.Sprintf("nodeinit's OOM score adjustment stays at %d: lowering it needs CAP_SYS_RESOURCE, which nodeinit lacks; "+
		"the OOM killer may choose nodeinit, and that ends the node container", start)
	if w := n.Lines('W', "OOM score"); len(w) != 1 || !strings.Contains(w[0], want) {
		t.Errorf("want one warning %q; got %q", want, w)
	}
	if adj != start || executor.OOMScoreAdj != start {
		t.Errorf("nodeinit is at %d, the executor started at %d; want both at %d", adj, executor.OOMScoreAdj, start)
	}
}

// thpEnabled reads a process's THP_enabled from its /proc status ("" when
// the kernel shows none: before Linux 5.0).
func thpEnabled(t *testing.T, pid int) string {
	t.Helper()
	st, err := procstatus.Read(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	return st["THP_enabled"]
}

// nodeinit turns transparent huge pages off for its own memory, and its
// children, the proxy respawned included, start with the kernel's setting,
// which they would have without nodeinit.
func TestNodeinitKeepsHugePagesOffForItselfNotForItsChildren(t *testing.T) {
	_, task := binaries(t)
	testenv.RequireRoot(t)
	testenv.Require(t, thpEnabled(t, os.Getpid()) == "1",
		"THP_enabled 1 in the test's /proc/PID/status (Linux 5.0 and later show it; 0 would leave nothing to tell apart)")
	dir := t.TempDir()
	starts := filepath.Join(dir, "starts")
	n := testenv.Launch(t, testenv.Options{PID1: true, Dir: dir},
		"--proxy-path="+task, "--proxy-arg=--report="+filepath.Join(dir, "proxy.json"), "--proxy-arg=--starts="+starts,
		"--proxy-arg=--lifetime=200ms", "--proxy-arg=--exit=1", "--proxy-restart-backoff=100ms",
		"--", task, "--report="+filepath.Join(dir, "executor.json"))
	testenv.WaitFor(t, 20*time.Second, "two starts of the proxy", func() bool { return countLines(t, starts) >= 2 })
	self := thpEnabled(t, n.Pid())
	executor, proxy := n.Report("executor.json"), n.Report("proxy.json")
	if code := n.Stop(10 * time.Second); code != 0 {
		t.Fatalf("nodeinit exited %d", code)
	}
	if self != "0" {
		t.Errorf("nodeinit's THP_enabled = %q; want 0: huge pages off for its own memory", self)
	}
	if executor.THPEnabled != "1" || proxy.THPEnabled != "1" {
		t.Errorf("the executor's THP_enabled = %q, the proxy's (start %d) = %q; want 1 for both, the kernel's setting",
			executor.THPEnabled, countLines(t, starts), proxy.THPEnabled)
	}
}
