//go:build k8s

package k8s

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// containerd is the container runtime the kubelet talks to, with its
// configuration, root, state and socket in a directory of the fixture's
// own. What it cannot keep there is named in containerdConfig.
type containerd struct {
	*server
	dir    string
	crictl string
	ctr    string // its ctr: "ctr" from PATH for the distribution's
	bin    string // the directory of its binaries; "" for the distribution's
	config string // its configuration's format (startContainerdFrom)
}

// containerdConfig is containerd's whole configuration for these machines:
//   - restrict_oom_score_adj: without CAP_SYS_RESOURCE (as in a container or
//     a VM sandbox) runc cannot lower a sandbox's oom_score_adj below its
//     own, and every sandbox fails with "can't get final child's PID from
//     pipe: EOF".
//   - runc with SystemdCgroup = false: the kubelet's cgroupDriver is
//     cgroupfs, there may be no systemd.
//   - the sandbox image is the pause image imported before any pod runs,
//     and no registry is reachable: nothing is ever pulled.
//   - CNI: the distribution's plugins, a bridge and host-local conflist of
//     ours (written below), IPAM state under our directory.
//   - the opt plugin (which makes /opt/containerd) and the snapshotters not
//     used are off.
//
// containerd-shim-runc-v2 still puts its sockets in /run/containerd/s and
// the CRI plugin its network namespaces in /run/netns; putBack removes both
// when they were not there before.
const containerdConfig = `version = 2
root = "%[1]s/root"
state = "%[1]s/state"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "%[1]s/containerd.sock"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "%[2]s"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "%[1]s/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "%[1]s/net.d"
`

// cniConfig is the pod network: a bridge with the gateway address on the
// host, so that the host reaches pods (and Services through kube-proxy's
// rules), no masquerading rules of CNI's own, and IPAM state under our
// directory.
const cniConfig = `{
  "cniVersion": "0.4.0",
  "name": "nodeinit-test",
  "plugins": [{
    "type": "bridge",
    "bridge": "%[2]s",
    "isGateway": true,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "ranges": [[{"subnet": "%[3]s"}]],
      "routes": [{"dst": "0.0.0.0/0"}],
      "dataDir": "%[1]s/ipam"
    }
  }]
}
`

// startContainerd starts the distribution's containerd in dir.
func startContainerd(dir, crictl string) (*containerd, error) {
	return startContainerdFrom(dir, crictl, "", containerdConfig)
}

// stopAtEnd removes containerd's pods and stops it when the test ends; c
// may be nil (a start that failed before the server ran).
func (c *containerd) stopAtEnd(t *testing.T) {
	if c == nil {
		return
	}
	t.Cleanup(func() {
		for _, err := range c.removePods() {
			t.Error(err)
		}
		if err := c.stop(15 * time.Second); err != nil {
			t.Error(err)
		}
	})
}

// restart starts containerd again on the same binaries, configuration,
// root and state, after its server has ended.
func (c *containerd) restart() (*containerd, error) {
	return startContainerdFrom(c.dir, c.crictl, c.bin, c.config)
}

// startContainerdFrom starts the containerd in bin (the distribution's,
// from PATH, when empty; then bin goes first in its PATH, for its shim)
// with config, a format whose %[1]s is dir and %[2]s the pause image.
func startContainerdFrom(dir, crictl, bin, config string) (*containerd, error) {
	for _, d := range []string{dir, filepath.Join(dir, "net.d")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	conf := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(conf, fmt.Appendf(nil, config, dir, pauseImage), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "net.d", "10-nodeinit-test.conflist"), fmt.Appendf(nil, cniConfig, dir, bridgeName, podCIDR), 0o644); err != nil {
		return nil, err
	}
	program, ctr, env := "containerd", "ctr", []string(nil)
	if bin != "" {
		program, ctr = filepath.Join(bin, "containerd"), filepath.Join(bin, "ctr")
		env = []string{"PATH=" + bin + string(filepath.ListSeparator) + os.Getenv("PATH")}
	}
	s, err := startServerEnv(filepath.Dir(dir), filepath.Base(dir), env, program, "--config", conf)
	if err != nil {
		return nil, err
	}
	c := &containerd{server: s, dir: dir, crictl: crictl, ctr: ctr, bin: bin, config: config}
	return c, c.waitServing(30 * time.Second)
}

