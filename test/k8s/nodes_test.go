//go:build k8s

package k8s

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// TestNodeIPTablesMode runs a whole node with kube-proxy in iptables mode:
// the Node registers and is Ready, a static pod and a Deployment run with
// their service-account token, the Service is programmed and answers
// through its cluster IP; kube-proxy killed with SIGKILL is restarted after
// the backoff with the rules in place all along; TERM stops the kubelet,
// then kube-proxy, and nodeinit exits with the kubelet's status.
func TestNodeIPTablesMode(t *testing.T) {
	c := getCluster(t)
	k := c.startNode(t, nodeSpec{})
	pods := k.checkRunningNode("iptables")
	ip := k.clusterIP()

	before := k.children()["kube-proxy"]
	killed := time.Now()
	must(t, syscall.Kill(before, syscall.SIGKILL))
	ended := k.waitLog(10*time.Second, 0, `"Proxy ended; restarting after backoff"`)
	if !programmed("iptables", rulesFor(t, "iptables"), ip, pods) {
		t.Error("kube-proxy's rules went with kube-proxy")
	}
	restarted := k.waitLog(30*time.Second, ended.at, `"Restarted task"`, `task="proxy"`)
	after := k.children()["kube-proxy"]
	if after == 0 || after == before {
		t.Fatalf("kube-proxy pid %d after the restart (was %d)", after, before)
	}
	backoff := restarted.at - ended.at
	t.Logf("kube-proxy killed: nodeinit saw it end, restarted it %v later (backoff 1s); %v from the KILL to the new kube-proxy",
		backoff.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
	if backoff < 900*time.Millisecond || backoff > 5*time.Second {
		t.Errorf("kube-proxy restarted %v after it ended; want the 1s backoff", backoff)
	}
	if !programmed("iptables", rulesFor(t, "iptables"), ip, pods) {
		t.Error("the Service's rules are gone after kube-proxy's restart")
	}
	k.checkService(ip, pods, 30*time.Second)
	if !k.getNode().ready() {
		t.Error("the Node is not Ready after kube-proxy's restart")
	}

	s := k.stopAndCheck(90 * time.Second)
	t.Logf("TERM: %v", s)
}

// TestNodeNftablesMode is the same node with kube-proxy in nftables mode.
// It also shows that a test's own KubeletConfiguration lines reach the
// kubelet (the Node's pod capacity).
func TestNodeNftablesMode(t *testing.T) {
	c := getCluster(t)
	k := c.startNode(t, nodeSpec{mode: "nftables", kubeletConfig: "maxPods: 42\n"})
	k.checkRunningNode("nftables")
	if pods := k.getNode().Status.Capacity["pods"]; pods != "42" {
		t.Errorf("the Node's pod capacity is %q; the test's KubeletConfiguration says maxPods: 42", pods)
	}
	t.Logf("TERM: %v", k.stopAndCheck(90*time.Second))
}

// TestNodeIPVSModeWithoutIPVS: this kernel has no IPVS, so kube-proxy in
// ipvs mode exits at once; nodeinit restarts it on its backoff, doubling,
// while the kubelet runs on and the Node stays Ready. Then kube-proxy
// recovers (the test has its next start run in iptables mode, as an
// operator's fix would): it runs, and the stop must end it after the
// kubelet, as any kube-proxy, though it had failed on its own before
// (stopAndCheck tells a kube-proxy failing on its own from one that dies
// with the kubelet).
func TestNodeIPVSModeWithoutIPVS(t *testing.T) {
	c := getCluster(t)
	// kube-proxy through a script that runs it in iptables mode once the
	// file heal exists.
	dir := t.TempDir()
	heal, wrapper := filepath.Join(dir, "heal"), filepath.Join(dir, "kube-proxy")
	must(t, os.WriteFile(wrapper, fmt.Appendf(nil, `#!/bin/sh
if [ -e %s ]; then
	for a; do shift; case $a in --proxy-mode=ipvs) set -- "$@" --proxy-mode=iptables;; *) set -- "$@" "$a";; esac; done
fi
exec %s "$@"
`, heal, filepath.Join(c.bin, "kube-proxy")), 0o755))
	k := c.startNode(t, nodeSpec{mode: "ipvs", flags: []string{"--proxy-restart-backoff=500ms", "--proxy-restart-backoff-max=2s", "--proxy-path=" + wrapper}})
	_, took := k.waitReady(90 * time.Second)
	t.Logf("Node Ready %v after nodeinit started, with kube-proxy failing", took.Round(10*time.Millisecond))
	kubelet := k.children()["kubelet"]

	var ends []logLine
	var after time.Duration
	for range 4 {
		ends = append(ends, k.waitLog(30*time.Second, after, `"Proxy ended; restarting after backoff"`))
		after = ends[len(ends)-1].at + time.Microsecond
	}
	var backoffs []string
	for _, l := range ends {
		m := regexp.MustCompile(`backoff="([^"]+)"`).FindStringSubmatch(l.text)
		if m == nil {
			t.Fatalf("no backoff in %q", l.text)
		}
		backoffs = append(backoffs, m[1])
	}
	t.Logf("kube-proxy in ipvs mode exited %d times; nodeinit's backoffs: %v", len(ends), backoffs)
	if want := []string{"500ms", "1s", "2s", "2s"}; !slices.Equal(backoffs, want) {
		t.Errorf("backoffs %v; want %v (doubling from 500ms up to 2s)", backoffs, want)
	}
	proxyLog, _ := os.ReadFile(filepath.Join(k.dir, "logs", "proxy.log"))
	if !strings.Contains(strings.ToLower(string(proxyLog)), "ipvs") {
		t.Errorf("kube-proxy's log does not say why ipvs mode failed:\n%s", testenv.Tail(string(proxyLog), 20))
	}
	if now := k.children()["kubelet"]; now != kubelet {
		t.Errorf("the kubelet is pid %d, was %d: it must run on while kube-proxy fails", now, kubelet)
	}
	if n := k.getNode(); !n.ready() {
		t.Errorf("the Node is not Ready while kube-proxy fails: %+v", n.condition("Ready"))
	}

	must(t, os.WriteFile(heal, nil, 0o644))
	if err := waitHTTP(&http.Client{Timeout: time.Second}, "http://127.0.0.1:10256/healthz", nil, 30*time.Second); err != nil {
		t.Fatalf("kube-proxy in iptables mode after its failures: %v", err)
	}
	var healed logLine // kube-proxy's last start: in iptables mode
	for _, l := range nodeinitLines(k.log()) {
		if strings.Contains(l.text, `"Restarted task"`) && strings.Contains(l.text, `task="proxy"`) {
			healed = l
		}
	}
	if ends := proxyEnds(k.log(), healed.at, 24*time.Hour); len(ends) > 0 {
		t.Fatalf("kube-proxy ended again after its start in iptables mode: %s", ends[0].text)
	}
	s := k.stopAndCheck(90 * time.Second)
	t.Logf("kube-proxy in iptables mode since %s, after its failures; TERM: %v", healed.text, s)
	if s.proxyEnd < s.kubeletExit {
		t.Errorf("kube-proxy ended at %v (-1: it did not run when the kubelet ended), before the kubelet (%v)", s.proxyEnd, s.kubeletExit)
	}
}

// checkRunningNode waits for the Node to be Ready and for its pods, and
// checks the Service in mode. It returns the web pods.
func (k *kubeNode) checkRunningNode(mode string) []pod {
	t := k.t
	t.Helper()
	n, took := k.waitReady(90 * time.Second)
	t.Logf("Node Ready %v after nodeinit started", took.Round(10*time.Millisecond))
	if v := n.Status.NodeInfo.KubeletVersion; !strings.HasPrefix(v, "v1.") || strings.Contains(v, "master") {
		t.Errorf("the kubelet reports version %q: the build lost its version stamp", v)
	}
	addr := ""
	for _, a := range n.Status.Addresses {
		if a.Type == "InternalIP" {
			addr = a.Address
		}
	}
	if addr != k.c.nodeIP {
		t.Errorf("the Node's InternalIP is %q; want the kubelet's --node-ip %s", addr, k.c.nodeIP)
	}

	static := k.waitPods("metadata.name=static-sleeper-"+nodeName, 1, 60*time.Second)
	t.Logf("static pod %s Running %v after nodeinit started", static[0].Metadata.Name, time.Since(k.started).Round(10*time.Millisecond))
	deployed := time.Now()
	k.deployWeb()
	pods := k.waitPods("app=web", 2, 90*time.Second)
	t.Logf("Deployment web: 2 pods Running and Ready %v after it was created", time.Since(deployed).Round(10*time.Millisecond))
	k.checkTokenMounted(pods)

	ip := k.clusterIP()
	took = k.waitRules(mode, ip, pods, 60*time.Second)
	answered := k.checkService(ip, pods, 30*time.Second)
	t.Logf("kube-proxy (%s mode) programmed Service web (%s) %v after its pods were Ready; %s answered with its token",
		mode, ip, took.Round(10*time.Millisecond), answered)
	return pods
}

// waitLog waits for a line of nodeinit's log after time of day `after`
// that holds every one of words, and returns it.
func (k *kubeNode) waitLog(timeout, after time.Duration, words ...string) logLine {
	k.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		running := k.running()
		for _, l := range nodeinitLines(k.log()) {
			if l.at >= after && !slices.ContainsFunc(words, func(w string) bool { return !strings.Contains(l.text, w) }) {
				return l
			}
		}
		if !running || time.Now().After(deadline) {
			k.dumpLogs()
			k.t.Fatalf("no log line with %q within %v (nodeinit running: %v)", words, timeout, running)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestNodeInCgroupParent: with --cgroup-parent and --require-cgroup,
// nodeinit joins the cgroup in every hierarchy and hands it to the kubelet
// as --cgroup-root; the kubelet accepts the line nodeinit built (the same
// --write-flags prints), and the pods' containers run under
// <cgroup>/kubepods in every hierarchy.
func TestNodeInCgroupParent(t *testing.T) {
	c := getCluster(t)
	cg := fmt.Sprintf("/nodeinit-k8s-%d", os.Getpid())
	makeCgroup(t, cg)
	k := c.startNode(t, nodeSpec{flags: []string{"--cgroup-parent=" + cg, "--require-cgroup"}})
	k.waitReady(90 * time.Second)

	kids := k.children()
	line := cmdline(kids["kubelet"])
	if !slices.Contains(line, "--cgroup-root="+cg) {
		t.Errorf("the kubelet runs as %q, without --cgroup-root=%s", line, cg)
	}
	want := k.writeFlags(t, c.nodeinitArgs(k.dir, "iptables"), "--log-dir="+filepath.Join(k.dir, "logs"), "--cgroup-parent="+cg, "--require-cgroup")
	if got := strings.Join(line, " "); got != strings.Join(want[0], " ") {
		t.Errorf("the kubelet runs as\n  %s\n--write-flags printed\n  %s", got, strings.Join(want[0], " "))
	}
	for name, pid := range map[string]int{"nodeinit": k.pid(), "kubelet": kids["kubelet"], "kube-proxy": kids["kube-proxy"]} {
		checkCgroups(t, name, pid, cg, false)
	}

	static := k.waitPods("metadata.name=static-sleeper-"+nodeName, 1, 60*time.Second)
	checkCgroups(t, "the static pod's container", containerPid(t, c, static[0]), cg+"/kubepods/", true)
	t.Logf("TERM: %v", k.stopAndCheck(90*time.Second))
}

// containerPid is the host pid of the static pod's sleep container, from
// the CRI.
func containerPid(t *testing.T, c *cluster, p pod) int {
	t.Helper()
	id, err := c.containerd.cri("ps", "--quiet", "--name", "sleep", "--label", "io.kubernetes.pod.name="+p.Metadata.Name)
	must(t, err)
	if strings.TrimSpace(id) == "" {
		t.Fatalf("crictl lists no container of pod %s", p.Metadata.Name)
	}
	out, err := c.containerd.cri("inspect", "--output", "go-template", "--template", "{{.info.pid}}", strings.Fields(id)[0])
	must(t, err)
	var pid int
	if _, err := fmt.Sscan(out, &pid); err != nil {
		t.Fatalf("crictl inspect gave no pid: %q", out)
	}
	return pid
}

// writeFlags runs nodeinit --write-flags with the node's nodeinit flags and
// returns the executor's and the proxy's command lines as words. It runs
// as PID 1 of a new pid namespace, as the node does: on recent kernels
// each pid namespace has a kernel.pid_max of its own (a new one 4194304
// on these hosts, the host's 32768), which is the pid capacity the kubelet
// reads (see --size-node-to-container).
func (k *kubeNode) writeFlags(t *testing.T, args []string, extra ...string) [][]string {
	t.Helper()
	argv := append([]string{"unshare", "--pid", "--fork", "--mount-proc", testenv.BuildRaced(t, "./cmd/nodeinit"), "--write-flags"}, args...)
	argv = append(append(argv, extra...), "--")
	argv = append(argv, k.c.kubeletArgs(filepath.Join(k.bin, "kubelet"), k.dir)...)
	// stdout alone: stderr has the adjustments for the container, for people.
	out, err := stdoutOf(10*time.Second, argv...)
	must(t, err)
	var lines [][]string
	for l := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		lines = append(lines, shellWords(t, l))
	}
	return lines
}

// makeCgroup creates cg in every mounted hierarchy (with the parent's cpus
// and mems in a cpuset, which no process can join without them) and has
// putBack check and remove it.
func makeCgroup(t *testing.T, cg string) {
	t.Helper()
	trackCgroup(strings.TrimPrefix(cg, "/"))
	for _, dir := range cgroupDirs() {
		if !strings.HasSuffix(dir, cg) {
			continue
		}
		must(t, os.Mkdir(dir, 0o755))
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(filepath.Dir(dir), f)); err == nil {
				must(t, os.WriteFile(filepath.Join(dir, f), v, 0o644))
			}
		}
	}
}

