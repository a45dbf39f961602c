package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The cluster's address ranges: the pods' (each node gets a /24 from the
// controller-manager) and the Services', as kind has them.
const (
	PodCIDR     = "10.244.0.0/16"
	ServiceCIDR = "10.96.0.0/16"
	// DNSIP is the kube-dns Service's cluster IP.
	DNSIP = "10.96.0.10"
	// DefaultSubnet is the podman network's: the control plane at .2, the
	// nodes from .11.
	DefaultSubnet = "172.30.40.0/24"
	// stopTimeout is podman's stop timeout for a node: above twice the
	// node image's 20 s shutdown grace period.
	stopTimeout = 60
)

// Config is what a cluster is made from.
type Config struct {
	// Name names the podman network, the containers (NAME-control-plane,
	// NAME-worker, NAME-worker2, ...) and the kubeconfig's context.
	Name string `json:"name"`
	// Nodes is how many node containers the cluster has (at least 1).
	Nodes int `json:"nodes"`
	// Dir is the cluster's directory: its podman store, certificates,
	// kubeconfigs and images. It must not exist yet, or be empty.
	Dir string `json:"dir"`
	// Subnet is the podman network's IPv4 subnet, a /24 or larger.
	Subnet string `json:"subnet"`
	// K8sBin is the directory of the Kubernetes binaries
	// (test/k8s/build/build.sh), with containerd 2 in containerd-VERSION/.
	K8sBin string `json:"k8sBin"`
	// NetBin is the directory of flanneld, the flannel CNI plugin,
	// coredns and etcd (test/cluster/build/build.sh).
	NetBin string `json:"netBin"`
	// Repo is the repository's root: the node image's Dockerfile and
	// configuration.
	Repo string `json:"repo"`
	// NodeInit is a static nodeinit for the node image (make build).
	NodeInit string `json:"nodeinit"`
	// Pause is the pods' sandbox program (test/k8s/pause, built static).
	Pause string `json:"pause"`
	// BaseCache is where the node image's Debian root is kept once made.
	BaseCache string `json:"baseCache"`
	// Flavor is what supervises each node's containerd, kubelet and
	// kube-proxy: FlavorNodeinit (the default) or FlavorSystemd.
	Flavor string `json:"flavor"`
}

// The node flavors. Both have the same containerd 2 and configuration,
// kubelet and kube-proxy with the same flags, volumes and kubeconfigs;
// the supervisor alone differs.
const (
	// FlavorNodeinit nodes are images/node-runtime: nodeinit as PID 1.
	FlavorNodeinit = "nodeinit"
	// FlavorSystemd nodes are images/systemd-node-runtime, kind's model:
	// systemd as PID 1 with containerd, the kubelet and kube-proxy as
	// units.
	FlavorSystemd = "systemd"
)

// containerd2 is the containerd release of the Kubernetes build's cache.
const containerd2 = "containerd-v2.4.2"

// Cluster is a cluster that runs, or whose directory holds what it made.
type Cluster struct {
	Config
	// Gateway is the host's address on the network, ControlPlane the API
	// server's, NodeIPs the nodes' in order.
	Gateway      string   `json:"gateway"`
	ControlPlane string   `json:"controlPlane"`
	NodeNames    []string `json:"nodeNames"`
	NodeIPs      []string `json:"nodeIPs"`
	// Host is the machine's state before the cluster, put back by Delete.
	Host *HostState `json:"host"`
	// Times are how long the steps of Create took.
	Times Times `json:"times"`

	podman *podman
	logf   func(format string, args ...any)
}

// Times are the measured steps of a Create.
type Times struct {
	Images       time.Duration            `json:"images"`       // the images built and saved
	ControlPlane time.Duration            `json:"controlPlane"` // the API server ready, from its container's start
	NodesBegin   time.Duration            `json:"nodesBegin"`   // the first node container's start, from Create's start
	NodesStarted time.Duration            `json:"nodesStarted"` // every node container started, images loaded, from Create's start
	NodeReady    map[string]time.Duration `json:"nodeReady"`    // each Node Ready, from Create's start
	FirstReady   time.Duration            `json:"firstReady"`
	AllReady     time.Duration            `json:"allReady"`
	Addons       time.Duration            `json:"addons"` // flannel on every node and CoreDNS available, from Create's start
	Total        time.Duration            `json:"total"`
}

// Bridge is the name of the cluster network's bridge on the host. podman
// numbers the bridges (podman1, podman2, ...) by what its store and the
// host have at the time, and each cluster has a store of its own: a
// cluster whose bridge is not up yet, or has gone down, leaves its number
// to the next cluster, and the deletion of either would take the other's
// bridge. A name of the cluster's own (15 characters at most) cannot be
// taken.
func (c *Cluster) Bridge() string {
	if b := "nic-" + c.Name; len(b) <= 15 {
		return b
	}
	sum := sha256.Sum256([]byte(c.Name))
	return "nic-" + hex.EncodeToString(sum[:])[:11]
}

// createNetwork creates the cluster's podman network with its bridge
// named Bridge. podman 4.3 has no --interface-name: the name is set in
// the network's file in the store, which podman reads at each command,
// before any container has made the bridge.
func (c *Cluster) createNetwork() error {
	if _, err := c.podman.run(time.Minute, "network", "create", "--disable-dns", "--subnet", c.Subnet, "--gateway", c.Gateway, c.Name); err != nil {
		return err
	}
	file := filepath.Join(c.podman.dir, "networks", c.Name+".json")
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var network map[string]any
	if err := json.Unmarshal(b, &network); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	network["network_interface"] = c.Bridge()
	if b, err = json.MarshalIndent(network, "", "     "); err != nil {
		return err
	}
	return os.WriteFile(file, b, 0o644)
}

// APIServer is the API server's URL.
func (c *Cluster) APIServer() string { return "https://" + c.ControlPlane + ":6443" }

// Kubeconfig is the administrator's kubeconfig.
func (c *Cluster) Kubeconfig() string { return filepath.Join(c.Dir, "kubeconfig") }

// nodeName is the name of the i-th node (0-based), as kind names workers.
func nodeName(cluster string, i int) string {
	if i == 0 {
		return cluster + "-worker"
	}
	return cluster + "-worker" + strconv.Itoa(i+1)
}

// addresses derives the gateway, control plane and node addresses from
// the subnet.
func (c *Cluster) addresses() error {
	p, err := netip.ParsePrefix(c.Subnet)
	if err != nil || !p.Addr().Is4() || p.Bits() > 24 {
		return fmt.Errorf("subnet %q: want an IPv4 subnet of /24 or larger", c.Subnet)
	}
	base := p.Masked().Addr().As4()
	at := func(n int) string {
		a := base
		a[3] = byte(n)
		return netip.AddrFrom4(a).String()
	}
	c.Gateway, c.ControlPlane = at(1), at(2)
	if c.Nodes < 1 || c.Nodes > 200 {
		return fmt.Errorf("%d nodes: want 1 to 200", c.Nodes)
	}
	c.NodeNames, c.NodeIPs = nil, nil
	for i := range c.Nodes {
		c.NodeNames = append(c.NodeNames, nodeName(c.Name, i))
		c.NodeIPs = append(c.NodeIPs, at(11+i))
	}
	return nil
}

// statePath is where a cluster's description is kept in its directory.
func statePath(dir string) string { return filepath.Join(dir, "cluster.json") }

func (c *Cluster) save() error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(statePath(c.Dir), b, 0o600)
}