// waitServing waits until containerd accepts connections on its socket.
func (c *containerd) waitServing(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		conn, err := net.Dial("unix", c.socket())
		if err == nil {
			conn.Close()
			return nil
		}
		if !c.running() || time.Now().After(deadline) {
			return fmt.Errorf("containerd does not serve on %s: %v\n%s", c.socket(), err, c.tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// socket is containerd's socket, where the kubelet and crictl reach it.
func (c *containerd) socket() string { return filepath.Join(c.dir, "containerd.sock") }

// endpoint is the socket as the kubelet's containerRuntimeEndpoint takes it.
func (c *containerd) endpoint() string { return "unix://" + c.socket() }

// importImage imports a docker-archive into the namespace the CRI plugin
// uses, unpacked for its snapshotter.
func (c *containerd) importImage(archive string) error {
	_, err := run(2*time.Minute, c.ctr, "--address", c.socket(), "--namespace", "k8s.io", "images", "import", archive)
	return err
}

// cri runs crictl against this containerd and returns its stdout.
func (c *containerd) cri(args ...string) (string, error) {
	argv := append([]string{c.crictl, "--runtime-endpoint", c.endpoint(), "--image-endpoint", c.endpoint(), "--timeout", "30s"}, args...)
	return stdoutOf(2*time.Minute, argv...)
}

// removePods stops and removes every pod sandbox through the CRI, so that
// CNI takes each pod's network down and runc removes the containers and
// their cgroups: pods outlive the kubelet, which has no graceful node
// shutdown here. It returns once containerd holds no container at all.
//
// A node stopped while the kubelet was starting a pod leaves that start
// in flight in containerd, which goes on with it after the kubelet has
// gone. Until it ends, the CRI does not list the sandbox (a forced removal
// passes it by, and a containerd stopped then leaves its shim running for
// good), or refuses to remove a container whose start is in flight
// ("container is in starting state"), or finds it running when the start
// ended between the stop and the removal ("container is still running").
// containerd says nothing when the start is over, so the removal is tried
// again until containerd's own list of containers in the CRI's namespace
// is empty, up to half a minute; what is left then is named.
func (c *containerd) removePods() []error {
	if !c.running() {
		return nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := c.cri("rmp", "--all", "--force")
		if err != nil && !startInFlight(err) {
			return []error{fmt.Errorf("remove the pods through the CRI: %w", err)}
		}
		left, lerr := c.containers()
		if lerr != nil {
			return []error{lerr}
		}
		switch {
		case err == nil && left == "":
			return nil
		case time.Now().After(deadline) && err != nil:
			return []error{fmt.Errorf("remove the pods through the CRI: %w", err)}
		case time.Now().After(deadline):
			return []error{fmt.Errorf("containerd still holds containers the CRI does not list, half a minute after the pods were removed:\n%s", left)}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// containers lists, with their labels, the containers containerd holds in
// the CRI's namespace, whether the CRI lists them or not; "" when none.
func (c *containerd) containers() (string, error) {
	out, err := stdoutOf(time.Minute, c.ctr, "--address", c.socket(), "--namespace", "k8s.io", "containers", "list", "--quiet")
	if err != nil {
		return "", fmt.Errorf("list containerd's containers: %w", err)
	}
	ids := strings.Fields(out)
	if len(ids) == 0 {
		return "", nil
	}
	var b strings.Builder
	for _, id := range ids {
		info, _ := stdoutOf(time.Minute, c.ctr, "--address", c.socket(), "--namespace", "k8s.io", "containers", "info", id)
		fmt.Fprintf(&b, "%s %s\n", id, criLabels(info))
	}
	return b.String(), nil
}

// criLabels picks from `ctr containers info`'s JSON the labels that say
// which pod a container is of.
func criLabels(info string) string {
	var v struct{ Labels map[string]string }
	if json.Unmarshal([]byte(info), &v) != nil {
		return ""
	}
	var kept []string
	for _, k := range []string{"io.cri-containerd.kind", "io.kubernetes.pod.namespace", "io.kubernetes.pod.name", "io.kubernetes.container.name"} {
		if l, ok := v.Labels[k]; ok {
			kept = append(kept, k+"="+l)
		}
	}
	return strings.Join(kept, " ")
}

// startInFlight says whether the CRI refused to remove a container because
// of a start that was in flight when the pods were stopped.
func startInFlight(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "container is in starting state") || strings.Contains(msg, "container is still running")
}

// TestLeakedShimIsKnownByItsDeletedBundle: the fixture kills a shim that
// containerd lost only when the process is a shim and its bundle, its
// working directory, is gone; a shim in its bundle and any other process
// in a deleted directory are left to the check that fails the run.
func TestLeakedShimIsKnownByItsDeletedBundle(t *testing.T) {
	dir := t.TempDir()
	shim := filepath.Join(dir, "containerd-shim-runc-v2")
	other := filepath.Join(dir, "kubelet")
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{shim, other} {
		if _, err := run(10*time.Second, "cp", sleep, p); err != nil {
			t.Fatal(err)
		}
	}
	start := func(program, cwd string) *exec.Cmd {
		if err := os.MkdirAll(cwd, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(program, "60")
		cmd.Dir = cwd
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	lost := start(shim, filepath.Join(dir, "bundle-lost"))
	live := start(shim, filepath.Join(dir, "bundle-live"))
	kubelet := start(other, filepath.Join(dir, "elsewhere"))
	for _, d := range []string{"bundle-lost", "elsewhere"} {
		if err := os.Remove(filepath.Join(dir, d)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		cmd  *exec.Cmd
		want bool
	}{{"a shim whose bundle is deleted", lost, true}, {"a shim in its bundle", live, false}, {"another program in a deleted directory", kubelet, false}} {
		bundle, got := leakedShim(c.cmd.Process.Pid)
		if got != c.want {
			t.Errorf("%s: leakedShim says %v (bundle %q), want %v", c.name, got, bundle, c.want)
		}
		if got && bundle != filepath.Join(dir, "bundle-lost") {
			t.Errorf("%s: bundle %q, want %q", c.name, bundle, filepath.Join(dir, "bundle-lost"))
		}
	}
}

// TestNodeOnTheDistributionsContainerd: the suite's runtime is containerd
// 2; the distribution's containerd (Debian 12's 1.6, which supported
// distributions still ship) stays one named case. Its CRI does not report
// a cgroup driver, so the kubelet keeps the cgroupfs driver of its own
// configuration. Against it the node registers Ready with its static pod,
// a Deployment and kube-proxy's Service, and TERM stops the kubelet, then
// kube-proxy, nodeinit exiting 0.
func TestNodeOnTheDistributionsContainerd(t *testing.T) {
	c := getCluster(t)
	ctd, err := startContainerd(filepath.Join(c.dir, "containerd-distribution"), filepath.Join(c.bin, "crictl"))
	ctd.stopAtEnd(t)
	must(t, err)
	version, err := run(10*time.Second, "containerd", "--version")
	must(t, err)
	t.Logf("runtime: %s", strings.TrimSpace(version))
	for _, a := range c.archives {
		must(t, ctd.importImage(a))
	}
	k := c.startNode(t, nodeSpec{runtime: ctd})
	k.checkRunningNode("iptables")
	kubeletLog, _ := os.ReadFile(filepath.Join(k.dir, "logs", "executor.log"))
	if strings.Contains(string(kubeletLog), "Using cgroup driver setting received from the CRI runtime") {
		t.Errorf("the kubelet took a cgroup driver from containerd 1.6, which reports none:\n%s", grepLines(string(kubeletLog), "cgroup driver", "cgroupDriver"))
	}
	t.Logf("TERM: %v", k.stopAndCheck(90*time.Second))
}
