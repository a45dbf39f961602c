//go:build k8s

package k8s

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// pressureMemory is the memory limit of the node's cgroup in
// TestRealNodeUnderMemoryPressure: room for the kubelet, kube-proxy and
// nodeinit, and little more.
const pressureMemory = 768 << 20

// overLimitPod allocates twice its own limit at once: the kernel kills it
// in its own cgroup, every time it starts.
const overLimitPod = `apiVersion: v1
kind: Pod
metadata: {name: over-limit, namespace: default}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: dd
    image: ` + busyboxImage + `
    imagePullPolicy: Never
    command: [dd, if=/dev/zero, of=/dev/null, bs=64M, count=1]
    resources: {limits: {memory: 32Mi}}
`

// growingPod is a BestEffort pod whose shell doubles a string every
// second, from 1 KiB, until the kernel or the kubelet stops it.
const growingPod = `apiVersion: v1
kind: Pod
metadata: {name: grow-%d, namespace: default}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: grow
    image: ` + busyboxImage + `
    imagePullPolicy: Never
    command: [sh, -c, 's=$(printf %%1024s); while :; do s="$s$s"; sleep 1; done']
`

// podState is what a test of memory pressure reads of a pod.
type podState struct {
	Metadata objectMeta
	Status   struct {
		Phase, Reason     string
		ContainerStatuses []struct {
			RestartCount int
			LastState    struct {
				Terminated *struct {
					Reason   string
					ExitCode int
				}
			}
			State struct {
				Terminated *struct{ Reason string }
			}
		}
	}
}

// oomKilled says whether the pod's container was killed by the OOM killer
// (now, or before its last restart) and how often it restarted; evicted,
// whether the kubelet evicted the pod.
func (p podState) oomKilled() (killed bool, restarts int, evicted bool) {
	evicted = p.Status.Reason == "Evicted"
	for _, c := range p.Status.ContainerStatuses {
		restarts += c.RestartCount
		if t := c.LastState.Terminated; t != nil && t.Reason == "OOMKilled" {
			killed = true
		}
		if t := c.State.Terminated; t != nil && t.Reason == "OOMKilled" {
			killed = true
		}
	}
	return killed, restarts, evicted
}

func (k *kubeNode) podState(name string) podState {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var p podState
	must(k.t, k.c.api.get(ctx, "/api/v1/namespaces/default/pods/"+name, &p))
	return p
}

// kmsg reads the kernel's log from the moment it is opened.
type kmsg struct{ fd int }

func openKmsg(t *testing.T) *kmsg {
	t.Helper()
	fd, err := unix.Open("/dev/kmsg", unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	must(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	if _, err := unix.Seek(fd, 0, 2); err != nil { // SEEK_END: only what comes next
		t.Fatal(err)
	}
	return &kmsg{fd}
}

// lines returns the messages logged since the last call.
func (k *kmsg) lines(t *testing.T) []string {
	t.Helper()
	var out []string
	buf := make([]byte, 8192)
	for {
		n, err := unix.Read(k.fd, buf)
		switch {
		case errors.Is(err, unix.EAGAIN):
			return out
		case errors.Is(err, unix.EPIPE): // overwritten before it was read: go on
			continue
		case err != nil:
			t.Fatalf("read /dev/kmsg: %v", err)
		}
		if _, msg, ok := strings.Cut(string(buf[:n]), ";"); ok {
			out = append(out, strings.TrimRight(strings.SplitN(msg, "\n", 2)[0], "\n"))
		}
	}
}

// oomKill is the kernel's line for each OOM kill:
// oom-kill:constraint=CONSTRAINT_MEMCG,...,oom_memcg=/a,task_memcg=/a/b,task=sh,pid=123,uid=0
var oomKill = regexp.MustCompile(`oom-kill:.*oom_memcg=([^,]*),task_memcg=([^,]*),task=([^,]*),pid=(\d+)`)

// victim is one OOM kill the kernel logged.
type victim struct {
	domain, memcg, task string // the cgroup out of memory, the victim's cgroup, its name
	pid                 int
}

func victims(lines []string) []victim {
	var out []victim
	for _, l := range lines {
		if m := oomKill.FindStringSubmatch(l); m != nil {
			pid, _ := strconv.Atoi(m[4])
			out = append(out, victim{m[1], m[2], m[3], pid})
		}
	}
	return out
}

// oomScoreAdj reads a process's OOM score adjustment; -2000 when it has
// ended.
func oomScoreAdj(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid))
	if err != nil {
		return -2000
	}
	v, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return v
}

// oomKillsIn is the kernel's count of OOM kills of tasks in memory cgroup
// cg itself, not below it: oom_kill in memory.events.local (v2) or
// memory.oom_control (v1, where the counts are per cgroup). Unlike the
// kernel's log, whose OOM reports are rate-limited, it misses none.
func oomKillsIn(t *testing.T, cg string) int64 {
	t.Helper()
	dir := filepath.Dir(cgroupFile(t, "memory", cg, "cgroup.procs"))
	for _, f := range []string{"memory.events.local", "memory.oom_control"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			continue
		}
		for l := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "oom_kill "); ok {
				n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				must(t, err)
				return n
			}
		}
	}
	t.Fatalf("the memory cgroup %s (%s) has no oom_kill count", cg, dir)
	return 0
}

