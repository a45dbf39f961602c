//go:build k8s

package k8s

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/test/testenv"
	"golang.org/x/sys/unix"
)

// Names and address ranges of the fixture. Every server listens on
// 127.0.0.1; the pod and service ranges are private ones no host route is
// expected to use.
const (
	nodeName     = "nodeinit-test"
	bridgeName   = "nodeinit-cni0"
	podCIDR      = "10.244.0.0/24"
	serviceCIDR  = "10.96.0.0/24"
	apiServer    = "https://127.0.0.1:6443"
	pauseImage   = "localhost/nodeinit-k8s-pause:test"
	busyboxImage = "localhost/nodeinit-k8s-busybox:test"
)

// The fixture every test of the package shares: one control plane, one
// containerd (containerd 2, which make k8s builds; the distribution's 1.6
// is TestNodeOnTheDistributionsContainerd's) with the images imported, started by the first test that asks
// and stopped by TestMain, which then checks that the host is as it was.
var shared struct {
	once sync.Once
	c    *cluster
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if c := shared.c; c != nil {
		errs := c.close()
		for _, err := range errs {
			fmt.Fprintln(os.Stderr, "FAIL: putting the host back:", err)
		}
		if len(errs) > 0 {
			code = 1
		} else if guestsOnly() {
			fmt.Println("network namespace put back: its sysctls, iptables and nftables and links, and the fixture's processes, as before the run")
		} else {
			fmt.Println("host put back: sysctls, iptables and nftables, links, cgroups, mounts, directories and processes as before the run")
		}
	}
	testenv.Cleanup()
	os.Exit(code)
}

// cluster is the control plane and the container runtime, and what the
// tests need to reach them.
type cluster struct {
	dir    string // everything the fixture writes, removed at the end
	bin    string // the Kubernetes binaries (make k8s)
	net    string // the cluster's build (make cluster-build): its etcd is the control plane's store
	nodeIP string // the kubelet's --node-ip: the host's own address
	pki    *pki
	admin  identity
	api    *api
	// servers in the order started; stopped in reverse.
	servers    []*server
	containerd *containerd
	// archives are the pause and busybox images, for another runtime.
	archives []string
	podman   *podman
	base     *hostState // the host before the fixture touched it
	// timings, for the report.
	controlPlane, images time.Duration
	// nodeImage builds the node image once (buildNodeImage).
	nodeImage    sync.Once
	nodeImageErr error
}

// guestsOnly says that this run's nodes all run in guests
// (NODEINIT_K8S_GUESTS_ONLY=1): make e2e-vm runs the VM suite so, in a
// network and mount namespace of its own (test/vm/netns.sh), beside make
// e2e-k8s on the same machine. Its fixture then owns only that network
// namespace (hostState), and runs no node on the host.
func guestsOnly() bool {
	return os.Getenv("NODEINIT_K8S_GUESTS_ONLY") == "1"
}

// getCluster returns the shared fixture, starting it on first use. A fixture
// that cannot start fails every test that needs it, with the same reason.
func getCluster(t *testing.T) *cluster {
	t.Helper()
	testenv.RequireRoot(t)
	if guestsOnly() && !strings.HasPrefix(t.Name(), "TestModernHost") {
		t.Fatal("NODEINIT_K8S_GUESTS_ONLY=1: this run's fixture owns only its network namespace and runs nodes in guests only; run this test without it")
	}
	for _, tool := range []string{"containerd", "ctr", "runc", "podman", "iptables-save", "iptables-restore", "nft", "ip", "unshare", "busybox"} {
		testenv.RequireTool(t, tool)
	}
	testenv.Require(t, dirExists("/usr/lib/cni"), "needs the CNI plugins in /usr/lib/cni (containernetworking-plugins)")
	shared.once.Do(func() {
		shared.c, shared.err = startCluster(t)
	})
	if shared.err != nil {
		t.Fatalf("the control plane and containerd did not start: %v", shared.err)
	}
	return shared.c
}

// k8sBin is the directory of the built Kubernetes binaries: $NODEINIT_K8S_BIN
// (make e2e-k8s sets it), else what test/k8s/build/build.sh prints, building
// them the first time.
func k8sBin(t *testing.T) string {
	t.Helper()
	return buildDir(t, "NODEINIT_K8S_BIN", k8sBuildScript)
}

// clusterBin is the directory of the cluster's build (make cluster-build),
// whose etcd is the control plane's store and whose CoreDNS and etcd the
// conformance suite's images carry: $NODEINIT_CLUSTER_BIN (the make targets
// set it), else what test/cluster/build/build.sh prints, building it the
// first time.
func clusterBin(t *testing.T) string {
	t.Helper()
	return buildDir(t, "NODEINIT_CLUSTER_BIN", "test/cluster/build/build.sh")
}

