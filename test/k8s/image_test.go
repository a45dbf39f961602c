//go:build k8s

package k8s

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/test/testenv"
)

const (
	nodeBaseImage = "localhost/nodeinit-k8s-node-base:test"
	nodeImage     = "localhost/nodeinit-k8s-node:test"
	// nodeContainer is the name of the node image's container in podman.
	nodeContainer = "nodeinit-k8s-node"
)

// TestNodeImageInPodman builds images/node/Dockerfile on a Debian base made
// with mmdebstrap and imported into podman (nothing pulled), with the built
// kubelet and kube-proxy and a static nodeinit, and runs it as the node
// image's README says (privileged, host network, /var/lib/kubelet rshared,
// the host's cgroups, /etc/kubernetes read-only, --make-rshared), except
// for the pid namespace: the node passes the same checks as on the host,
// and podman stop stops the kubelet, then kube-proxy, and the container
// exits 0.
//
// The container gets a pid namespace of its own (nodeinit is its PID 1),
// not the host's: for a container in the host's pid namespace podman stop
// sends the stop signal to every process of the container's cgroup at once
// (runc kill --all), so kube-proxy got TERM with the kubelet, not after it.
func TestNodeImageInPodman(t *testing.T) {
	c := getCluster(t)
	c.buildNodeImage(t)
	k := c.runNodeImage(t, imageRun{})
	k.checkRunningNode("iptables")
	s := k.stopAndCheck(90 * time.Second)
	t.Logf("podman stop: %v", s)
	if s.code != 0 {
		t.Errorf("the node container exited %d; want 0", s.code)
	}
}

// buildNodeImage builds images/node/Dockerfile on a Debian base made with
// mmdebstrap and imported into podman (nothing pulled), with the built
// kubelet and kube-proxy and a static nodeinit, once per run.
func (c *cluster) buildNodeImage(t *testing.T) {
	t.Helper()
	c.nodeImage.Do(func() {
		// Set until the build succeeds: a Fatal inside leaves it set.
		c.nodeImageErr = errors.New("the build stopped before it ended")
		start := time.Now()
		base := nodeBase(t, filepath.Dir(c.bin))
		if _, err := c.podman.run(5*time.Minute, "import", base, nodeBaseImage); err != nil {
			c.nodeImageErr = err
			return
		}
		root := testenv.ModuleRoot(t)
		context := filepath.Join(t.TempDir(), "context")
		for from, to := range map[string]string{
			testenv.Build(t, "./cmd/nodeinit"):             "bin/nodeinit",
			filepath.Join(c.bin, "kubelet"):                "bin/kubelet",
			filepath.Join(c.bin, "kube-proxy"):             "bin/kube-proxy",
			filepath.Join(root, "images/node/config.yaml"): "images/node/config.yaml",
			filepath.Join(root, "images/node/machine-id"):  "images/node/machine-id",
		} {
			if c.nodeImageErr = linkOrCopy(from, filepath.Join(context, to)); c.nodeImageErr != nil {
				return
			}
		}
		dockerfile, err := os.ReadFile(filepath.Join(root, "images/node/Dockerfile"))
		if err != nil {
			c.nodeImageErr = err
			return
		}
		if c.nodeImageErr = c.podman.build(nodeImage, string(dockerfile), context, "BASE="+nodeBaseImage); c.nodeImageErr != nil {
			return
		}
		t.Logf("node image built on the mmdebstrap base in %v", time.Since(start).Round(100*time.Millisecond))
	})
	if c.nodeImageErr != nil {
		t.Fatalf("the node image: %v", c.nodeImageErr)
	}
}

// imageRun is more for runNodeImage: podman's flags, and nodeinit's
// before the proxy flags.
type imageRun struct {
	podman, nodeinit []string
	image            string // default: nodeImage
}

// nodeIdentityDir is where nodeinit keeps the generated machine-id of a node
// in the image: nodeinit/ of the kubelet's root directory, which the
// container shares with the host.
const nodeIdentityDir = "/var/lib/kubelet/nodeinit"

