//go:build k8s

package k8s

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nodecluster "github.com/nodeinit/nodeinit/test/cluster"
	"github.com/nodeinit/nodeinit/test/testenv"
)

// The self-contained node image (images/node-runtime) as the suite
// builds it, and the root it is built on.
const (
	nodeRuntimeImage     = "localhost/nodeinit-k8s-node-runtime:test"
	nodeRuntimeBaseImage = "localhost/nodeinit-k8s-node-runtime-base:test"
)

// buildNodeRuntimeImage builds images/node-runtime into the fixture's
// podman store: the Debian root the cluster's nodes have
// (nodecluster.BasePackages: runc, the CNI plugins), the suite's kubelet,
// kube-proxy and containerd 2, and nodeinit.
func (c *cluster) buildNodeRuntimeImage(t *testing.T) {
	t.Helper()
	start := time.Now()
	base := debianRoot(t, filepath.Dir(c.bin), nodecluster.BasePackages)
	if _, err := c.podman.run(5*time.Minute, "import", base, nodeRuntimeBaseImage); err != nil {
		t.Fatal(err)
	}
	ctd := filepath.Join(c.bin, "containerd-"+containerd2Version)
	root := testenv.ModuleRoot(t)
	context := filepath.Join(t.TempDir(), "context")
	for from, to := range map[string]string{
		testenv.Build(t, "./cmd/nodeinit"):                         "bin/nodeinit",
		filepath.Join(c.bin, "kubelet"):                            "bin/kubelet",
		filepath.Join(c.bin, "kube-proxy"):                         "bin/kube-proxy",
		filepath.Join(ctd, "containerd"):                           "bin/containerd/containerd",
		filepath.Join(ctd, "containerd-shim-runc-v2"):              "bin/containerd/containerd-shim-runc-v2",
		filepath.Join(ctd, "ctr"):                                  "bin/containerd/ctr",
		filepath.Join(root, "images/node-runtime/config.yaml"):     "images/node-runtime/config.yaml",
		filepath.Join(root, "images/node-runtime/containerd.toml"): "images/node-runtime/containerd.toml",
		filepath.Join(root, "images/node-runtime/machine-id"):      "images/node-runtime/machine-id",
	} {
		must(t, linkOrCopy(from, filepath.Join(context, to)))
	}
	dockerfile, err := os.ReadFile(filepath.Join(root, "images/node-runtime/Dockerfile"))
	must(t, err)
	must(t, c.podman.build(nodeRuntimeImage, string(dockerfile), context, "BASE="+nodeRuntimeBaseImage))
	t.Logf("self-contained node image built in %v", time.Since(start).Round(100*time.Millisecond))
}

// guestRuntimeNodeName is the self-contained node's container in the
// guest, and guestRuntimeVolume its /var.
const (
	guestRuntimeNodeName = "node-runtime"
	guestRuntimeVolume   = "node-runtime-var"
)

// guestRuntimeCrictl is crictl in the self-contained node, against the
// node's own containerd.
const guestRuntimeCrictl = "podman exec " + guestRuntimeNodeName + " crictl --runtime-endpoint unix:///run/containerd/containerd.sock --timeout 60s"