// k8sBuildScript builds the Kubernetes binaries of a release.
const k8sBuildScript = "test/k8s/build/build.sh"

// buildDir is the directory of a build of script (a path from the module
// root): $env when set, else what script with args prints, building it
// the first time.
func buildDir(t *testing.T, env, script string, args ...string) string {
	t.Helper()
	if dir := os.Getenv(env); dir != "" {
		return dir
	}
	return scriptDir(t, filepath.Join(testenv.ModuleRoot(t), filepath.FromSlash(script)), args...)
}

// scriptDir runs a build script of the project's, which prints the
// directory of its build on its last line, building it the first time.
func scriptDir(t *testing.T, script string, args ...string) string {
	t.Helper()
	cmd := exec.Command(script, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", script, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

func startCluster(t *testing.T) (c *cluster, err error) {
	base, err := readHost(guestsOnly(), nil)
	if err != nil {
		return nil, fmt.Errorf("read the host's state: %w", err)
	}
	if err := refuseLiveNode(base); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "nodeinit-k8s-")
	if err != nil {
		return nil, err
	}
	c = &cluster{dir: dir, bin: k8sBin(t), net: clusterBin(t), base: base}
	defer func() {
		if err != nil {
			for _, e := range c.close() {
				t.Logf("cleaning up after the failed start: %v", e)
			}
			c = nil
		}
	}()
	for _, b := range []string{"kubelet", "kube-proxy", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "crictl", "containerd-" + containerd2Version + "/containerd"} {
		if _, err := os.Stat(filepath.Join(c.bin, b)); err != nil {
			return c, fmt.Errorf("%s is missing from %s: run make k8s", b, c.bin)
		}
	}
	if _, err := os.Stat(filepath.Join(c.net, "etcd")); err != nil {
		return c, fmt.Errorf("etcd is missing from %s: run make cluster-build", c.net)
	}
	if !guestsOnly() {
		if c.nodeIP, err = hostIP(); err != nil {
			return c, err
		}
	}

	start := time.Now()
	if err := c.startControlPlane(); err != nil {
		return c, err
	}
	c.controlPlane = time.Since(start)
	t.Logf("control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) ready in %v", c.controlPlane.Round(10*time.Millisecond))

	start = time.Now()
	if c.podman, err = newPodman(filepath.Join(dir, "podman")); err != nil {
		return c, err
	}
	archives, err := c.buildPodImages(t)
	if err != nil {
		return c, err
	}
	c.archives = archives
	if c.containerd, err = startContainerdFrom(filepath.Join(dir, "containerd"), filepath.Join(c.bin, "crictl"), filepath.Join(c.bin, "containerd-"+containerd2Version), containerd2Config); err != nil {
		return c, err
	}
	c.servers = append(c.servers, c.containerd.server)
	for _, a := range archives {
		if err := c.containerd.importImage(a); err != nil {
			return c, err
		}
	}
	c.images = time.Since(start)
	t.Logf("pause and busybox images built from scratch and imported into containerd in %v", c.images.Round(10*time.Millisecond))
	return c, nil
}

// refuseLiveNode stops the fixture from running over a node: a kubelet or
// control plane of the host, or what a node leaves (pod cgroups, the
// kubelet's directory, kube-proxy's rules, the pod bridge), which the
// clean-up would take for its own. A run that was killed leaves these
// behind too: then they are named, to be removed by hand.
func refuseLiveNode(base *hostState) error {
	for _, name := range []string{"kubelet", "kube-proxy", "kube-apiserver", "etcd"} {
		if pids := processesNamed(name); len(pids) > 0 {
			return fmt.Errorf("a %s runs on this host's network already (pid %v): the real-node tests need a machine of their own", name, pids)
		}
	}
	var found []string
	if base.paths["/var/lib/kubelet"] {
		found = append(found, "/var/lib/kubelet")
	}
	found = append(found, base.cgroups...)
	for t, listing := range base.tables {
		if strings.HasSuffix(t, " kube-proxy") || strings.Contains(listing, "KUBE-") {
			found = append(found, "nftables table "+t+" with kube-proxy's or the kubelet's rules")
		}
	}
	if slices.Contains(base.links, bridgeName) {
		found = append(found, "network link "+bridgeName)
	}
	if len(found) > 0 {
		return fmt.Errorf("this host has a node's state already (a node of its own, or a test run that was killed): %s", strings.Join(found, "; "))
	}
	return nil
}

// processesNamed lists the pids whose command name is name, in this
// process's network namespace: one in another (a node container's, or the
// VM suite's beside make e2e-k8s) holds none of this namespace's ports and
// programs none of its rules.
func processesNamed(name string) []int {
	var pids []int
	self, _ := os.Readlink("/proc/self/ns/net")
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		if st, err := testenv.ReadStat(pid); err != nil || st.Comm != name {
			continue
		}
		// A zombie has no namespaces left to read: it counts.
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid)); err != nil || ns == self {
			pids = append(pids, pid)
		}
	}
	return pids
}

