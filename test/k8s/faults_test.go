//go:build k8s

package k8s

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// The faults a node meets around nodeinit, with the real kubelet,
// kube-proxy, containerd and control plane: what nodeinit must do (or
// leave alone), and what the node's workload sees. docs/faults.md has the
// figures.

const (
	// containerdDown is how long containerd stays dead: past the kubelet's
	// 30 s wait for its runtime (maxWaitForContainerRuntime), after which
	// it reports the Node not Ready.
	containerdDown = 45 * time.Second
	// apiDown is how long the control plane is away from the node: past
	// the controller-manager's 50 s node-monitor-grace-period, after which
	// it marks the Node's Ready condition Unknown.
	apiDown = 60 * time.Second
)

// TestNodeThroughAContainerdRestart kills containerd with SIGKILL while the
// node runs its pods and starts it again containerdDown later: the Node
// goes not Ready meanwhile, the kubelet reconnects by itself and the Node
// is Ready again; every pod's container is the one from before, never
// restarted; the Service answers every request throughout; a pod created
// after the restart runs; and nodeinit restarts, stops and logs nothing.
func TestNodeThroughAContainerdRestart(t *testing.T) {
	c := getCluster(t)
	k := c.startNode(t, nodeSpec{})
	pods := k.checkRunningNode("iptables")
	ip := k.clusterIP()
	h, m, before, tasks := k.watchFault(ip)

	killed := time.Now()
	c.killContainerd(t)
	time.Sleep(containerdDown)
	took := c.restartContainerd(t)
	restarted := time.Now()
	t.Logf("containerd killed with SIGKILL, started again %v later; serving %v after its start", containerdDown, took.Round(time.Millisecond))

	ready := m.waitReadyAfter(t, restarted, 2*time.Minute)
	t.Logf("the Node was Ready again %v after containerd's restart", ready.Sub(restarted).Round(time.Millisecond))
	k.logReadyChanges(m, killed)
	checkNotReadyWithoutContainerd(t, m.readyChanges(), killed, restarted)
	h.checkWorkload(before, "after containerd's restart")
	k.checkService(ip, pods, 30*time.Second)
	started := time.Now()
	k.create("/api/v1/namespaces/default/pods", "after-restart", fmt.Sprintf(sleeperPod, "after-restart"))
	k.waitPods("metadata.name=after-restart", 1, 2*time.Minute)
	t.Logf("a pod created %v after containerd's restart was Running %v later",
		started.Sub(restarted).Round(time.Millisecond), time.Since(started).Round(time.Millisecond))
	m.stop()
	m.reportRequests(t)
	k.checkLeftAlone(tasks, killed)
	t.Logf("TERM: %v", k.stopAndCheck(90*time.Second))
}

// checkNotReadyWithoutContainerd checks that the Node went not Ready
// while containerd was dead, from killed to restarted: containerdDown is
// past the kubelet's wait for its runtime, so a Node that stays Ready
// throughout is a kubelet that did not see its runtime go, or a
// containerd that did not.
func checkNotReadyWithoutContainerd(t *testing.T, changes []readyChange, killed, restarted time.Time) {
	t.Helper()
	for _, r := range changes {
		if !r.ready && r.at.After(killed) && r.at.Before(restarted) {
			t.Logf("the Node went not Ready %v after containerd was killed (%v before its restart): %s",
				r.at.Sub(killed).Round(time.Millisecond), restarted.Sub(r.at).Round(time.Millisecond), r.why)
			return
		}
	}
	var seen []string
	for _, r := range changes {
		seen = append(seen, fmt.Sprintf("Ready %v at %s %s", r.ready, r.at.Format("15:04:05.000"), r.why))
	}
	t.Errorf("the Node never went not Ready in the %v containerd was dead, from %s (Ready changes seen: %q)",
		restarted.Sub(killed).Round(time.Millisecond), killed.Format("15:04:05.000"), seen)
}

// sleeperPod is a pod that sleeps until it is deleted; %s is its name.
const sleeperPod = `apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: default}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: ` + busyboxImage + `
    imagePullPolicy: Never
    command: [sleep, "1000000"]
`