// writeImageNodeFiles writes a node container's files into dir, which the
// container sees as etc, and the KubeletConfiguration among them to
// /var/lib/kubelet/config.yaml on the shared /var/lib/kubelet, where the
// node image's configuration looks for it.
func (c *cluster) writeImageNodeFiles(t *testing.T, dir, etc string, spec nodeSpec) {
	t.Helper()
	c.writeNodeFiles(t, dir, etc, spec)
	sharedKubeletDir(t)
	conf, err := os.ReadFile(filepath.Join(dir, "kubelet.yaml"))
	must(t, err)
	must(t, os.WriteFile("/var/lib/kubelet/config.yaml", conf, 0o600))
}

// runNodeImage starts the node image in podman. The node's files are its
// /etc/kubernetes and its KubeletConfiguration is /var/lib/kubelet/config.yaml,
// where the image's configuration looks for them; the executor line is the
// image's with the kubelet's --node-ip and --hostname-override added.
// Beyond the README's line the test mounts what its containerd outside
// needs: /var/log/pods, where containerd writes the logs the kubelet makes
// directories for, and containerd's directory (its socket, and its root
// read-only: the eviction manager stats the image file system).
func (c *cluster) runNodeImage(t *testing.T, o imageRun) *kubeNode {
	t.Helper()
	dir := t.TempDir()
	c.writeImageNodeFiles(t, dir, "/etc/kubernetes", nodeSpec{})
	must(t, os.MkdirAll("/var/log/pods", 0o755))
	cd := c.containerd.dir
	const name = nodeContainer
	args := []string{"run", "-d", "--name", name, "--privileged", "--network=host",
		"-v", "/var/lib/kubelet:/var/lib/kubelet:rshared", "-v", "/sys/fs/cgroup:/sys/fs/cgroup",
		"-v", dir + ":/etc/kubernetes:ro",
		"-v", "/tmp:/tmp", "-v", "/var/log/pods:/var/log/pods", "-v", cd + ":" + cd, "-v", cd + "/root:" + cd + "/root:ro"}
	if o.image == "" {
		o.image = nodeImage
	}
	// Each run is a new node: the id an earlier one kept goes.
	must(t, os.RemoveAll(nodeIdentityDir))
	args = append(append(append(args, o.podman...), o.image, "--make-rshared"), o.nodeinit...)
	args = append(append(args, proxyFlags("iptables")...), "--",
		"/usr/local/bin/kubelet", "--config=/var/lib/kubelet/config.yaml", "--kubeconfig=/etc/kubernetes/kubelet.conf",
		"--node-ip="+c.nodeIP, "--hostname-override="+nodeName)

	k := &kubeNode{t: t, c: c, dir: dir, started: time.Now()}
	if _, err := c.podman.run(2*time.Minute, args...); err != nil {
		t.Fatal(err)
	}
	inspect := func(format string) string {
		out, err := c.podman.run(30*time.Second, "inspect", "--format", format, name)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	k.pid = func() int {
		pid, err := strconv.Atoi(inspect("{{.State.Pid}}"))
		if err != nil || pid == 0 {
			t.Fatalf("the node container has no pid (%v)", err)
		}
		return pid
	}
	k.running = func() bool { return inspect("{{.State.Running}}") == "true" }
	k.log = func() string {
		out, _ := c.podman.run(30*time.Second, "logs", name)
		return out
	}
	k.stop = func(timeout time.Duration) int {
		if _, err := c.podman.run(timeout, "stop", "--time", strconv.Itoa(int(timeout.Seconds())), name); err != nil {
			t.Fatal(err)
		}
		code, err := strconv.Atoi(inspect("{{.State.ExitCode}}"))
		if err != nil {
			t.Fatal(err)
		}
		return code
	}
	t.Cleanup(func() {
		if t.Failed() {
			// The container's log goes with the container.
			t.Logf("the node container's log, last lines:\n%s", testenv.Tail(k.log(), 40))
		}
		if _, err := c.podman.run(2*time.Minute, "rm", "--force", "--time", "30", name); err != nil {
			t.Error(err)
		}
		if err := os.RemoveAll(nodeIdentityDir); err != nil {
			t.Error(err)
		}
		k.teardown()
	})
	return k
}