// hostIP is the host's own IPv4 address, the one its default route leaves
// from, else the first one of an interface that is up. The kubelet reports
// it as the Node's address; nothing listens on it.
func hostIP() (string, error) {
	if conn, err := net.Dial("udp4", "192.0.2.1:9"); err == nil { // no packet is sent: only a route lookup
		ip := conn.LocalAddr().(*net.UDPAddr).IP
		conn.Close()
		if !ip.IsLoopback() {
			return ip.String(), nil
		}
	}
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		if i.Flags&net.FlagUp == 0 || i.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
				return n.IP.String(), nil
			}
		}
	}
	return "", errors.New("the host has no IPv4 address on an interface that is up, for the kubelet's --node-ip")
}

// close stops every server, removes the pods and what the fixture made,
// and compares the host with how it was; it returns what it could not put
// back.
func (c *cluster) close() []error {
	var errs []error
	if c.containerd != nil {
		errs = append(errs, c.containerd.removePods()...)
	}
	for i := len(c.servers) - 1; i >= 0; i-- {
		s := c.servers[i]
		if err := s.stop(15 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if c.podman != nil {
		errs = append(errs, c.podman.close()...)
	}
	errs = append(errs, putBack(c.base, c.bin)...)
	// Whatever the fixture started names its directory on its command line:
	// containerd's shims, conmon, a kubelet or kube-proxy. A shim whose last
	// container was just deleted is told to exit and may still be on its
	// way out: each is given a few seconds.
	for _, pid := range stillRunning(c.dir, 10*time.Second) {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if bundle, ok := leakedShim(pid); ok {
			// removePods saw containerd hold no container, and this shim's
			// bundle is deleted: containerd lost it while a task's creation
			// or deletion was cut short (containerd's issues 6860, 7496,
			// 11392), and nothing will ever tell it to exit.
			unix.Kill(pid, unix.SIGKILL)
			fmt.Printf("containerd left the shim of a container it no longer holds (bundle %s); killed pid %d: %s\n", bundle, pid, strings.ReplaceAll(string(cmdline), "\x00", " "))
			continue
		}
		errs = append(errs, fmt.Errorf("process %d that the fixture started still runs: %s", pid, strings.ReplaceAll(string(cmdline), "\x00", " ")))
	}
	if c.dir != "" {
		if err := removeAll(c.dir); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, c.base.verify(c.dir)...)
	return errs
}

// leakedShim says whether pid is a runc shim whose bundle, its working
// directory, has been deleted, and names the bundle.
func leakedShim(pid int) (string, bool) {
	if st, err := testenv.ReadStat(pid); err != nil || !strings.HasPrefix(st.Comm, "containerd-shim") {
		return "", false
	}
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	if err != nil {
		return "", false
	}
	bundle, deleted := strings.CutSuffix(cwd, " (deleted)")
	return bundle, deleted
}

// stillRunning lists the processes naming arg on their command line that
// still run after timeout.
func stillRunning(arg string, timeout time.Duration) []int {
	deadline := time.Now().Add(timeout)
	for {
		pids := testenv.ProcessesWithArg(arg)
		if len(pids) == 0 || time.Now().After(deadline) {
			return pids
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitHTTP waits up to timeout for url to answer 200, failing early with the
// server's log when the server has exited.
func waitHTTP(client *http.Client, url string, s *server, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			last = resp.Status
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				cancel()
				return nil
			}
		} else {
			last = err.Error()
		}
		cancel()
		if s != nil && !s.running() {
			return fmt.Errorf("%s exited (%v) before %s answered\n%s", s.name, s.err, url, s.tail())
		}
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("%s did not answer 200 within %v (last: %s)", url, timeout, last)
			if s != nil {
				msg += "\n" + s.tail()
			}
			return errors.New(msg)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitObject waits until the object at path exists (watching its
// collection for it by name).
func (c *cluster) waitObject(ctx context.Context, collection, name string) error {
	q := url.Values{"fieldSelector": {"metadata.name=" + name}}
	_, err := watchUntil(ctx, c.api, collection, q, func(o struct{ Metadata objectMeta }) string { return o.Metadata.Name },
		func(items []struct{ Metadata objectMeta }) bool { return len(items) > 0 })
	if err != nil {
		return fmt.Errorf("%s %s: %w", collection, name, err)
	}
	return nil
}

func dirExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