// checkCgroups checks that pid is in cgroup prefix (exactly, or below it
// with below) in every v1 hierarchy with a controller the kubelet manages.
func checkCgroups(t *testing.T, name string, pid int, prefix string, below bool) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	must(t, err)
	checked := 0
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 || f[1] == "" || strings.HasPrefix(f[1], "name=") {
			continue // the unified hierarchy and named ones hold no controller
		}
		ok := f[2] == prefix || below && strings.HasPrefix(f[2], prefix) || !below && strings.HasPrefix(f[2], prefix+"/")
		if !ok {
			t.Errorf("%s (pid %d) is in %s of the %s hierarchy; want %s", name, pid, f[2], f[1], prefix)
		}
		checked++
	}
	if checked == 0 {
		t.Errorf("%s (pid %d): no controller hierarchy in %q", name, pid, b)
	}
}

// shellWords splits a line --write-flags printed back into its words:
// plain words, and single-quoted ones where '\” is a quote.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var w strings.Builder
	inWord, quoted := false, false
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case quoted && ch == '\'':
			quoted = false
		case quoted:
			w.WriteByte(ch)
		case ch == '\'':
			quoted, inWord = true, true
		case ch == '\\' && i+1 < len(line):
			i++
			w.WriteByte(line[i])
			inWord = true
		case ch == ' ':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteByte(ch)
			inWord = true
		}
	}
	if quoted {
		t.Fatalf("unterminated quote in %q", line)
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}
