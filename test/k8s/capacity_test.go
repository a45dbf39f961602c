//go:build k8s

package k8s

import (
	"context"
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/cgroups"
	nodeargs "github.com/nodeinit/nodeinit/node"
)

// The limits the tests write on the node's cgroup: 3 GiB, one CPU of CFS
// quota, 4096 processes. The kubelet's KubeletConfiguration here has the
// hard eviction threshold memory.available<1Mi and no reservations.
const (
	limitMemory   = 3 << 30
	limitMilliCPU = 1000
	limitPids     = 4096
	evictionHard  = 1 << 20
)

// limitCgroup writes the memory, CPU and pids limits into cgroup cg (made
// by makeCgroup) in the hierarchies that hold them, v1 or v2.
func limitCgroup(t *testing.T, cg string, memory, milliCPU, pids int64) {
	t.Helper()
	l, err := cgroups.ReadLayout("/")
	must(t, err)
	write := func(h cgroups.Hierarchy, file, value string) {
		t.Helper()
		dir, ok := h.Dir("/", cg)
		if !ok {
			t.Fatalf("the %s hierarchy does not reach %s", h.Name(), cg)
		}
		must(t, os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644))
	}
	wrote := 0
	for _, h := range l.Hierarchies {
		switch {
		case l.Mode() == cgroups.V2 && h.Unified:
			if memory > 0 {
				write(h, "memory.max", fmt.Sprint(memory))
			}
			if milliCPU > 0 {
				write(h, "cpu.max", fmt.Sprintf("%d 100000", milliCPU*100))
			}
			if pids > 0 {
				write(h, "pids.max", fmt.Sprint(pids))
			}
			wrote += 3
		case h.Unified:
		default:
			for _, c := range h.Controllers {
				switch {
				case c == "memory" && memory > 0:
					write(h, "memory.limit_in_bytes", fmt.Sprint(memory))
				case c == "cpu" && milliCPU > 0:
					write(h, "cpu.cfs_period_us", "100000")
					write(h, "cpu.cfs_quota_us", fmt.Sprint(milliCPU*100))
				case c == "pids" && pids > 0:
					write(h, "pids.max", fmt.Sprint(pids))
				default:
					continue
				}
				wrote++
			}
		}
	}
	if wrote == 0 {
		t.Fatalf("no hierarchy holds the memory, cpu or pids controller for %s", cg)
	}
}

// quantity reads a quantity the API server wrote.
func quantity(t *testing.T, s string) *big.Rat {
	t.Helper()
	q, err := nodeargs.ParseQuantity(s)
	if err != nil {
		t.Fatalf("the API's quantity %q: %v", s, err)
	}
	return q
}

// sizedNode is what a test of a limited node checks and reports.
type sizedNode struct {
	allocMemory, allocCPU, capMemory, capCPU *big.Rat
	reserved                                 string // the kubelet's --system-reserved
}