// TestKubeletKilledEndsTheNode kills the kubelet with SIGKILL: nodeinit
// ends the node with its status, 137, after stopping kube-proxy, and the
// pods and kube-proxy's rules stay, so the Service still answers with
// neither the kubelet nor kube-proxy running.
func TestKubeletKilledEndsTheNode(t *testing.T) {
	c := getCluster(t)
	k := c.startNode(t, nodeSpec{})
	pods := k.checkRunningNode("iptables")
	ip := k.clusterIP()
	killed := time.Now()
	must(t, syscall.Kill(k.children()["kubelet"], syscall.SIGKILL))
	s := shutdown{code: k.wait(30 * time.Second), from: "the kill"}
	s.total = time.Since(killed)
	k.shutdownFrom(&s, k.log(), timeOfDay(killed), timeOfDay(killed))
	t.Logf("kubelet killed: %v", s)
	if s.code != 128+int(syscall.SIGKILL) || s.kubeletStatus != "killed by signal SIGKILL" {
		t.Errorf("nodeinit exited %d with the kubelet %s; want 137, killed by signal SIGKILL", s.code, s.kubeletStatus)
	}
	if s.proxyEnd < s.kubeletExit {
		t.Errorf("kube-proxy ended %v after the kill, before the kubelet (%v)", s.proxyEnd, s.kubeletExit)
	}
	if s.total > 10*time.Second {
		t.Errorf("nodeinit took %v to end the node after the kubelet died", s.total)
	}
	if !programmed("iptables", rulesFor(t, "iptables"), ip, pods) {
		t.Error("kube-proxy's rules went with the node")
	}
	answered := k.checkService(ip, pods, 10*time.Second)
	t.Logf("with the node ended, the Service still answered (from %s) through the rules kube-proxy left", answered)
}

// TestKubeletThatExitsEndsTheNode runs a kubelet that exits 1 at start
// (its container runtime's socket does not exist): nodeinit ends the node
// with 1, after stopping kube-proxy.
func TestKubeletThatExitsEndsTheNode(t *testing.T) {
	c := getCluster(t)
	missing := "unix://" + filepath.Join(t.TempDir(), "no-runtime.sock")
	k := c.startNode(t, nodeSpec{kubeletArgs: []string{"--container-runtime-endpoint=" + missing}})
	s := shutdown{code: k.wait(2 * time.Minute), from: "nodeinit's start"}
	s.total = time.Since(k.started)
	// kube-proxy starts before the kubelet: from the kubelet's start on it
	// must run until the kubelet has ended (shutdownFrom).
	executor := k.waitLog(10*time.Second, 0, `"Started task"`, `task="executor"`)
	k.shutdownFrom(&s, k.log(), executor.at, timeOfDay(k.started))
	t.Logf("a kubelet without its runtime: %v", s)
	if s.code != 1 || s.kubeletStatus != "exit code 1" {
		t.Errorf("nodeinit exited %d with the kubelet's %s; want 1, exit code 1", s.code, s.kubeletStatus)
	}
	if s.proxyEnd < s.kubeletExit {
		t.Errorf("kube-proxy ended at %v (-1: it did not run when the kubelet ended), before the kubelet (%v)", s.proxyEnd, s.kubeletExit)
	}
	b, _ := os.ReadFile(filepath.Join(k.dir, "logs", "executor.log"))
	if !strings.Contains(string(b), "no-runtime.sock") {
		t.Errorf("the kubelet's log does not name its missing runtime:\n%s", testenv.Tail(string(b), 20))
	}
	t.Logf("the kubelet's last line: %s", testenv.Tail(string(b), 1))
}