// Open reads the cluster whose directory is dir.
func Open(dir string, logf func(string, ...any)) (*Cluster, error) {
	b, err := os.ReadFile(statePath(dir))
	if err != nil {
		return nil, fmt.Errorf("no cluster in %s: %w", dir, err)
	}
	c := &Cluster{logf: logf}
	if err := json.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("%s: %w", statePath(dir), err)
	}
	if c.Flavor == "" {
		c.Flavor = FlavorNodeinit
	}
	if c.podman, err = newPodman(filepath.Join(dir, "podman")); err != nil {
		return nil, err
	}
	return c, nil
}

// Create makes the cluster: the images, the certificates, the network, the
// control plane, the nodes with the images loaded, flannel and CoreDNS; it
// returns once every Node is Ready, flannel runs on each and CoreDNS is
// available. On an error the cluster is left as far as it came, for its
// logs: Delete removes it.
func Create(cfg Config, logf func(string, ...any)) (*Cluster, error) {
	start := time.Now()
	if cfg.Name == "" || strings.ContainsAny(cfg.Name, "/ ") {
		return nil, fmt.Errorf("cluster name %q: want a name without slashes or spaces", cfg.Name)
	}
	if cfg.Subnet == "" {
		cfg.Subnet = DefaultSubnet
	}
	if cfg.Flavor == "" {
		cfg.Flavor = FlavorNodeinit
	}
	if cfg.Flavor != FlavorNodeinit && cfg.Flavor != FlavorSystemd {
		return nil, fmt.Errorf("flavor %q: want %s or %s", cfg.Flavor, FlavorNodeinit, FlavorSystemd)
	}
	c := &Cluster{Config: cfg, logf: logf, Times: Times{NodeReady: map[string]time.Duration{}}}
	if err := c.addresses(); err != nil {
		return nil, err
	}
	if err := c.checkInputs(); err != nil {
		return nil, err
	}
	if entries, err := os.ReadDir(c.Dir); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("%s is not empty: a cluster is there already (delete it first)", c.Dir)
	}
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return nil, err
	}
	var err error
	if c.Host, err = ReadHost(); err != nil {
		return nil, err
	}
	c.machineSettings(c.otherClusters())
	if err := c.register(); err != nil {
		return nil, err
	}
	if c.Flavor == FlavorSystemd {
		if err := raiseInotifyLimits(); err != nil {
			return nil, fmt.Errorf("raise the inotify limits: %w", err)
		}
	}
	if c.podman, err = newPodman(filepath.Join(c.Dir, "podman")); err != nil {
		return nil, err
	}
	if err := c.save(); err != nil {
		return nil, err
	}

	t := time.Now()
	if err := c.buildImages(); err != nil {
		return c, err
	}
	c.Times.Images = time.Since(t)
	c.logf("images built in %v", c.Times.Images.Round(100*time.Millisecond))
	if err := c.writePKI(); err != nil {
		return c, err
	}
	if err := c.createNetwork(); err != nil {
		return c, err
	}
	t = time.Now()
	if err := c.startControlPlane(); err != nil {
		return c, err
	}
	c.Times.ControlPlane = time.Since(t)
	c.logf("control plane ready at %s in %v", c.APIServer(), c.Times.ControlPlane.Round(100*time.Millisecond))
	if err := c.applyAddons(); err != nil {
		return c, err
	}

	// Each node's Ready is awaited from when its images are in: the loads
	// take turns (concurrentLoads), and a node has no pod network before.
	ready := make(chan error, len(c.NodeNames))
	loaded := make([]chan struct{}, len(c.NodeNames))
	var mu sync.Mutex
	for i, n := range c.NodeNames {
		loaded[i] = make(chan struct{})
		go func() {
			<-loaded[i]
			err := c.kubectl(5*time.Minute, "wait", "--for=create", "node/"+n, "--timeout=300s")
			if err == nil {
				err = c.kubectl(5*time.Minute, "wait", "--for=condition=Ready", "node/"+n, "--timeout=300s")
			}
			mu.Lock()
			c.Times.NodeReady[n] = time.Since(start)
			mu.Unlock()
			ready <- err
		}()
	}
	c.Times.NodesBegin = time.Since(start)
	started := make(chan error, len(c.NodeNames))
	loads := make(chan struct{}, concurrentLoads)
	for i := range c.NodeNames {
		go func() {
			err := c.startNode(i, loads)
			close(loaded[i])
			started <- err
		}()
	}
	var errs []error
	for range c.NodeNames {
		errs = append(errs, <-started)
	}
	c.Times.NodesStarted = time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return c, err
	}
	for range c.NodeNames {
		errs = append(errs, <-ready)
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("the nodes did not all become Ready: %w", err)
	}
	for _, d := range c.Times.NodeReady {
		if c.Times.FirstReady == 0 || d < c.Times.FirstReady {
			c.Times.FirstReady = d
		}
		c.Times.AllReady = max(c.Times.AllReady, d)
	}
	c.logf("first node Ready %v after the start (%v after the nodes' start), all %d %v (%v)",
		c.Times.FirstReady.Round(100*time.Millisecond), (c.Times.FirstReady - c.Times.NodesBegin).Round(100*time.Millisecond),
		len(c.NodeNames), c.Times.AllReady.Round(100*time.Millisecond), (c.Times.AllReady - c.Times.NodesBegin).Round(100*time.Millisecond))
	if err := c.routeToPods(); err != nil {
		return c, err
	}
	if err := c.waitAddons(); err != nil {
		return c, err
	}
	c.Times.Addons = time.Since(start)
	c.Times.Total = time.Since(start)
	c.logf("flannel on every node and CoreDNS available %v after the start", c.Times.Addons.Round(100*time.Millisecond))
	return c, c.save()
}