// checkSizedNode (writeFlags nil: not compared) checks a node whose kubelet's cgroup root cg (or an
// ancestor: limitedAt names the cgroup of each resource's limit) has the
// test's limits: the kubelet runs with the
// --system-reserved that --write-flags prints; the Node's allocatable is
// exactly limit - the eviction threshold for memory and the limit for cpu,
// as nodeinit's log predicts, with one log line per limit naming the file
// it came from; the kubelet's kubepods cgroup lies below cg with limits no
// larger than the container's; and a pod that requests more memory than
// the container has stays Pending with the scheduler's reason.
func (k *kubeNode) checkSizedNode(cg string, limitedAt func(resource string) string, writeFlags [][]string) sizedNode {
	t := k.t
	t.Helper()
	n, took := k.waitReady(90 * time.Second)
	t.Logf("Node Ready %v after nodeinit started", took.Round(10*time.Millisecond))
	line := cmdline(k.children()["kubelet"])
	var got sizedNode
	for _, a := range line {
		if v, ok := strings.CutPrefix(a, "--system-reserved="); ok {
			got.reserved = v
		}
	}
	if got.reserved == "" {
		t.Fatalf("the kubelet runs as %q, without --system-reserved", line)
	}
	if writeFlags != nil && strings.Join(line, " ") != strings.Join(writeFlags[0], " ") {
		t.Errorf("the kubelet runs as\n  %s\n--write-flags printed\n  %s", strings.Join(line, " "), strings.Join(writeFlags[0], " "))
	}

	got.allocMemory, got.allocCPU = quantity(t, n.Status.Allocatable["memory"]), quantity(t, n.Status.Allocatable["cpu"])
	got.capMemory, got.capCPU = quantity(t, n.Status.Capacity["memory"]), quantity(t, n.Status.Capacity["cpu"])
	wantMemory, wantCPU := big.NewRat(limitMemory-evictionHard, 1), big.NewRat(limitMilliCPU, 1000)
	if got.allocMemory.Cmp(wantMemory) != 0 || got.allocCPU.Cmp(wantCPU) != 0 {
		t.Errorf("the Node's allocatable is memory %s, cpu %s; want %s (the limit %d less the eviction threshold %d) and %s",
			n.Status.Allocatable["memory"], n.Status.Allocatable["cpu"], wantMemory.RatString(), int64(limitMemory), int64(evictionHard), wantCPU.FloatString(3))
	}
	if got.allocMemory.Cmp(big.NewRat(limitMemory, 1)) > 0 || got.allocCPU.Cmp(big.NewRat(limitMilliCPU, 1000)) > 0 {
		t.Errorf("the Node's allocatable (memory %s, cpu %s) exceeds the container's limits", n.Status.Allocatable["memory"], n.Status.Allocatable["cpu"])
	}

	// One line per limit, with where it was read and the allocatable
	// nodeinit predicts, which is the kubelet's.
	for _, r := range []struct {
		resource, file string
		alloc          *big.Rat
		scale          int64
	}{
		{"memory", "memory.limit_in_bytes", got.allocMemory, 1},
		{"cpu", "cpu.cfs_quota_us", got.allocCPU, 1000},
		{"pid", "pids.max", nil, 1},
	} {
		if limitsV2() {
			r.file = map[string]string{"memory": "memory.max", "cpu": "cpu.max", "pid": "pids.max"}[r.resource]
		}
		l := k.waitLog(0, 0, `"Sizing the node to its container's limit"`, fmt.Sprintf("resource=%q", r.resource),
			fmt.Sprintf(`limitFrom="%s of cgroup %s"`, r.file, limitedAt(r.resource)))
		m := regexp.MustCompile(` allocatable=(\d+)`).FindStringSubmatch(l.text)
		if m == nil {
			t.Errorf("no allocatable in %s", l.text)
			continue
		}
		if r.alloc != nil {
			if predicted, _ := new(big.Rat).SetString(m[1] + "/" + fmt.Sprint(r.scale)); predicted.Cmp(r.alloc) != 0 {
				t.Errorf("nodeinit's log predicts allocatable %s %s/%d; the Node has %s", r.resource, m[1], r.scale, r.alloc.RatString())
			}
		}
	}
	k.waitLog(0, 0, `"Adding --system-reserved to the executor`, fmt.Sprintf("systemReserved=%q", got.reserved))

	// The kubepods cgroup: below cg in every hierarchy the kubelet uses,
	// so the container's limits hold above it, and its own memory and
	// pids limits (what the kubelet enforces as node allocatable) within
	// the container's. Its CPU has shares only; the quota above holds.
	kubepods := cg + "/kubepods"
	l, err := cgroups.ReadLayout("/")
	must(t, err)
	own := map[string]int64{}
	for _, h := range cgroups.KubeletHierarchies(l) {
		dir, ok := h.Dir("/", kubepods)
		if !ok || !dirExists(dir) {
			t.Errorf("no kubepods cgroup in the %s hierarchy below %s", h.Name(), cg)
			continue
		}
		for _, f := range []string{"memory.limit_in_bytes", "memory.max", "pids.max"} {
			if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
				var v int64
				if _, err := fmt.Sscan(string(b), &v); err != nil {
					t.Errorf("%s of the kubepods cgroup: %q", f, b)
				}
				own[strings.Split(f, ".")[0]] = v
			}
		}
	}
	t.Logf("the kubepods cgroup %s: memory limit %d, pids.max %d", kubepods, own["memory"], own["pids"])
	if v, ok := own["memory"]; !ok || v > limitMemory {
		t.Errorf("the kubepods cgroup's memory limit is %d (set: %v); want one within the container's %d", v, ok, int64(limitMemory))
	}
	if v, ok := own["pids"]; !ok || v > limitPids {
		t.Errorf("the kubepods cgroup's pids.max is %d (set: %v); want one within the container's %d", v, ok, int64(limitPids))
	}

	k.checkTooBigPodPending()
	return got
}

// limitsV2 says the host's limits are in the unified hierarchy.
func limitsV2() bool {
	l, err := cgroups.ReadLayout("/")
	return err == nil && l.Mode() == cgroups.V2
}