// TestNodeImageRestartedByPodman runs the node image with podman's
// --restart=always and kills its kubelet with SIGKILL: nodeinit ends the
// container with 137, podman starts it again, and the new kubelet takes
// over the node's pods as they are: every container the one from before,
// never restarted, and no request to the Service lost meanwhile, since
// kube-proxy's rules stay while it is down. The Node stays Ready but for
// the new kubelet's one starting status, which a loaded machine shows.
func TestNodeImageRestartedByPodman(t *testing.T) {
	c := getCluster(t)
	c.buildNodeImage(t)
	k := c.runNodeImage(t, imageRun{podman: []string{"--restart=always"}})
	k.checkRunningNode("iptables")
	ip := k.clusterIP()
	h := &hostNode{t: t, c: c, k: k}
	h.waitLease(30 * time.Second)
	before := k.workloadContainers()
	m := watchService(h, ip)
	t.Cleanup(m.stop)
	m.wg.Add(1)
	go m.watchLease(m.ctx)

	first, kubelet := k.pid(), k.children()["kubelet"]
	killed := time.Now()
	must(t, syscall.Kill(kubelet, syscall.SIGKILL))
	var again, newKubelet int
	testenv.WaitFor(t, 2*time.Minute, "podman to start the node container again with a kubelet", func() bool {
		out, err := c.podman.run(30*time.Second, "inspect", "--format", "{{.State.Pid}}", nodeContainer)
		again, _ = strconv.Atoi(strings.TrimSpace(out))
		if err != nil || again == 0 || again == first {
			return false
		}
		newKubelet = k.children()["kubelet"]
		return newKubelet != 0
	})
	back := time.Now()
	k.since = timeOfDay(back)
	log := k.log()
	_, line := k.lineAfter(log, "All processes have ended", timeOfDay(killed))
	code := regexp.MustCompile(`exitCode=(\d+)`).FindStringSubmatch(line)
	if code == nil {
		t.Fatalf("no exit code in %q", line)
	}
	s := shutdown{from: "the kill"}
	s.code, _ = strconv.Atoi(code[1])
	k.shutdownFrom(&s, log, timeOfDay(killed), timeOfDay(killed))
	s.total = s.allEnded
	t.Logf("kubelet killed in the node container: %v; podman started the container again (nodeinit pid %d, was %d; kubelet pid %d) %v after the kill",
		s, again, first, newKubelet, back.Sub(killed).Round(time.Millisecond))
	if s.code != 137 {
		t.Errorf("the node container's nodeinit exited %d; want 137", s.code)
	}
	if s.proxyEnd < s.kubeletExit {
		t.Errorf("kube-proxy ended %v after the kill, before the kubelet (%v)", s.proxyEnd, s.kubeletExit)
	}
	restarts, _ := c.podman.run(30*time.Second, "inspect", "--format", "{{.RestartCount}}", nodeContainer)
	t.Logf("podman's restart count: %s", strings.TrimSpace(restarts))
	if strings.TrimSpace(restarts) != "1" {
		t.Errorf("podman restarted the node container %q times; want once", strings.TrimSpace(restarts))
	}

	// The new kubelet has renewed the Node's lease and held the node for
	// a renew interval, over which it has synced every pod it found.
	testenv.WaitFor(t, time.Minute, "the new kubelet to renew the Node's lease", func() bool { return m.leaseRenewedAfter(back) })
	renewed := time.Now()
	time.Sleep(holdFor)
	t.Logf("the new kubelet renewed the Node's lease %v after the kill", renewed.Sub(killed).Round(time.Millisecond))
	h.checkWorkload(before, "after podman restarted the node")
	m.stop()
	m.reportRequests(t)
	// The new kubelet may post one starting status first (kubeletStarting).
	if notReady := m.notReadyBesidesStarts(t, 1); notReady > 0 {
		t.Errorf("the Node was not Ready for %v while its container restarted", notReady)
	}
	t.Logf("podman stop: %v", k.stopAndCheck(90*time.Second))
}

// TestNodeWithoutItsControlPlane takes the API server away from the node
// for apiDown (every connection of its kubelet and kube-proxy closed, every
// new one refused) and brings it back: the Node goes not Ready and is
// Ready again, the Service answers every request while the API server is
// away (kube-proxy keeps its rules), and nodeinit neither restarts nor
// stops anything nor logs a line. (Once the API server is back, the
// Service may refuse connections for a moment: the controller-manager
// marked the node's pods not ready with the Node, and kube-proxy drops
// them until the kubelet reports them ready again.) Then the API server goes
// away again and the node gets TERM during the outage: it still drains
// (the preStop hook runs, the kubelet releases its lock), within the
// kubelet's shutdownGracePeriod, and nodeinit exits 0.
func TestNodeWithoutItsControlPlane(t *testing.T) {
	c := getCluster(t)
	link := newAPILink(t)
	k := c.startNode(t, nodeSpec{apiServer: link.url(), kubeletConfig: kubeletShutdown, flags: []string{"--graceful-node-shutdown"}})
	pods := k.checkRunningNode("iptables")
	k.waitLog(30*time.Second, 0, `"Took a shutdown delay inhibitor"`, `who="kubelet"`)
	k.create("/api/v1/namespaces/default/pods", "drain", fmt.Sprintf(drainPod, k.dir))
	k.waitPods("metadata.name=drain", 1, 60*time.Second)
	ip := k.clusterIP()
	h, m, before, tasks := k.watchFault(ip)

	cut := time.Now()
	link.cut()
	time.Sleep(apiDown)
	link.restore()
	restored := time.Now()
	k.logPodReadiness("app=web", "when the API server came back")
	ready := m.waitReadyAfter(t, restored, 2*time.Minute)
	t.Logf("the API server away from the node for %v: the Node was Ready again %v after it came back", apiDown, ready.Sub(restored).Round(time.Millisecond))
	var notReadyAt time.Time
	for _, r := range m.readyChanges() {
		if !r.ready && r.at.After(cut) && notReadyAt.IsZero() {
			notReadyAt = r.at
		}
	}
	if notReadyAt.IsZero() {
		t.Errorf("the Node never went not Ready with the API server away for %v", apiDown)
	} else {
		t.Logf("the Node was seen not Ready %v after the API server went away (%v after it came back)",
			notReadyAt.Sub(cut).Round(time.Millisecond), notReadyAt.Sub(restored).Round(time.Millisecond))
	}
	h.checkWorkload(before, "after the outage")
	k.checkService(ip, pods, 30*time.Second)
	m.stop()
	m.reportOutage(t, cut, restored)
	k.checkLeftAlone(tasks, cut)

	// The API server away again, and TERM during the outage.
	k.since = timeOfDay(time.Now())
	link.cut()
	time.Sleep(15 * time.Second)
	stopped := time.Now()
	s := k.stopAndCheck(90 * time.Second)
	took := time.Since(stopped)
	link.restore()
	t.Logf("TERM 15s into a second outage: nodeinit exited %v after it; %v", took.Round(time.Millisecond), s)
	drain := k.checkDrained()
	if s.code != 0 {
		t.Errorf("nodeinit exited %d, want 0", s.code)
	}
	// The kubelet's shutdownGracePeriod (30s) bounds the drain, and the
	// grace period (20s) the rest.
	if drain > 30*time.Second || took > 50*time.Second {
		t.Errorf("the drain took %v and the stop %v: more than the kubelet's 30s and the grace period", drain, took)
	}
}

