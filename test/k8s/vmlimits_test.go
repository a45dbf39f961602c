//go:build k8s

package k8s

import (
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The guest's slices for a limited node, as docs/limited-container.md
// says for a systemd host: the node's slice with the memory, CPU quota and
// tasks limits, below a parent slice that holds the node's CPUs (a cpuset
// on an ancestor, not on the kubelet's cgroup root). The quota (1.5 CPUs)
// is above the cpuset (one CPU), so the CPU limit that holds is the
// ancestor's cpuset.
const (
	guestNodesSlice = "nodes.slice"
	guestNodeSlice  = "nodes-node1.slice"
	guestNodeCgroup = "/" + guestNodesSlice + "/" + guestNodeSlice
	guestNodeCPUs   = "1"
	guestNodeQuota  = "150%"
)

// checkGuestLimitedNode runs the node image in the guest's podman below a
// slice of the guest's systemd that carries the node's limits, named to
// podman (--cgroup-parent, so the container starts below it) and to
// nodeinit (which joins it and hands it to the kubelet as its cgroup root,
// in the systemd driver's naming): the kubelet's pods run below it; the
// Node's allocatable is the slice's memory less the eviction threshold and
// the ancestor's one CPU; the kubelet's kubepods slice has memory and pids
// limits within the slice's; a pod that asks for more memory than the
// slice has stays Pending.
func (c *cluster) checkGuestLimitedNode(t *testing.T, v *vm) {
	v.ssh(fmt.Sprintf(`set -e
printf '%%s\n' '[Slice]' 'AllowedCPUs=%s' > /run/systemd/system/%s
printf '%%s\n' '[Slice]' 'MemoryMax=%d' 'CPUQuota=%s' 'TasksMax=%d' > /run/systemd/system/%s
systemctl daemon-reload
systemctl start %[6]s`, guestNodeCPUs, guestNodesSlice, int64(limitMemory), guestNodeQuota, int64(limitPids), guestNodeSlice))
	t.Cleanup(func() {
		if !v.qemu.running() {
			return
		}
		// After the node's cleanup (registered later, run first).
		if out, err := v.sshTimeout(2*time.Minute, fmt.Sprintf("systemctl stop %[1]s %[2]s; rm -f /run/systemd/system/%[1]s /run/systemd/system/%[2]s; systemctl daemon-reload",
			guestNodeSlice, guestNodesSlice)); err != nil {
			t.Errorf("removing the node's slices: %s %v", out, err)
		}
	})
	k := c.runGuestNodeIn(t, v, "podman", vmKubeletConfig, staticPod, []string{"--cgroup-parent=" + guestNodeSlice},
		"--cgroup-parent="+guestNodeCgroup, "--require-cgroup")
	n, took := k.waitGuestReady(5 * time.Minute)
	t.Logf("Node Ready %v after podman run", took.Round(100*time.Millisecond))

	// The kubelet's cgroup root, in the systemd driver's naming, and the
	// reservation that sizes the Node to the slice.
	kubelet := strings.TrimSpace(v.ssh("pgrep -x kubelet"))
	line := strings.ReplaceAll(v.ssh("cat /proc/"+kubelet+"/cmdline"), "\x00", " ")
	if !strings.Contains(line, "--cgroup-root=/nodes/node1 ") {
		t.Errorf("the kubelet runs as %q, without --cgroup-root=/nodes/node1 (the systemd driver's name of %s)", line, guestNodeCgroup)
	}
	var reserved string
	if m := regexp.MustCompile(`--system-reserved=(\S+)`).FindStringSubmatch(line); m != nil {
		reserved = m[1]
	} else {
		t.Errorf("the kubelet runs as %q, without --system-reserved", line)
	}
	for _, r := range []struct{ resource, from string }{
		{"memory", "memory.max of cgroup " + guestNodeCgroup},
		{"cpu", "cpuset.cpus.effective of cgroup "},
		{"pid", "pids.max of cgroup " + guestNodeCgroup},
	} {
		l := k.waitLog(0, 0, `"Sizing the node to its container's limit"`, fmt.Sprintf("resource=%q", r.resource), `limitFrom="`+r.from)
		t.Logf("nodeinit: %s", l.text[strings.Index(l.text, "resource="):])
	}
	allocMemory, allocCPU := quantity(t, n.Status.Allocatable["memory"]), quantity(t, n.Status.Allocatable["cpu"])
	if want := big.NewRat(limitMemory-evictionHard, 1); allocMemory.Cmp(want) != 0 {
		t.Errorf("the Node's allocatable memory is %s; want the slice's %d less the eviction threshold %d", n.Status.Allocatable["memory"], int64(limitMemory), int64(evictionHard))
	}
	if allocCPU.Cmp(big.NewRat(1, 1)) != 0 {
		t.Errorf("the Node's allocatable cpu is %s; want 1, the parent slice's cpuset", n.Status.Allocatable["cpu"])
	}

	// Where everything runs, and the kubepods slice's own limits.
	kubepods := guestNodeCgroup + "/nodes-node1-kubepods.slice"
	for name, pid := range map[string]string{"nodeinit": strings.TrimSpace(v.ssh("podman inspect --format '{{.State.Pid}}' " + guestNodeName)), "the kubelet": kubelet} {
		if in := strings.TrimSpace(v.ssh("cat /proc/" + pid + "/cgroup")); !strings.HasPrefix(in, "0::"+guestNodeCgroup+"/") || strings.HasPrefix(in, "0::"+kubepods) {
			t.Errorf("%s (pid %s in the guest) is in %q; want a leaf of %s", name, pid, in, guestNodeCgroup)
		}
	}
	k.waitPods("metadata.name=static-sleeper-"+nodeName, 1, 5*time.Minute)
	pid, podCgroup := guestStaticPodCgroup(t, v, guestCrictl)
	if !strings.HasPrefix(podCgroup, kubepods+"/") {
		t.Errorf("the static pod's container (pid %s in the guest) is in %s; want below %s", pid, podCgroup, kubepods)
	}
	files := strings.Fields(v.ssh(fmt.Sprintf("cd /sys/fs/cgroup; cat .%[1]s/memory.max .%[1]s/cpu.max .%[1]s/pids.max ./%[2]s/cpuset.cpus.effective .%[3]s/memory.max .%[3]s/pids.max",
		guestNodeCgroup, guestNodesSlice, kubepods)))
	if len(files) != 7 {
		t.Fatalf("the slices' limit files: %q", files)
	}
	t.Logf("%s: memory.max %s, cpu.max %s %s, pids.max %s; /%s cpuset.cpus.effective %s; %s: memory.max %s, pids.max %s; the static pod's container in %s",
		guestNodeCgroup, files[0], files[1], files[2], files[3], guestNodesSlice, files[4], kubepods, files[5], files[6], podCgroup)
	for i, limit := range map[int]int64{5: limitMemory, 6: limitPids} {
		if v, err := strconv.ParseInt(files[i], 10, 64); err != nil || v > limit {
			t.Errorf("the kubepods slice's limit %s is %s; want one within the slice's %d", []string{5: "memory.max", 6: "pids.max"}[i], files[i], limit)
		}
	}
	t.Logf("the Node: capacity memory %s cpu %s, allocatable memory %s cpu %s; the kubelet's --system-reserved=%s",
		n.Status.Capacity["memory"], n.Status.Capacity["cpu"], n.Status.Allocatable["memory"], n.Status.Allocatable["cpu"], reserved)
	k.checkTooBigPodPending()
	s := k.stopAndCheck(90 * time.Second)
	t.Logf("podman stop: %v", s)
	if s.code != 0 {
		t.Errorf("the node container exited %d; want 0", s.code)
	}
}