// checkInputs checks that every program the cluster needs is there.
func (c *Cluster) checkInputs() error {
	var missing []string
	for _, p := range []string{
		filepath.Join(c.K8sBin, "kubelet"), filepath.Join(c.K8sBin, "kube-proxy"), filepath.Join(c.K8sBin, "kube-apiserver"),
		filepath.Join(c.K8sBin, "kube-controller-manager"), filepath.Join(c.K8sBin, "kube-scheduler"), filepath.Join(c.K8sBin, "kubectl"),
		filepath.Join(c.K8sBin, containerd2, "containerd"), filepath.Join(c.K8sBin, containerd2, "containerd-shim-runc-v2"),
		filepath.Join(c.K8sBin, containerd2, "ctr"),
		filepath.Join(c.NetBin, "flanneld"), filepath.Join(c.NetBin, "flannel"), filepath.Join(c.NetBin, "install-conf"),
		filepath.Join(c.NetBin, "coredns"), filepath.Join(c.NetBin, "etcd"), c.NodeInit, c.Pause, "/bin/busybox",
		filepath.Join(c.Repo, "images/node-runtime/Dockerfile"),
		filepath.Join(c.Repo, "images/systemd-node-runtime/Dockerfile"),
	} {
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, p)
		}
	}
	for _, tool := range []string{"podman", "mmdebstrap", "runc"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing: %s (make k8s, make cluster-build and make build make the binaries; apt-get installs podman, mmdebstrap, runc and busybox-static)", strings.Join(missing, ", "))
	}
	return nil
}

// kubectl runs the Kubernetes build's kubectl against the cluster,
// bounded; its output goes to the error when it fails.
func (c *Cluster) kubectl(timeout time.Duration, args ...string) error {
	_, err := c.Kubectl(timeout, args...)
	return err
}

// Kubectl runs kubectl against the cluster, bounded, and returns its
// standard output.
func (c *Cluster) Kubectl(timeout time.Duration, args ...string) (string, error) {
	return run(timeout, filepath.Join(c.K8sBin, "kubectl"), append([]string{"--kubeconfig=" + c.Kubeconfig()}, args...)...)
}

// KubectlIn runs kubectl with stdin.
func (c *Cluster) KubectlIn(timeout time.Duration, stdin string, args ...string) (string, error) {
	return runIn(timeout, strings.NewReader(stdin), filepath.Join(c.K8sBin, "kubectl"), append([]string{"--kubeconfig=" + c.Kubeconfig()}, args...)...)
}

// Podman runs podman in the cluster's store.
func (c *Cluster) Podman(timeout time.Duration, args ...string) (string, error) {
	return c.podman.run(timeout, args...)
}