// checkGuestNodeRuntime runs the self-contained node image on the cgroup
// v2 systemd host as kind runs its nodes there: a private cgroup namespace
// and no cgroup mount, containerd's root on a volume, /run and /tmp
// tmpfs. The README's line for a v1 host but for the cgroup flags; the
// host's network (the control plane is on the guest's loopback), a bridge
// CNI configuration of the test's mounted where a CNI's DaemonSet would
// write one, crictl mounted for the checks. nodeinit moves itself to
// /init of the namespace; containerd, the kubelet and kube-proxy run
// there, the kubelet takes the cgroupfs driver from containerd and puts
// its pods below /kubepods of the namespace, which is the container's
// cgroup in the host's systemd slice; podman stop ends the kubelet, then
// kube-proxy, then containerd, then the shims and pods, with the kubelet's
// 0, and leaves no process in the container's cgroup.
func (c *cluster) checkGuestNodeRuntime(t *testing.T, v *vm) {
	config := strings.NewReplacer("cgroupDriver: systemd\n", "", "containerRuntimeEndpoint: unix:///run/containerd/containerd.sock\n", "").Replace(vmKubeletConfig)
	files := c.writeGuestNodeFiles(t, v, config, staticPod)
	must(t, os.WriteFile(filepath.Join(files, "cni.conflist"), fmt.Appendf(nil, cniConfig, "/var/lib/cni/networks", bridgeName, podCIDR), 0o644))
	k := &kubeNode{t: t, c: c, dir: files, started: time.Now()}
	t.Cleanup(func() {
		c.removeGuestNode(t, v, k, fmt.Sprintf("podman rm --force --time 60 %s; podman volume rm --force %s", guestRuntimeNodeName, guestRuntimeVolume))
	})
	guestFiles := guestShare + "/" + filepath.Base(files)
	// The node's configuration is the guest's /etc/kubernetes; the static
	// pod is held back until its images are in the node's containerd.
	v.ssh("set -e; cp /var/lib/kubelet/config.yaml /etc/kubernetes/kubelet.yaml; mv /etc/kubernetes/manifests/static.yaml /etc/kubernetes/static.yaml.held")
	run := []string{"podman", "run", "-d", "--name", guestRuntimeNodeName, "--privileged", "--network=host",
		"--stop-timeout", "60", "--tmpfs", "/run", "--tmpfs", "/tmp", "-v", guestRuntimeVolume + ":/var",
		"-v", "/etc/kubernetes:/etc/kubernetes:ro", "--cgroupns=private", "-v", "/lib/modules:/lib/modules:ro",
		"-v", guestFiles + "/cni.conflist:/etc/cni/net.d/10-nodeinit-test.conflist:ro",
		"-v", guestShare + "/k8s/crictl:/usr/local/bin/crictl:ro",
		nodeRuntimeImage, "--proxy-arg=--cluster-cidr=" + podCIDR}
	k.started = time.Now()
	v.ssh(strings.Join(run, " "))
	guestContainer(k, v, "podman", guestRuntimeNodeName)

	// The images, as a cluster loads them into each node: pause under the
	// name containerd's configuration pins as the sandbox image.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		_, err := v.sshTimeout(time.Minute, "podman exec "+guestRuntimeNodeName+" ctr version")
		if err == nil {
			break
		}
		if !k.running() || time.Now().After(deadline) {
			t.Fatalf("the node's containerd did not answer %v after podman run: %v\n%s", time.Since(k.started).Round(time.Second), err, testenv.Tail(k.log(), 30))
		}
		time.Sleep(2 * time.Second)
	}
	answered := time.Since(k.started)
	ctr := "podman exec -i " + guestRuntimeNodeName + " ctr --namespace k8s.io images "
	v.ssh(fmt.Sprintf("set -e; for i in pause busybox; do %[1]simport - < %[2]s/images/$i.tar >/dev/null; done; %[1]stag %[3]s %[4]s >/dev/null; mv /etc/kubernetes/static.yaml.held /etc/kubernetes/manifests/static.yaml",
		ctr, guestShare, pauseImage, nodecluster.PauseImage))
	n, took := k.waitGuestReady(5 * time.Minute)
	static := k.waitPods("metadata.name=static-sleeper-"+nodeName, 1, 5*time.Minute)
	t.Logf("containerd answered %v after podman run; Node %s Ready %v (kubelet %s, runtime %s); static pod %s Running %v",
		answered.Round(100*time.Millisecond), n.Metadata.Name, took.Round(100*time.Millisecond), n.Status.NodeInfo.KubeletVersion,
		n.Status.NodeInfo.ContainerRuntimeVersion, static[0].Metadata.Name, time.Since(k.started).Round(100*time.Millisecond))
	if !strings.HasPrefix(n.Status.NodeInfo.ContainerRuntimeVersion, "containerd://2.") {
		t.Errorf("the Node's runtime is %q; want the node's own containerd 2", n.Status.NodeInfo.ContainerRuntimeVersion)
	}

	// Where everything runs, as the namespace shows it and as the host does.
	id := strings.Fields(v.ssh(guestRuntimeCrictl + " ps --quiet --name sleep --label io.kubernetes.pod.name=static-sleeper-" + nodeName))
	if len(id) == 0 {
		t.Fatal("crictl in the node lists no sleep container of the static pod")
	}
	inside := v.ssh("podman exec " + guestRuntimeNodeName + ` sh -c 'for p in 1 $(pgrep -x containerd) $(pgrep -x kubelet) $(pgrep -x kube-proxy); do echo "$(cat /proc/$p/comm) $(cat /proc/$p/cgroup)"; done; ` +
		`p=$(crictl --runtime-endpoint unix:///run/containerd/containerd.sock inspect --output go-template --template "{{.info.pid}}" ` + id[0] + `); echo "pod $(cat /proc/$p/cgroup)"'`)
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(inside), "\n") {
		if name, cg, ok := strings.Cut(l, " "); ok {
			got[name] = strings.TrimPrefix(cg, "0::")
		}
	}
	for _, p := range []string{"nodeinit", "containerd", "kubelet", "kube-proxy"} {
		if got[p] != "/init" {
			t.Errorf("in the node's cgroup namespace %s is in %q; want /init (all:\n%s)", p, got[p], inside)
		}
	}
	if !strings.HasPrefix(got["pod"], "/kubepods/") {
		t.Errorf("the static pod's container is in %q of the node's cgroup namespace; want below /kubepods, the cgroupfs driver's layout", got["pod"])
	}
	outer := strings.TrimPrefix(strings.TrimSpace(v.ssh("cat /proc/$(podman inspect --format '{{.State.Pid}}' "+guestRuntimeNodeName+")/cgroup")), "0::")
	container := strings.TrimSuffix(outer, "/init")
	if container == outer || !strings.HasPrefix(container, "/machine.slice/") {
		t.Errorf("the host sees nodeinit in %q; want /init below the container's cgroup in machine.slice", outer)
	}
	if kubepods := strings.TrimSpace(v.ssh("test -d /sys/fs/cgroup" + container + "/kubepods && echo yes || echo no")); kubepods != "yes" {
		t.Errorf("the host has no %s/kubepods: the pods are not in the node's container", container)
	}
	t.Logf("in the node's cgroup namespace: nodeinit, containerd, the kubelet and kube-proxy in /init, the static pod's container in %s; the host sees the container as %s", got["pod"], container)

	// The stop: the kubelet, then kube-proxy, then containerd, then the
	// shims and pods left, which get TERM and, where a container's PID 1
	// ignores it (the static pod's sleep), KILL at the grace period's end.
	stopped := time.Now()
	if code := k.stop(90 * time.Second); code != 0 {
		t.Errorf("the node container exited %d after podman stop, want the kubelet's 0", code)
	}
	total := time.Since(stopped)
	log := k.log()
	if strings.Contains(log, "Exiting with processes that could not be reaped") {
		t.Errorf("nodeinit left processes behind:\n%s", testenv.Tail(log, 30))
	}
	var at []time.Duration
	prev, _ := k.lineAfter(log, "Forwarded signal to the executor", 0)
	term := prev
	for _, msg := range []string{"Executor ended", "Sent TERM to the proxy", "Proxy ended", "Sent TERM to the container runtime",
		"Container runtime ended", "Sent TERM to every other process: what is left of the runtime's shims and pods", "All processes have ended"} {
		when, _ := k.lineAfter(log, msg, prev)
		at, prev = append(at, when-term), when
	}
	t.Logf("podman stop: kubelet ended %v after TERM, kube-proxy got TERM at %v and ended at %v, containerd got TERM at %v and ended at %v, "+
		"the shims and pods got TERM at %v, all ended at %v; podman stop returned after %v",
		at[0].Round(time.Millisecond), at[1].Round(time.Millisecond), at[2].Round(time.Millisecond), at[3].Round(time.Millisecond),
		at[4].Round(time.Millisecond), at[5].Round(time.Millisecond), at[6].Round(time.Millisecond), total.Round(100*time.Millisecond))
	if left, err := v.sshTimeout(time.Minute, "test ! -d /sys/fs/cgroup"+container+" || cat /sys/fs/cgroup"+container+"/cgroup.procs"); err != nil || strings.TrimSpace(left) != "" {
		t.Errorf("processes of the node's container still run in the host's %s: %q %v", container, left, err)
	}
}
