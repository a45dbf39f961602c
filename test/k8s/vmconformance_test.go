//go:build k8s

package k8s

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// kubeletPort is where a kubelet serves its API: logs, exec, attach and
// port-forward, which the API server relays.
const kubeletPort = 10250

// TestModernHostConformance runs Kubernetes' e2e suite, as TestConformance
// does and from the same environment, against the node image on the
// modern node host booted under qemu (cgroup v2 only, systemd as PID 1,
// containerd with the systemd cgroup driver), run as the README runs it
// there. make conformance-vm runs it in test/vm/netns.sh's namespaces, as
// make e2e-vm runs the VM suite.
func TestModernHostConformance(t *testing.T) {
	o := conformanceFromEnv(t)
	o.run(t, getCluster(t).conformanceOnGuest(t, o.suite, o.report))
}

// conformanceOnGuest boots the guest with the suite's images in its
// containerd's store, under the names the suite gives them, runs the node
// image in its podman and returns the node for the suite. The API server
// reaches the node's kubelet by the node's name, which is the guest's
// hostname: in this run's mount namespace /etc/hosts makes that name the
// loopback, where qemu forwards the kubelet's port to the guest.
func (c *cluster) conformanceOnGuest(t *testing.T, suite, report string) conformanceNodes {
	t.Helper()
	if !guestsOnly() {
		t.Fatal("the suite on the guest maps the guest's name in /etc/hosts, which only a mount namespace of the run's own may do: run it as make conformance-vm does, in test/vm/netns.sh with NODEINIT_K8S_GUESTS_ONLY=1")
	}
	c.buildNodeImage(t)
	dir := t.TempDir()
	share := filepath.Join(dir, "share")
	start := time.Now()
	c.fillShare(t, share, map[string]string{"node": nodeImage, "pause": pauseImage, "busybox": busyboxImage})
	archives := conformanceImages(t, suite, c.podman, c.dir, c.net)
	stores := imageStores(t, t.TempDir(), share, []string{"node"}, false, archives...)
	t.Logf("the suite's images made and written into the guest's containerd store in %v", time.Since(start).Round(100*time.Millisecond))

	mapHostToLoopback(t, filepath.Join(dir, "hosts"), nodeName)
	v := bootNodeHost(t, t.TempDir(), share, stores, kubeletPort)
	// pause: the guest's sandbox image is the fixture's pause, the same
	// program the suite runs under its own name.
	var tags []string
	for _, alias := range append(conformanceAliases, [2]string{pauseImage, conformancePause}) {
		tags = append(tags, fmt.Sprintf("%s/ctr --namespace k8s.io images tag --force %s %s >/dev/null", guestContainerdDir, alias[0], alias[1]))
	}
	v.ssh("set -e; " + strings.Join(tags, "; "))

	k := c.runGuestNode(t, v, "")
	n, took := k.waitGuestReady(5 * time.Minute)
	t.Logf("Node %s Ready %v after podman run (kubelet %s, runtime %s); its kubelet serves on 127.0.0.1:%d, forwarded to the guest",
		n.Metadata.Name, took.Round(100*time.Millisecond), n.Status.NodeInfo.KubeletVersion, n.Status.NodeInfo.ContainerRuntimeVersion, kubeletPort)
	kubeconfig := filepath.Join(report, "admin.conf")
	must(t, os.WriteFile(kubeconfig, c.pki.kubeconfig(apiServer, c.admin), 0o600))
	return conformanceNodes{kubeconfig: kubeconfig, kubectl: filepath.Join(c.bin, "kubectl"), count: 1}
}

// mapHostToLoopback makes name resolve to 127.0.0.1 in this mount
// namespace, until the test ends: a copy of /etc/hosts with the name added,
// written to file, is bound over it. Go's resolver, the API server's,
// reads the file again when it changes.
func mapHostToLoopback(t *testing.T, file, name string) {
	t.Helper()
	hosts, err := os.ReadFile("/etc/hosts")
	must(t, err)
	if len(hosts) > 0 && hosts[len(hosts)-1] != '\n' {
		hosts = append(hosts, '\n')
	}
	must(t, os.WriteFile(file, fmt.Appendf(hosts, "127.0.0.1\t%s\n", name), 0o644))
	if err := unix.Mount(file, "/etc/hosts", "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind %s over /etc/hosts: %v", file, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount("/etc/hosts", 0); err != nil {
			t.Errorf("unmount /etc/hosts: %v", err)
		}
	})
}