// bigPod asks for more memory than the container has.
const bigPod = `apiVersion: v1
kind: Pod
metadata: {name: too-big, namespace: default}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: sleep
    image: ` + busyboxImage + `
    imagePullPolicy: Never
    command: [sleep, "1000000"]
    resources: {requests: {memory: 4Gi}}
`

// checkTooBigPodPending creates bigPod and waits for the scheduler to
// call it unschedulable for want of memory; it stays Pending. The first
// verdict can name another reason (a taint the new Node has for a moment):
// the scheduler tries again when the Node changes, so the wait is for the
// memory verdict.
func (k *kubeNode) checkTooBigPodPending() {
	t := k.t
	t.Helper()
	k.create("/api/v1/namespaces/default/pods", "too-big", bigPod)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	unschedulable := func(ps []pod) bool {
		for _, p := range ps {
			for _, c := range p.Status.Conditions {
				if c.Type == "PodScheduled" && c.Status == "False" && c.Reason == "Unschedulable" && strings.Contains(c.Message, "Insufficient memory") {
					return true
				}
			}
		}
		return false
	}
	items, err := watchUntil(ctx, k.c.api, "/api/v1/namespaces/default/pods", url.Values{"fieldSelector": {"metadata.name=too-big"}},
		func(p pod) string { return p.Metadata.Name }, unschedulable)
	if err != nil || !unschedulable(items) {
		t.Fatalf("the pod asking for 4Gi was not found unschedulable for insufficient memory (error %v): %s", err, podSummary(items))
	}
	p := items[0]
	var msg string
	for _, c := range p.Status.Conditions {
		if c.Type == "PodScheduled" {
			msg = c.Message
		}
	}
	if p.Status.Phase != "Pending" || p.Spec.NodeName != "" || !strings.Contains(msg, "Insufficient memory") {
		t.Errorf("the pod asking for 4Gi is %s on %q: %q; want Pending, unscheduled, for insufficient memory", p.Status.Phase, p.Spec.NodeName, msg)
	}
	t.Logf("a pod requesting 4Gi: %s, PodScheduled=False Unschedulable: %s", p.Status.Phase, msg)
}

// TestNodeSizedToItsCgroupParent: --cgroup-parent names a cgroup limited
// to 3 GiB, one CPU and 4096 processes. nodeinit hands it to the real
// kubelet with --system-reserved, and the Node's allocatable is what the
// container has; with --size-node-to-container=false the Node reports
// the host, as before.
func TestNodeSizedToItsCgroupParent(t *testing.T) {
	c := getCluster(t)
	cg := fmt.Sprintf("/nodeinit-k8s-size-%d", os.Getpid())
	var before sizedNode
	t.Run("off", func(t *testing.T) {
		makeCgroup(t, cg)
		limitCgroup(t, cg, limitMemory, limitMilliCPU, limitPids)
		flags := []string{"--cgroup-parent=" + cg, "--require-cgroup", "--size-node-to-container=false"}
		k := c.startNode(t, nodeSpec{flags: flags})
		n, _ := k.waitReady(90 * time.Second)
		if line := strings.Join(cmdline(k.children()["kubelet"]), " "); strings.Contains(line, "--system-reserved") {
			t.Errorf("--size-node-to-container=false, and the kubelet runs as %s", line)
		}
		before.allocMemory, before.allocCPU = quantity(t, n.Status.Allocatable["memory"]), quantity(t, n.Status.Allocatable["cpu"])
		// What the issue measured: the host's size, beyond the container.
		if before.allocMemory.Cmp(big.NewRat(limitMemory, 1)) <= 0 {
			t.Errorf("without sizing the Node's allocatable memory is %s, within the limit: the test's cgroup does not show the problem", n.Status.Allocatable["memory"])
		}
		t.Logf("not sized: the Node's allocatable is memory %s, cpu %s in a %d-byte, %dm cgroup", n.Status.Allocatable["memory"],
			n.Status.Allocatable["cpu"], int64(limitMemory), int64(limitMilliCPU))
		t.Logf("TERM: %v", k.stopAndCheck(90*time.Second))
	})
	t.Run("sized", func(t *testing.T) { checkSizedToCgroupParent(t, c, cg, "") })
}

