package cluster

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// NodeRunArgs is the podman run line of a node, after `podman run`: what a
// user types to add a node of the image to a cluster (docs/cluster.md).
//   - --privileged, the node's own network namespace on the cluster's
//     network with its own address and hostname (the Node's name);
//   - a volume on /var: containerd's root (overlayfs cannot stack on the
//     container's overlay), the kubelet's directory, the node's
//     machine-id; tmpfs on /run and /tmp, as kind has them;
//   - its /etc/kubernetes: kubeconfigs, the kubelet's configuration, the CA
//     (and for the systemd flavor kube-proxy's flags);
//   - on a cgroup v1 host the host's cgroup namespace, the container below
//     a cgroup of the node's own, which its kubelet's cgroupRoot names, and
//     the host's hierarchies (nodeCgroupMounts); on a v2 host a private
//     cgroup namespace (kind's way), where nodeinit moves itself to /init,
//     systemd to /init.scope, and the kubelet has the namespace's root;
//   - for the nodeinit flavor, nodeinit's flags after the image:
//     kube-proxy's cluster CIDR, and the host's inotify limits raised to
//     what a node needs (several kubelets and containerds exhaust the
//     default 128 instances). The systemd flavor gets kube-proxy's flags
//     in its /etc/kubernetes (kubeProxyEnv), and Create raises the limits
//     itself. Delete puts them back.
func (c *Cluster) NodeRunArgs(i int) []string {
	n := c.NodeNames[i]
	args := []string{"-d", "--name", n, "--hostname", n, "--network", c.Name, "--ip", c.NodeIPs[i],
		"--privileged", "--stop-timeout", strconv.Itoa(stopTimeout),
		"--tmpfs", "/run", "--tmpfs", "/tmp", "-v", n + "-var:/var", "-v", c.nodeDir(n) + ":/etc/kubernetes:ro"}
	if c.Flavor == FlavorSystemd {
		args = append(args, "-e", "container=podman")
	}
	if cgroupV1() {
		args = append(append(args, "--cgroupns=host", "--cgroup-parent="+c.nodeCgroup(n)), c.nodeCgroupMounts()...)
	} else {
		args = append(args, "--cgroupns=private")
	}
	if _, err := os.Stat("/lib/modules"); err == nil {
		args = append(args, "-v", "/lib/modules:/lib/modules:ro")
	}
	if c.Flavor == FlavorSystemd {
		return append(args, SystemdNodeImage)
	}
	return append(args, NodeImage, "--proxy-arg=--cluster-cidr="+PodCIDR, "--raise-inotify-limits")
}

// nodeCgroupMounts are a node's cgroup mounts on a cgroup v1 host. A
// nodeinit node has the host's /sys/fs/cgroup. systemd as PID 1 must not
// have it: it remounts that tmpfs read-only, for the host too, and mounts
// the v1 controllers the host has not mounted, for the whole machine
// (SystemdCgroupArgs). Nor podman's own, which binds the container's
// cgroup as each hierarchy's root: the pods' cgroups are the node's
// (below its cgroup, beside the container's), and runc in the node looks
// for them from the container's cgroup, where they are not. A systemd
// node has a tmpfs of its own on /sys/fs/cgroup with each of the host's
// hierarchies mounted in it, whole: its containerd and kubelet find the
// pods' cgroups at the paths /proc/PID/cgroup names, as a nodeinit
// node's do, and systemd finds its own cgroup in every hierarchy and
// stays below it.
func (c *Cluster) nodeCgroupMounts() []string {
	if c.Flavor != FlavorSystemd {
		return []string{"-v", "/sys/fs/cgroup:/sys/fs/cgroup"}
	}
	args := []string{"--tmpfs", "/sys/fs/cgroup"}
	for _, h := range hostCgroupHierarchies() {
		args = append(args, "-v", h+":"+h)
	}
	return append(args, SystemdCgroupArgs()...)
}

// concurrentLoads is how many nodes load their images at once. Each load
// unpacks the images into the node's snapshotter, which costs CPU and
// disk: twenty nodes loading at once on 2 cores did not finish within
// the bound of one load.
const concurrentLoads = 4

// startNode runs the i-th node's container, waits for its containerd and
// loads the images into it, once it holds a place in loads.
func (c *Cluster) startNode(i int, loads chan struct{}) error {
	n := c.NodeNames[i]
	if _, err := c.podman.run(2*time.Minute, append([]string{"run"}, c.NodeRunArgs(i)...)...); err != nil {
		return err
	}
	if err := c.waitContainerd(n, 2*time.Minute); err != nil {
		return err
	}
	loads <- struct{}{}
	defer func() { <-loads }()
	return c.loadImages(n)
}

// waitContainerd waits until the node's containerd answers ctr.
func (c *Cluster) waitContainerd(node string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		_, err := c.podman.run(30*time.Second, "exec", node, "ctr", "version")
		if err == nil {
			return nil
		}
		if !c.running(node) {
			return fmt.Errorf("node %s ended before its containerd answered:\n%s", node, c.containerLog(node, 30))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s's containerd did not answer within %v: %v\n%s", node, timeout, err, c.containerLog(node, 30))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// running is whether a container runs.
func (c *Cluster) running(name string) bool {
	out, _ := c.podman.run(30*time.Second, "inspect", "--format", "{{.State.Running}}", name)
	return strings.TrimSpace(out) == "true"
}

// StopNode drains a node (its pods but the DaemonSets' evicted, to be
// rescheduled elsewhere) and stops its container; it returns how long
// each took.
func (c *Cluster) StopNode(node string) (drain, stop time.Duration, err error) {
	if !slices.Contains(c.NodeNames, node) {
		return 0, 0, fmt.Errorf("no node %s in cluster %s", node, c.Name)
	}
	t := time.Now()
	if err := c.kubectl(5*time.Minute, "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=240s"); err != nil {
		return 0, 0, err
	}
	drain = time.Since(t)
	t = time.Now()
	if _, err := c.podman.run((stopTimeout+30)*time.Second, "stop", node); err != nil {
		return drain, 0, err
	}
	return drain, time.Since(t), nil
}

// StartNode starts a stopped node's container again, waits until its
// Node is Ready once more and makes it schedulable; it returns how long
// the node took to be Ready.
func (c *Cluster) StartNode(node string) (time.Duration, error) {
	if !slices.Contains(c.NodeNames, node) {
		return 0, fmt.Errorf("no node %s in cluster %s", node, c.Name)
	}
	t := time.Now()
	if _, err := c.podman.run(2*time.Minute, "start", node); err != nil {
		return 0, err
	}
	if err := c.waitContainerd(node, 2*time.Minute); err != nil {
		return 0, err
	}
	// The Node kept its Ready condition while its kubelet was away (for
	// the controller-manager's grace period): Ready counts once the new
	// kubelet has posted it.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		out, err := c.Kubectl(30*time.Second, "get", "node", node, "-o",
			`jsonpath={range .status.conditions[?(@.type=="Ready")]}{.status} {.lastHeartbeatTime}{end}`)
		if f := strings.Fields(out); err == nil && len(f) == 2 && f[0] == "True" {
			if hb, err := time.Parse(time.RFC3339, f[1]); err == nil && hb.After(t.Add(-time.Second)) {
				break
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("node %s was not Ready again within 3 minutes of its start (%q)\n%s", node, out, c.containerLog(node, 30))
		}
		time.Sleep(500 * time.Millisecond)
	}
	ready := time.Since(t)
	return ready, c.kubectl(time.Minute, "uncordon", node)
}
