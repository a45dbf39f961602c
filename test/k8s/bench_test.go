//go:build k8s

package k8s

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/test/bench/host"
	"github.com/nodeinit/nodeinit/test/testenv"
)

// The real-node workload of issue 15: the time from the start of PID 1 to
// the Node Ready, and from TERM to the exit of PID 1, with nodeinit as PID 1
// and with a plain shell script that starts the same kubelet and
// kube-proxy, with the command lines nodeinit's --write-flags prints. Both
// run as startNode runs nodeinit (new pid and mount namespaces, through the
// same unshare), alternately; the target is that nodeinit adds at most 5 %
// to each.
//
// It is a benchmark, not a check: it runs only when asked to, with
// NODEINIT_K8S_BENCH_ROUNDS=N (N rounds of each; make bench sets it when
// the Kubernetes binaries are built). NODEINIT_BENCH_NODEINIT names the
// nodeinit binary to measure (make bench's bin/nodeinit; else a build of
// the tree), NODEINIT_K8S_BENCH_OUT a file for the table (else the test's
// log).
const realNodeLimit = 1.05

// nodeScript starts kube-proxy and then the kubelet, as nodeinit does, with
// their output in the logs directory (its first argument); on TERM or INT
// it passes the signal to the kubelet, waits for it, then stops kube-proxy
// and exits with the kubelet's status. %[1]s is the kubelet's command line,
// %[2]s kube-proxy's, both as --write-flags prints them (shell words).
const nodeScript = `logs=$1
mkdir -p "$logs"
%[2]s >>"$logs/proxy.log" 2>&1 &
proxy=$!
%[1]s >>"$logs/executor.log" 2>&1 &
kubelet=$!
trap 'kill -TERM $kubelet' TERM INT
wait $kubelet
status=$?
# A trapped signal ends the wait early: wait again, for the kubelet's end.
while kill -0 $kubelet 2>/dev/null; do wait $kubelet; status=$?; done
kill -TERM $proxy
wait $proxy
exit $status
`

// realNodeRun is one node's times.
type realNodeRun struct {
	ready, stop time.Duration
}

func TestRealNodeBench(t *testing.T) {
	env := os.Getenv("NODEINIT_K8S_BENCH_ROUNDS")
	// make e2e-k8s leaves this test out by name; run on its own, it needs
	// its number of rounds.
	testenv.Require(t, env != "", "NODEINIT_K8S_BENCH_ROUNDS=N, the real-node benchmark's rounds (make bench, make bench-k8s)")
	rounds, err := strconv.Atoi(env)
	if err != nil || rounds < 1 {
		t.Fatalf("NODEINIT_K8S_BENCH_ROUNDS=%q: want a number of rounds", env)
	}
	c := getCluster(t)
	bin := os.Getenv("NODEINIT_BENCH_NODEINIT")
	if bin == "" {
		bin = testenv.Build(t, "./cmd/nodeinit")
	}
	load := host.LoadAverage()
	began := time.Now()
	runs := map[string][]realNodeRun{}
	starters := []string{"nodeinit", "shell script"}
	for round := range rounds {
		// Each round starts with the other one.
		for i := range starters {
			who := starters[(i+round)%len(starters)]
			// The name goes into the node's directory, which the
			// KubeletConfiguration names in YAML: no comma, no space.
			t.Run(fmt.Sprintf("round%d-%s", round+1, strings.ReplaceAll(who, " ", "-")), func(t *testing.T) {
				runs[who] = append(runs[who], c.benchNode(t, bin, who == "shell script"))
			})
		}
	}
	// A node whose teardown found the host changed has failed the test,
	// but its times were taken before: the table shows every node timed.
	var b strings.Builder
	if len(runs["nodeinit"]) > 0 && len(runs["shell script"]) > 0 {
		writeRealNode(&b, runs, rounds, began, load+" at the start, "+host.LoadAverage()+" at the end", c.bin)
	}
	// Then the node containers of issue 24, nodeinit's against systemd's,
	// a minute of idle each: their own number of rounds.
	containerRounds := rounds
	if env := os.Getenv("NODEINIT_K8S_BENCH_CONTAINER_ROUNDS"); env != "" {
		if containerRounds, err = strconv.Atoi(env); err != nil || containerRounds < 0 {
			t.Fatalf("NODEINIT_K8S_BENCH_CONTAINER_ROUNDS=%q: want a number of rounds", env)
		}
	}
	if containerRounds > 0 {
		load := host.LoadAverage()
		c.benchContainers(t, &b, containerRounds)
		fmt.Fprintf(&b, "\nLoad average %s at the start of the node containers, %s at the end.\n", load, host.LoadAverage())
	}
	if out := os.Getenv("NODEINIT_K8S_BENCH_OUT"); out != "" {
		must(t, os.WriteFile(out, []byte(b.String()), 0o644))
	} else {
		t.Log("\n" + b.String())
	}
}