// checkOOMKillsInPods checks where the kernel's OOM kills in the node's
// cgroup cg happened: by its counts, none in the memory cgroups of
// nodeinit, the kubelet and kube-proxy (node), whatever else runs there;
// by its log (seen), every victim below cg's kubepods cgroup, and the pod
// over its limit (uid over) killed at its own limit, in its own cgroup.
func checkOOMKillsInPods(t *testing.T, cg, over string, node map[string]int, seen []victim) {
	t.Helper()
	var counts []string
	for name, pid := range node {
		own := cgroupOf(t, pid, "memory")
		n := oomKillsIn(t, own)
		counts = append(counts, fmt.Sprintf("%s's %s: %d", name, own, n))
		if n != 0 {
			t.Errorf("the kernel counts %d OOM kills in %s's memory cgroup %s", n, name, own)
		}
	}
	slices.Sort(counts)
	t.Logf("the kernel's OOM kill counts in the node's own cgroups: %s", strings.Join(counts, ", "))
	atOwnLimit := 0
	for _, v := range seen {
		if !strings.HasPrefix(v.memcg, cg+"/kubepods/") {
			t.Errorf("the kernel OOM-killed %s (pid %d) in %s, not in a pod's cgroup below %s/kubepods", v.task, v.pid, v.memcg, cg)
		}
		if strings.Contains(v.memcg, "/pod"+over+"/") && strings.Contains(v.domain, "/pod"+over) {
			atOwnLimit++
		}
	}
	if atOwnLimit == 0 {
		t.Errorf("the kernel's log has no OOM kill of the pod over its limit (uid %s) at its own limit: %+v", over, seen)
	}
}

// TestRealNodeUnderMemoryPressure: the node's cgroup is limited to
// 768 MiB (--cgroup-parent). A pod over its own 32 MiB limit is killed in
// its own cgroup at every start (OOMKilled, its restartCount climbing);
// three BestEffort pods grow until the pods have all the memory there is.
// Sized to its container, the node's kubepods cgroup has the container's
// limit (capacity less --system-reserved), so the pods meet the node
// cgroup's own limit, where the kernel weighs them against nodeinit, the
// kubelet and kube-proxy: it stops only pods, and those three keep their
// pids.
func TestRealNodeUnderMemoryPressure(t *testing.T) {
	c := getCluster(t)
	cg := fmt.Sprintf("/nodeinit-k8s-pressure-%d", os.Getpid())
	makeCgroup(t, cg)
	limitCgroup(t, cg, pressureMemory, 0, 0)
	k := c.startNode(t, nodeSpec{flags: []string{"--cgroup-parent=" + cg, "--require-cgroup"}})
	k.waitReady(90 * time.Second)
	k.checkMemoryPressure(cg)
}

func (k *kubeNode) checkMemoryPressure(cg string) {
	t := k.t
	node := map[string]int{"nodeinit": k.pid()}
	for name, pid := range k.children() {
		node[name] = pid
	}
	if node["kubelet"] == 0 || node["kube-proxy"] == 0 {
		t.Fatalf("nodeinit's children are %v; want the kubelet and kube-proxy", node)
	}
	log := openKmsg(t)
	began := time.Now()
	k.create("/api/v1/namespaces/default/pods", "over-limit", overLimitPod)
	const growers = 3
	for i := range growers {
		k.create("/api/v1/namespaces/default/pods", fmt.Sprintf("grow-%d", i), fmt.Sprintf(growingPod, i))
	}

	var seen []victim
	var over string
	var stopped []string
	testenv.WaitFor(t, 100*time.Second, "the pod over its limit OOM-killed twice and a BestEffort pod stopped", func() bool {
		seen = append(seen, victims(log.lines(t))...)
		killed, restarts, _ := k.podState("over-limit").oomKilled()
		over = fmt.Sprintf("OOMKilled %v, restartCount %d", killed, restarts)
		stopped = nil
		for i := range growers {
			name := fmt.Sprintf("grow-%d", i)
			switch killed, restarts, evicted := k.podState(name).oomKilled(); {
			case evicted:
				stopped = append(stopped, name+" evicted")
			case killed:
				stopped = append(stopped, fmt.Sprintf("%s OOMKilled (restartCount %d)", name, restarts))
			}
		}
		return killed && restarts >= 2 && len(stopped) > 0
	})
	took := time.Since(began)
	seen = append(seen, victims(log.lines(t))...)
	checkOOMKillsInPods(t, cg, k.podState("over-limit").Metadata.UID, node, seen)

	for name, pid := range node {
		now := pid
		if name != "nodeinit" {
			now = k.children()[name]
		}
		if now != pid {
			t.Errorf("%s was pid %d and is %d after the memory pressure; want it untouched", name, pid, now)
		}
	}
	if n := k.getNode(); !n.ready() {
		t.Errorf("the Node is not Ready after the memory pressure: %+v", n.condition("Ready"))
	}
	var killed []string
	for _, v := range seen {
		domain := "the node's limit"
		if v.domain != cg {
			domain = "its own limit"
		}
		killed = append(killed, fmt.Sprintf("%s %d at %s", v.task, v.pid, domain))
		for name, pid := range node {
			if v.pid == pid {
				t.Errorf("the kernel OOM-killed %s (pid %d)", name, pid)
			}
		}
	}
	if len(seen) == 0 {
		t.Errorf("the kernel logged no OOM kill")
	}
	adj := map[string]int{}
	for name, pid := range node {
		adj[name] = oomScoreAdj(pid)
	}
	t.Logf("within %v: the pod over its limit %s; %s; the kernel's OOM kills: %s; "+
		"nodeinit, the kubelet, kube-proxy kept their pids %v; their oom_score_adj %v",
		took.Round(time.Second), over, strings.Join(stopped, ", "), strings.Join(killed, ", "), node, adj)
	t.Logf("TERM: %v", k.stopAndCheck(90*time.Second))
}
