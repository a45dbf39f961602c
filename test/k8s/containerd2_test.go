//go:build k8s

package k8s

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// containerd2Version is the containerd 2 that build.sh builds beside the
// Kubernetes binaries, in containerd-<version>/.
const containerd2Version = "v2.4.2"

// containerd2Config is containerd 2's configuration (version 4, containerd
// 2.4's layout), with the settings containerdConfig explains. runc's
// SystemdCgroup = false is the cgroup driver it reports to the kubelet over
// the CRI (RuntimeConfig), which containerd 1.6 does not answer. Version 4
// has the sockets' addresses in the server plugins' sections (a top-level
// [grpc] is not read: containerd would serve on /run/containerd). Its NRI
// plugin is off (it would make /var/run/nri), and so are the snapshotters
// not used.
const containerd2Config = `version = 4
root = "%[1]s/root"
state = "%[1]s/state"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.nri.v1.nri", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.erofs", "io.containerd.tracing.processor.v1.otlp"]

[plugins.'io.containerd.server.v1.grpc']
  address = "%[1]s/containerd.sock"

[plugins.'io.containerd.server.v1.ttrpc']
  address = "%[1]s/containerd.sock.ttrpc"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "%[2]s"

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "%[1]s/runc"
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "%[1]s/net.d"

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
`

// TestNodeWithContainerd2TakesItsCgroupDriver: containerd 2 reports its
// cgroup driver (cgroupfs) over the CRI and the kubelet takes it over its
// own --cgroup-driver=systemd, which on this host, without systemd or a
// system bus, could not work. nodeinit, which sees containerd's
// configuration at /etc/containerd/config.toml (bound over the host's in
// the node's mount namespace, as a node container has the host's mounted
// in), follows the same rule: with --graceful-node-shutdown it does not
// refuse for want of the system bus a systemd driver needs, it hands the
// kubelet its cgroup root in cgroupfs form, and it warns about no driver.
// The kubelet logs the driver it took; the Node is Ready and the static
// pod runs below the cgroup root nodeinit handed over.
func TestNodeWithContainerd2TakesItsCgroupDriver(t *testing.T) {
	c := getCluster(t)
	ctd, bin := startContainerd2(t, c, "containerd2")
	version, err := run(10*time.Second, filepath.Join(bin, "containerd"), "--version")
	must(t, err)
	t.Logf("runtime: %s", strings.TrimSpace(version))
	for _, a := range c.archives {
		must(t, ctd.importImage(a))
	}

	cg := fmt.Sprintf("/nodeinit-k8s-ctd2-%d", os.Getpid())
	makeCgroup(t, cg)
	conf := filepath.Join(ctd.dir, "config.toml")
	// In the node's namespace only: / is made private there first, so the
	// bind cannot propagate to the host whatever the host's / is.
	prefix := []string{"/bin/sh", "-c", `mount --make-private / && mount --bind "$0" /etc/containerd/config.toml && exec "$@"`, conf}
	k := c.startNode(t, nodeSpec{runtime: ctd, prefix: prefix, kubeletConfig: kubeletShutdown, kubeletArgs: []string{"--cgroup-driver=systemd"},
		flags: []string{"--graceful-node-shutdown", "--cgroup-parent=" + cg, "--require-cgroup"}})
	_, took := k.waitReady(90 * time.Second)
	t.Logf("Node Ready %v after nodeinit started, on containerd %s", took.Round(10*time.Millisecond), containerd2Version)

	for _, l := range nodeinitLines(k.log()) {
		if strings.HasPrefix(l.text, "W") && strings.Contains(l.text, "cgroup driver") {
			t.Errorf("nodeinit warns about the cgroup driver: %s", l.text)
		}
	}
	kubeletLog, _ := os.ReadFile(filepath.Join(k.dir, "logs", "executor.log"))
	if !strings.Contains(string(kubeletLog), `"Using cgroup driver setting received from the CRI runtime" cgroupDriver="cgroupfs"`) {
		t.Errorf("the kubelet did not take containerd's cgroupfs driver:\n%s", grepLines(string(kubeletLog), "cgroup driver", "cgroupDriver"))
	}
	kubelet := cmdline(k.children()["kubelet"])
	if !strings.Contains(strings.Join(kubelet, " "), "--cgroup-root="+cg) {
		t.Errorf("the kubelet runs as %q, without --cgroup-root=%s (the cgroupfs form)", kubelet, cg)
	}
	static := k.waitPods("metadata.name=static-sleeper-"+nodeName, 1, 60*time.Second)
	id, err := ctd.cri("ps", "--quiet", "--name", "sleep", "--label", "io.kubernetes.pod.name="+static[0].Metadata.Name)
	must(t, err)
	out, err := ctd.cri("inspect", "--output", "go-template", "--template", "{{.info.pid}}", strings.Fields(id)[0])
	must(t, err)
	var pid int
	if _, err := fmt.Sscan(out, &pid); err != nil {
		t.Fatalf("crictl inspect gave no pid: %q", out)
	}
	checkCgroups(t, "the static pod's container", pid, cg+"/kubepods/", true)
	t.Logf("TERM: %v", k.stopAndCheck(90*time.Second))
}

// grepLines are the lines of text holding any of words.
func grepLines(text string, words ...string) string {
	var out []string
	for l := range strings.SplitSeq(text, "\n") {
		for _, w := range words {
			if strings.Contains(l, w) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// startContainerd2 starts the containerd 2 that make k8s builds in the
// fixture's directory dir, and stops it and removes its pods when the test
// ends. It returns the containerd and the directory of its binaries.
func startContainerd2(t *testing.T, c *cluster, dir string) (*containerd, string) {
	t.Helper()
	bin := filepath.Join(c.bin, "containerd-"+containerd2Version)
	if _, err := os.Stat(filepath.Join(bin, "containerd")); err != nil {
		t.Fatalf("containerd %s is missing from %s: run make k8s", containerd2Version, c.bin)
	}
	ctd, err := startContainerdFrom(filepath.Join(c.dir, dir), filepath.Join(c.bin, "crictl"), bin, containerd2Config)
	ctd.stopAtEnd(t)
	if err != nil {
		t.Fatal(err)
	}
	return ctd, bin
}