// checkSizedToCgroupParent runs a node with the kubelet and kube-proxy in
// bin (the suite's when empty) in cg, limited as TestNodeSizedToItsCgroupParent
// says: the kubelet runs with the --system-reserved --write-flags prints,
// and the Node's allocatable is what the container has.
func checkSizedToCgroupParent(t *testing.T, c *cluster, cg, bin string) {
	makeCgroup(t, cg)
	limitCgroup(t, cg, limitMemory, limitMilliCPU, limitPids)
	flags := []string{"--cgroup-parent=" + cg, "--require-cgroup"}
	k := c.startNode(t, nodeSpec{flags: flags, bin: bin})
	want := k.writeFlags(t, c.nodeinitArgsFor(k.bin, k.dir, "iptables"), append([]string{"--log-dir=" + filepath.Join(k.dir, "logs")}, flags...)...)
	got := k.checkSizedNode(cg, func(string) string { return cg }, want)
	t.Logf("sized: --system-reserved=%s; the Node's capacity memory %s cpu %s, allocatable memory %s (%s bytes) cpu %s",
		got.reserved, got.capMemory.RatString(), got.capCPU.RatString(), k.getNode().Status.Allocatable["memory"],
		got.allocMemory.RatString(), got.allocCPU.FloatString(3))
	checkCgroups(t, "the kubelet", k.children()["kubelet"], cg, false)
	t.Logf("TERM: %v", k.stopAndCheck(90*time.Second))
}

// TestNodeSizedToItsMesosContainer: a Mesos containerizer's container
// /<root>/<id>, the memory and pids limits on the container's cgroup and
// the CPU quota on its parent, /<root>, as an agent's --cgroups_root may
// carry one: nodeinit finds all three, and the Node fits.
func TestNodeSizedToItsMesosContainer(t *testing.T) {
	c := getCluster(t)
	root, id := fmt.Sprintf("mesos-k8s-size-%d", os.Getpid()), "7c1d2e3f-node"
	cg := "/" + root + "/" + id
	makeCgroup(t, "/"+root)
	makeCgroup(t, cg)
	limitCgroup(t, "/"+root, 0, limitMilliCPU, 0)
	limitCgroup(t, cg, limitMemory, 0, limitPids)
	flags := []string{"--mesos-cgroup-prefix=" + root, "--require-cgroup"}
	k := c.startNode(t, nodeSpec{flags: flags, env: mesosTask(id)})
	want := k.writeFlagsEnv(t, mesosTask(id), c.nodeinitArgs(k.dir, "iptables"), append([]string{"--log-dir=" + filepath.Join(k.dir, "logs")}, flags...)...)
	// The CPU limit is the parent's, the others the container's.
	got := k.checkSizedNode(cg, func(resource string) string {
		if resource == "cpu" {
			return "/" + root
		}
		return cg
	}, want)
	t.Logf("Mesos container: --system-reserved=%s; allocatable memory %s bytes, cpu %s", got.reserved, got.allocMemory.RatString(), got.allocCPU.FloatString(3))
	t.Logf("TERM: %v", k.stopAndCheck(90*time.Second))
}