// benchNode starts one node, nodeinit's or the script's, waits for it to
// be Ready and for its static pod to run (so that every TERM finds the same
// node), stops it with TERM and returns its times.
func (c *cluster) benchNode(t *testing.T, nodeinit string, script bool) realNodeRun {
	dir := t.TempDir()
	c.writeNodeFiles(t, dir, dir, nodeSpec{})
	args := c.nodeArgs(dir, nodeSpec{})
	binary := nodeinit
	if script {
		// The same command lines nodeinit runs, from nodeinit itself.
		out, err := stdoutOf(10*time.Second, append([]string{nodeinit, "--write-flags"}, args...)...)
		must(t, err)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 {
			t.Fatalf("--write-flags printed %d lines, want the kubelet's and kube-proxy's:\n%s", len(lines), out)
		}
		binary = "/bin/sh"
		args = []string{"-c", fmt.Sprintf(nodeScript, lines[0], lines[1]), "sh", filepath.Join(dir, "logs")}
	}
	k := c.launchNode(t, dir, binary, nil, args...)
	_, ready := k.waitReady(90 * time.Second)
	k.waitPods("metadata.name=static-sleeper-"+nodeName, 1, 60*time.Second)
	start := time.Now()
	code := k.stop(60 * time.Second)
	stop := time.Since(start)
	if code != 0 {
		t.Errorf("exit code %d after TERM, want the kubelet's 0", code)
	}
	t.Logf("Node Ready %v after the start, exit %v after TERM", ready.Round(time.Millisecond), stop.Round(time.Millisecond))
	return realNodeRun{ready: ready, stop: stop}
}

// sortedTimes is of(r) for each of runs, in ascending order, for quantile.
func sortedTimes[R any](runs []R, of func(R) time.Duration) []time.Duration {
	d := make([]time.Duration, 0, len(runs))
	for _, r := range runs {
		d = append(d, of(r))
	}
	slices.Sort(d)
	return d
}

// writeRealNode prints the machine, the table and the verdicts.
func writeRealNode(w io.Writer, runs map[string][]realNodeRun, rounds int, began time.Time, load, bin string) {
	version, _ := os.ReadFile(filepath.Join(bin, "VERSION"))
	fmt.Fprintf(w, "Real node: %s, %d CPUs; kubelet and kube-proxy %s; %d rounds of each, alternated; took %s; load average %s.\n\n",
		began.UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), strings.TrimSpace(string(version)), rounds,
		time.Since(began).Round(time.Second), load)
	fmt.Fprintln(w, "| PID 1 | start → Node Ready | spread (p25–p75) | TERM → exit | spread (p25–p75) | n |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
	stats := func(who string, of func(realNodeRun) time.Duration) []time.Duration {
		return sortedTimes(runs[who], of)
	}
	ready := func(r realNodeRun) time.Duration { return r.ready }
	stop := func(r realNodeRun) time.Duration { return r.stop }
	for _, who := range []string{"nodeinit", "shell script"} {
		rd, st := stats(who, ready), stats(who, stop)
		fmt.Fprintf(w, "| %s | %s | %s–%s | %s | %s–%s | %d |\n", who,
			ms(quantile(rd, 0.5)), ms(quantile(rd, 0.25)), ms(quantile(rd, 0.75)),
			ms(quantile(st, 0.5)), ms(quantile(st, 0.25)), ms(quantile(st, 0.75)), len(rd))
	}
	fmt.Fprintln(w, "\n| target | issue | nodeinit | met |")
	fmt.Fprintln(w, "|---|---:|---:|---|")
	for _, m := range []struct {
		what string
		of   func(realNodeRun) time.Duration
	}{{"start → Node Ready", ready}, {"TERM → exit", stop}} {
		r := float64(quantile(stats("nodeinit", m.of), 0.5)) / float64(quantile(stats("shell script", m.of), 0.5))
		met := "met"
		if r > realNodeLimit {
			met = "**not met**"
		}
		fmt.Fprintf(w, "| real node: %s ≤ %.2f × the shell script's | 15 | %.2f × | %s |\n", m.what, realNodeLimit, r, met)
	}
}

// quantile interpolates between the closest ranks of sorted d.
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	pos := q * float64(len(d)-1)
	lo := int(pos)
	hi := min(lo+1, len(d)-1)
	return d[lo] + time.Duration(float64(d[hi]-d[lo])*(pos-float64(lo)))
}

// ms prints d in milliseconds, as the harness's tables do.
func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/1e6) }