// watchFault starts watching a running node through a fault: requests to
// the Service at ip and the Node's Ready condition (the monitor, stopped
// when the test ends), and returns them with the workload's containers
// and nodeinit's children as they are before the fault.
func (k *kubeNode) watchFault(ip string) (*hostNode, *monitor, map[string]string, map[string]int) {
	k.t.Helper()
	h := &hostNode{t: k.t, c: k.c, k: k}
	before, tasks := k.workloadContainers(), k.children()
	m := watchService(h, ip)
	k.t.Cleanup(m.stop)
	return h, m, before, tasks
}

// reportOutage logs the requests to the Service while the API server was
// away (from cut to restored), where none may fail: kube-proxy keeps its
// rules; and after, where the control plane's own view of the node decides.
func (m *monitor) reportOutage(t *testing.T, cut, restored time.Time) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	var during, after []time.Time
	for _, at := range m.failedAt {
		if at.Before(restored) {
			during = append(during, at)
		} else {
			after = append(after, at)
		}
	}
	t.Logf("requests to the Service every 50 ms for %v: %d sent; %d failed while the API server was away", time.Since(m.begun).Round(time.Second), m.requests, len(during))
	if len(after) > 0 {
		t.Logf("%d failed after it came back, sent from %v to %v after it came back, the first: %s", len(after),
			after[0].Sub(restored).Round(time.Millisecond), after[len(after)-1].Sub(restored).Round(time.Millisecond), m.failures[len(during)])
	}
	if len(during) > 0 {
		t.Errorf("%d requests to the Service failed while the API server was away, the first %v after it went away: %s", len(during), during[0].Sub(cut).Round(time.Millisecond), m.failures[0])
	}
}

// logPodReadiness logs the Ready condition of the pods matching selector
// as the API server has it.
func (k *kubeNode) logPodReadiness(selector, when string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var list struct{ Items []pod }
	if err := k.c.api.get(ctx, "/api/v1/namespaces/default/pods?labelSelector="+url.QueryEscape(selector), &list); err != nil {
		k.t.Logf("the pods %s %s: %v", selector, when, err)
		return
	}
	for _, p := range list.Items {
		for _, c := range p.Status.Conditions {
			if c.Type == "Ready" {
				k.t.Logf("pod %s %s: Ready %s (%s) since %s", p.Metadata.Name, when, c.Status, c.Reason, c.LastTransitionTime.Format("15:04:05"))
			}
		}
	}
}

// killContainerd kills the fixture's containerd with SIGKILL and waits for
// it to end; its shims, and the pods' containers, run on. If the test ends
// before restartContainerd, containerd is started again then, for the
// node's clean-up and the other tests.
func (c *cluster) killContainerd(t *testing.T) {
	t.Helper()
	s := c.containerd.server
	must(t, s.cmd.Process.Signal(syscall.SIGKILL))
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("containerd (pid %d) still runs 10s after SIGKILL", s.cmd.Process.Pid)
	}
	t.Cleanup(func() {
		if !c.containerd.running() {
			c.restartContainerd(t)
		}
	})
}