// TestNodeImageInPodmanSizedToItsCgroup runs the node image in podman as
// docs/limited-container.md says. A plain `podman run --memory --cpus
// --pids-limit` leaves the pods outside the container: the kubelet gets no
// cgroup root (the host's containerd makes the pods' cgroups under the
// host's /kubepods), nodeinit finds no limit on the kubelet's default root
// and adds nothing, and the Node reports the host. With the limits on a
// cgroup that both podman's --cgroup-parent and nodeinit's name, nodeinit
// moves up into it, the kubelet's pods are created below it, and the Node
// is sized to it.
func TestNodeImageInPodmanSizedToItsCgroup(t *testing.T) {
	c := getCluster(t)
	c.buildNodeImage(t)
	t.Run("plain podman run --memory", func(t *testing.T) {
		k := c.runNodeImage(t, imageRun{podman: []string{"--memory=3g", "--cpus=1", "--pids-limit=4096"}})
		n, _ := k.waitReady(90 * time.Second)
		line := strings.Join(cmdline(k.children()["kubelet"]), " ")
		if strings.Contains(line, "--cgroup-root") || strings.Contains(line, "--system-reserved") {
			t.Errorf("the kubelet runs as %s; nodeinit has no cgroup to give it", line)
		}
		k.waitLog(0, 0, "limit no memory, CPU or pids: the node keeps the machine's size")
		alloc := quantity(t, n.Status.Allocatable["memory"])
		if alloc.Cmp(big.NewRat(limitMemory, 1)) <= 0 {
			t.Errorf("the Node's allocatable memory %s is within the container's 3g", n.Status.Allocatable["memory"])
		}
		own := cgroupOf(t, k.pid(), "memory")
		static := k.waitPods("metadata.name=static-sleeper-"+nodeName, 1, 60*time.Second)
		pod := cgroupOf(t, containerPid(t, c, static[0]), "memory")
		if strings.HasPrefix(pod, own+"/") {
			t.Errorf("the static pod is in %s, inside the container's %s", pod, own)
		}
		t.Logf("plain podman run --memory=3g --cpus=1: the container is in memory cgroup %s, its static pod in %s; the Node's allocatable is memory %s, cpu %s",
			own, pod, n.Status.Allocatable["memory"], n.Status.Allocatable["cpu"])
		t.Logf("podman stop: %v", k.stopAndCheck(90*time.Second))
	})
	t.Run("the limits on the cgroup both name", func(t *testing.T) {
		cg := fmt.Sprintf("/nodeinit-k8s-podman-%d", os.Getpid())
		makeCgroup(t, cg)
		limitCgroup(t, cg, limitMemory, limitMilliCPU, limitPids)
		k := c.runNodeImage(t, imageRun{podman: []string{"--cgroupns=host", "--cgroup-parent=" + cg},
			nodeinit: []string{"--cgroup-parent=" + cg, "--require-cgroup"}})
		got := k.checkSizedNode(cg, func(string) string { return cg }, nil)
		static := k.waitPods("metadata.name=static-sleeper-"+nodeName, 1, 60*time.Second)
		checkCgroups(t, "the static pod's container", containerPid(t, c, static[0]), cg+"/kubepods/", true)
		t.Logf("in podman with --cgroup-parent=%s: --system-reserved=%s; the Node's allocatable memory %s bytes, cpu %s",
			cg, got.reserved, got.allocMemory.RatString(), got.allocCPU.FloatString(3))
		k.checkRestarts(3, cg, got, static[0])
		t.Logf("podman stop: %v", k.stopAndCheck(90*time.Second))
	})
}

// checkRestarts restarts the node container n times (podman restart:
// TERM, then a new nodeinit in the same container): each time the node comes
// back sized as before, with the same machineID (its own, mounted once,
// never on the host), the kubelet a new process with the same
// --system-reserved, the Node Ready with a heartbeat from the new kubelet,
// the static pod Running (the host's containerd kept it), nodeinit in cg
// and the kubelet's pods below it, and no cgroup below cg but kubepods
// and what podman makes, the host's mounts under /var/lib/kubelet as
// before. The host is checked for leftovers when the test
// ends.
func (k *kubeNode) checkRestarts(n int, cg string, want sizedNode, static pod) {
	t := k.t
	t.Helper()
	machineID := k.checkOwnMachineID(k.getNode(), identityUninitialized)
	// The host's mounts of the node (its pods' volumes under the shared
	// /var/lib/kubelet) are the same after each restart: none left behind
	// twice, none lost.
	mounts, err := mountsUnder([]string{"/var/lib/kubelet"})
	must(t, err)
	for i := 1; i <= n; i++ {
		before := k.children()["kubelet"]
		nd, ready := k.restart(i)
		kubelet := k.children()["kubelet"]
		if kubelet == 0 || kubelet == before {
			t.Errorf("restart %d: the kubelet is pid %d, was %d", i, kubelet, before)
		}
		var reserved string
		for _, a := range cmdline(kubelet) {
			if v, ok := strings.CutPrefix(a, "--system-reserved="); ok {
				reserved = v
			}
		}
		if reserved != want.reserved {
			t.Errorf("restart %d: the kubelet has --system-reserved=%q, before the restart %q", i, reserved, want.reserved)
		}
		if id := k.checkOwnMachineID(nd, identityUninitialized); id != machineID {
			t.Errorf("restart %d: the Node's machineID is %q, was %q", i, id, machineID)
		}
		if m, c := quantity(t, nd.Status.Allocatable["memory"]), quantity(t, nd.Status.Allocatable["cpu"]); m.Cmp(want.allocMemory) != 0 || c.Cmp(want.allocCPU) != 0 {
			t.Errorf("restart %d: the Node's allocatable is memory %s, cpu %s; before the restart %s, %s", i,
				nd.Status.Allocatable["memory"], nd.Status.Allocatable["cpu"], want.allocMemory.RatString(), want.allocCPU.FloatString(3))
		}
		checkCgroups(t, "nodeinit", k.pid(), cg, false)
		pods := k.waitPods("metadata.name="+static.Metadata.Name, 1, 60*time.Second)
		if pods[0].Metadata.UID != static.Metadata.UID {
			t.Errorf("restart %d: the static pod's mirror is %s, was %s", i, pods[0].Metadata.UID, static.Metadata.UID)
		}
		checkCgroups(t, "the static pod's container", containerPid(t, k.c, pods[0]), cg+"/kubepods/", true)
		l, err := cgroups.ReadLayout("/")
		must(t, err)
		for _, h := range cgroups.KubeletHierarchies(l) {
			dir, _ := h.Dir("/", cg)
			entries, err := os.ReadDir(dir)
			must(t, err)
			for _, e := range entries {
				// podman's: the container's libpod-<id>, and conmon's.
				if e.IsDir() && e.Name() != "kubepods" && e.Name() != "conmon" && !strings.HasPrefix(e.Name(), "libpod-") {
					t.Errorf("restart %d: a cgroup %s/%s in the %s hierarchy", i, cg, e.Name(), h.Name())
				}
			}
		}
		if now, err := mountsUnder([]string{"/var/lib/kubelet"}); err != nil || strings.Join(now, "\n") != strings.Join(mounts, "\n") {
			t.Errorf("restart %d: the host's mounts under /var/lib/kubelet are\n%s\nwere\n%s (%v)", i, strings.Join(now, "\n"), strings.Join(mounts, "\n"), err)
		}
		t.Logf("restart %d: the Node Ready from the new kubelet %v after podman restart began; sized as before, machineID %q, the static pod Running, %d mounts under /var/lib/kubelet as before",
			i, ready.Round(10*time.Millisecond), machineID, len(mounts))
	}
}

// restart restarts the node container (podman restart: TERM, then a new
// nodeinit in the same container) and waits for the Node to be Ready from
// the new kubelet: it answers its healthz (the one before is gone), and the
// Node's heartbeat is from after it started. It returns the Node and how
// long after the restart began it was Ready.
func (k *kubeNode) restart(i int) (node, time.Duration) {
	t := k.t
	t.Helper()
	began := time.Now()
	if _, err := k.c.podman.run(2*time.Minute, "restart", "--time", "60", nodeContainer); err != nil {
		t.Fatalf("restart %d: %v", i, err)
	}
	// This run's log begins with its "Starting nodeinit"; the TERM
	// that ended the one before comes earlier.
	k.since = k.waitLog(60*time.Second, timeOfDay(began), `"Starting nodeinit"`).at
	k.waitLog(60*time.Second, k.since, `"Started task"`, `task="executor"`)
	y, mo, d := began.UTC().Date()
	started := time.Date(y, mo, d, 0, 0, 0, 0, time.UTC).Add(k.since)
	if err := waitHTTP(http.DefaultClient, "http://127.0.0.1:10248/healthz", nil, 60*time.Second); err != nil {
		k.dumpLogs()
		t.Fatalf("restart %d: the new kubelet: %v", i, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	items, err := watchUntil(ctx, k.c.api, "/api/v1/nodes", url.Values{"fieldSelector": {"metadata.name=" + nodeName}},
		func(n node) string { return n.Metadata.Name }, func(ns []node) bool {
			return len(ns) == 1 && ns[0].ready() && !ns[0].condition("Ready").LastHeartbeatTime.Before(started.Truncate(time.Second))
		})
	cancel()
	if err != nil {
		k.dumpLogs()
		t.Fatalf("restart %d: the Node did not report Ready from the new kubelet: %v", i, err)
	}
	return items[0], time.Since(began)
}

// timeOfDay is t as nodeinitLines counts: the time since midnight, UTC.
func timeOfDay(t time.Time) time.Duration {
	t = t.UTC()
	return time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute + time.Duration(t.Second())*time.Second +
		time.Duration(t.Nanosecond())
}

// cgroupOf is a process's cgroup in the v1 hierarchy of controller, or
// the unified one.
func cgroupOf(t *testing.T, pid int, controller string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	must(t, err)
	unified := ""
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[1] == "" {
			unified = f[2]
		}
		for _, c := range strings.Split(f[1], ",") {
			if c == controller {
				return f[2]
			}
		}
	}
	return unified
}

// writeFlagsEnv is writeFlags with more environment (a Mesos agent's).
func (k *kubeNode) writeFlagsEnv(t *testing.T, env, args []string, extra ...string) [][]string {
	t.Helper()
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		t.Setenv(name, value)
	}
	return k.writeFlags(t, args, extra...)
}