// restartContainerd starts the fixture's containerd again, on the same
// configuration, root and state, and returns how long it took to serve.
func (c *cluster) restartContainerd(t *testing.T) time.Duration {
	t.Helper()
	old := c.containerd.server
	start := time.Now()
	n, err := c.containerd.restart()
	if n != nil {
		c.containerd.server = n.server
		for i, s := range c.servers {
			if s == old {
				c.servers[i] = n.server
			}
		}
	}
	must(t, err)
	return time.Since(start)
}

// waitReadyAfter waits until the Node's Ready condition, as the monitor
// saw it, is True and was last seen changing, if at all, no sooner than
// at - the API server's view a moment after a fault - and returns when it
// was seen Ready.
func (m *monitor) waitReadyAfter(t *testing.T, at time.Time, timeout time.Duration) time.Time {
	t.Helper()
	var seen time.Time
	testenv.WaitFor(t, timeout, "the Node Ready again", func() bool {
		rs := m.readyChanges()
		if len(rs) == 0 || !rs[len(rs)-1].ready {
			return false
		}
		seen = rs[len(rs)-1].at
		if seen.Before(at) {
			seen = at
		}
		return true
	})
	return seen
}

// logReadyChanges logs the Node's Ready changes the monitor saw after
// since.
func (k *kubeNode) logReadyChanges(m *monitor, since time.Time) {
	for _, r := range m.readyChanges() {
		if r.at.After(since) {
			k.t.Logf("the Node's Ready condition became %v %v after the fault began", r.ready, r.at.Sub(since).Round(time.Millisecond))
		}
	}
}

// checkLeftAlone checks that nodeinit did nothing since the fault began
// at since: the kubelet and kube-proxy are the processes of before, and
// nodeinit logged no line.
func (k *kubeNode) checkLeftAlone(before map[string]int, since time.Time) {
	k.t.Helper()
	if now := k.children(); !maps.Equal(now, before) {
		k.t.Errorf("nodeinit's children are %v; before the fault they were %v", now, before)
	}
	var lines []string
	for _, l := range nodeinitLines(k.log()) {
		if l.at >= timeOfDay(since) {
			lines = append(lines, l.text)
		}
	}
	if len(lines) > 0 {
		k.t.Errorf("nodeinit logged %d lines during the fault; want none:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	k.t.Logf("nodeinit's children through the fault: %v, the same; nodeinit logged %d lines", before, len(lines))
}

// apiLink is the node's way to the API server: a TCP forwarder on a
// loopback port of its own (the API server's certificate is for
// 127.0.0.1, whatever the port) that the test can cut, closing every
// connection and refusing new ones, as an API server that has gone away
// does, and restore.
type apiLink struct {
	t    *testing.T
	addr string
	mu   sync.Mutex
	ln   net.Listener
	conn map[net.Conn]bool
	wg   sync.WaitGroup
}

// newAPILink starts the forwarder; it is closed when the test ends.
func newAPILink(t *testing.T) *apiLink {
	t.Helper()
	l := &apiLink{t: t, conn: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	l.addr = ln.Addr().String()
	l.serve(ln)
	t.Cleanup(func() {
		l.cut()
		l.wg.Wait()
	})
	return l
}

// url is the API server's URL through the link.
func (l *apiLink) url() string { return "https://" + l.addr }

func (l *apiLink) serve(ln net.Listener) {
	l.mu.Lock()
	l.ln = ln
	l.mu.Unlock()
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.DialTimeout("tcp", strings.TrimPrefix(apiServer, "https://"), 5*time.Second)
			if err != nil {
				in.Close()
				continue
			}
			l.mu.Lock()
			l.conn[in], l.conn[out] = true, true
			l.mu.Unlock()
			l.wg.Add(2)
			for _, p := range [][2]net.Conn{{in, out}, {out, in}} {
				go func() {
					defer l.wg.Done()
					_, _ = io.Copy(p[0], p[1])
					p[0].Close()
					p[1].Close()
				}()
			}
		}
	}()
}

// cut closes the listener and every connection through it.
func (l *apiLink) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln != nil {
		l.ln.Close()
		l.ln = nil
	}
	for c := range l.conn {
		c.Close()
		delete(l.conn, c)
	}
}

// restore listens again on the same port.
func (l *apiLink) restore() {
	l.t.Helper()
	ln, err := net.Listen("tcp", l.addr)
	must(l.t, err)
	l.serve(ln)
}
