package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// pkiDir is the cluster's certificates and the control plane's
// kubeconfigs, mounted read-only into the control plane's containers.
func (c *Cluster) pkiDir() string { return filepath.Join(c.Dir, "pki") }

// nodeDir is a node's /etc/kubernetes: its kubeconfigs, its kubelet's
// configuration and the CA, mounted read-only into the node.
func (c *Cluster) nodeDir(node string) string { return filepath.Join(c.Dir, "nodes", node) }

// writePKI makes the CA, every component's certificate and kubeconfig,
// each node's files and the administrator's kubeconfig. Each node joins
// with a kubeconfig of its own (CN system:node:NAME, O system:nodes).
func (c *Cluster) writePKI() error {
	p, err := newPKI(c.pkiDir())
	if err != nil {
		return err
	}
	if err := p.serviceAccountKeys(); err != nil {
		return err
	}
	if _, err := p.issue("apiserver", "kube-apiserver", nil, c.ControlPlane, "10.96.0.1", "127.0.0.1", "localhost",
		c.Name+"-control-plane", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"); err != nil {
		return err
	}
	// The API server's client identity toward aggregated API servers (the
	// front proxy, kubeadm's front-proxy-client): they take the user it
	// proxies for from its headers, from this name only.
	if _, err := p.issue("front-proxy-client", "front-proxy-client", nil); err != nil {
		return err
	}
	if _, err := p.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}); err != nil {
		return err
	}
	admin, err := p.issue("admin", "nodeinit-cluster-admin", []string{"system:masters"})
	if err != nil {
		return err
	}
	if err := os.WriteFile(c.Kubeconfig(), p.kubeconfig(c.Name, c.APIServer(), admin), 0o600); err != nil {
		return err
	}
	for _, id := range []struct{ name, cn string }{
		{"controller-manager", "system:kube-controller-manager"},
		{"scheduler", "system:kube-scheduler"},
	} {
		cert, err := p.issue(id.name, id.cn, nil)
		if err != nil {
			return err
		}
		// In the control plane's network namespace the API server is
		// on the loopback too.
		if err := os.WriteFile(p.path(id.name+".conf"), p.kubeconfig(c.Name, "https://127.0.0.1:6443", cert), 0o600); err != nil {
			return err
		}
	}
	proxy, err := p.issue("kube-proxy", "system:kube-proxy", nil)
	if err != nil {
		return err
	}
	for _, n := range c.NodeNames {
		kubelet, err := p.issue("kubelet-"+n, "system:node:"+n, []string{"system:nodes"})
		if err != nil {
			return err
		}
		files := map[string][]byte{
			"kubelet.conf":    p.kubeconfig(c.Name, c.APIServer(), kubelet),
			"kube-proxy.conf": p.kubeconfig(c.Name, c.APIServer(), proxy),
			"kubelet.yaml":    []byte(c.kubeletConfig(n)),
			"ca.crt":          p.caPEM,
		}
		if c.Flavor == FlavorSystemd {
			files["kube-proxy.env"] = []byte(kubeProxyEnv())
		}
		for name, data := range files {
			f := filepath.Join(c.nodeDir(n), name)
			if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(f, data, 0o600); err != nil {
				return err
			}
		}
	}
	return nil
}

// cgroupV1 is whether the machine's cgroups are v1 hierarchies (or
// hybrid), not the unified v2 tree alone.
func cgroupV1() bool {
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	return err != nil
}

// nodeCgroup is the cgroup under which a node's container and its pods
// live on a cgroup v1 host: podman's --cgroup-parent, and the kubelet's
// cgroupRoot. Every node needs its own: a kubelet removes the pod cgroups
// it does not know below its root, with their processes.
func (c *Cluster) nodeCgroup(node string) string {
	return "/" + cgroupPrefix + c.Name + "/" + node
}

// cgroupPrefix begins the name of every cluster's top cgroup.
const cgroupPrefix = "nodeinit-cluster-"

// kubeletConfig is a node's KubeletConfiguration. The kubelet takes its
// cgroup driver from containerd over the CRI. On a cgroup v1 host the
// node sees the host's hierarchies (--cgroupns=host, as podman has it
// there), so its pods go below a cgroup of the node's own; on a v2 host
// the node has a private cgroup namespace and the kubelet its default
// root, where nodeinit makes room for it.
//   - failCgroupV1 false, failSwapOn false: a v1 host, swap on the host.
//   - x509 client authentication against the cluster's CA, no anonymous
//     access; every authenticated client allowed.
//   - eviction and image garbage-collection thresholds a node never
//     reaches: the images were loaded, they cannot be pulled again.
func (c *Cluster) kubeletConfig(node string) string {
	root := ""
	if cgroupV1() {
		root = "cgroupRoot: " + c.nodeCgroup(node) + "\n"
	}
	return `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
` + root + `failCgroupV1: false
failSwapOn: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: /etc/kubernetes/ca.crt}
authorization: {mode: AlwaysAllow}
clusterDNS: [` + DNSIP + `]
clusterDomain: cluster.local
evictionHard: {memory.available: 1Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
rotateCertificates: false
`
}

// controlPlaneContainers are the control plane's containers, in the order
// they start: etcd holds the network namespace (the control plane's
// address) and the others join it.
func (c *Cluster) controlPlaneContainers() []string {
	return []string{c.Name + "-control-plane", c.Name + "-kube-apiserver", c.Name + "-kube-controller-manager", c.Name + "-kube-scheduler"}
}

// startControlPlane starts etcd, kube-apiserver, kube-controller-manager
// and kube-scheduler, each in a container of the node image with the
// Kubernetes build's binaries mounted in, and waits until the API serves
// and the controllers have made what pods need.
func (c *Cluster) startControlPlane() error {
	names := c.controlPlaneContainers()
	const pki = "/etc/kubernetes/pki"
	mounts := []string{"-v", c.pkiDir() + ":" + pki + ":ro", "-v", c.K8sBin + ":/opt/kubernetes:ro"}
	common := append([]string{"run", "-d", "--stop-timeout", "10"}, mounts...)
	etcd := append(append([]string{}, common...), "--name", names[0], "--hostname", names[0],
		"--network", c.Name, "--ip", c.ControlPlane, "-v", names[0]+"-etcd:/var/lib/etcd",
		"-v", filepath.Join(c.NetBin, "etcd")+":/usr/local/bin/etcd:ro", "--entrypoint", "/usr/local/bin/etcd", NodeImage,
		"--name=control-plane", "--data-dir=/var/lib/etcd",
		"--listen-client-urls=http://127.0.0.1:2379", "--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=control-plane=http://127.0.0.1:2380")
	if _, err := c.podman.run(2*time.Minute, etcd...); err != nil {
		return err
	}
	join := func(name, bin string, args ...string) error {
		argv := append(append([]string{}, common...), "--name", name, "--network", "container:"+names[0],
			"--entrypoint", "/opt/kubernetes/"+bin, NodeImage)
		_, err := c.podman.run(2*time.Minute, append(argv, args...)...)
		return err
	}
	if err := join(names[1], "kube-apiserver",
		"--etcd-servers=http://127.0.0.1:2379",
		"--bind-address=0.0.0.0", "--secure-port=6443", "--advertise-address="+c.ControlPlane,
		"--cert-dir=/tmp/apiserver",
		"--tls-cert-file="+pki+"/apiserver.crt", "--tls-private-key-file="+pki+"/apiserver.key",
		"--client-ca-file="+pki+"/ca.crt",
		"--kubelet-client-certificate="+pki+"/apiserver-kubelet-client.crt", "--kubelet-client-key="+pki+"/apiserver-kubelet-client.key",
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+pki+"/sa.pub", "--service-account-signing-key-file="+pki+"/sa.key",
		"--service-cluster-ip-range="+ServiceCIDR,
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true", "--profiling=false",
		// The API server is no node: no kube-proxy translates a Service's
		// address in its network namespace. It reaches webhooks and
		// aggregated APIs at their Services' endpoints (pods) instead,
		// over the routes routeToPods gives it.
		"--enable-aggregator-routing=true",
		// The front proxy, as kubeadm configures it, but with the
		// cluster's one CA: an aggregated API server trusts the user
		// named in these headers from front-proxy-client alone.
		"--requestheader-client-ca-file="+pki+"/ca.crt", "--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file="+pki+"/front-proxy-client.crt", "--proxy-client-key-file="+pki+"/front-proxy-client.key"); err != nil {
		return err
	}
	if err := c.waitAPI(2 * time.Minute); err != nil {
		return err
	}
	if err := join(names[2], "kube-controller-manager",
		"--kubeconfig="+pki+"/controller-manager.conf",
		"--authentication-kubeconfig="+pki+"/controller-manager.conf", "--authorization-kubeconfig="+pki+"/controller-manager.conf",
		"--bind-address=127.0.0.1", "--cert-dir=/tmp/controller-manager",
		"--use-service-account-credentials", "--root-ca-file="+pki+"/ca.crt",
		"--service-account-private-key-file="+pki+"/sa.key",
		"--cluster-signing-cert-file="+pki+"/ca.crt", "--cluster-signing-key-file="+pki+"/ca.key",
		"--allocate-node-cidrs", "--cluster-cidr="+PodCIDR, "--node-cidr-mask-size=24", "--service-cluster-ip-range="+ServiceCIDR,
		"--flex-volume-plugin-dir=/tmp/volume-plugins",
		"--leader-elect=false", "--profiling=false"); err != nil {
		return err
	}
	if err := join(names[3], "kube-scheduler",
		"--kubeconfig="+pki+"/scheduler.conf",
		"--authentication-kubeconfig="+pki+"/scheduler.conf", "--authorization-kubeconfig="+pki+"/scheduler.conf",
		"--bind-address=127.0.0.1", "--leader-elect=false", "--profiling=false"); err != nil {
		return err
	}
	// What pods need before the first one runs: the default
	// ServiceAccount and the kube-root-ca.crt ConfigMap.
	for _, o := range []string{"serviceaccount/default", "configmap/kube-root-ca.crt"} {
		if err := c.kubectl(2*time.Minute, "wait", "--for=create", "--namespace=default", o, "--timeout=120s"); err != nil {
			return fmt.Errorf("the controller-manager made no %s: %w\n%s", o, err, c.containerLog(names[2], 20))
		}
	}
	return nil
}

// waitAPI waits until the API server answers /readyz, failing early with
// its log when its container has ended.
func (c *Cluster) waitAPI(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	api := c.controlPlaneContainers()[1]
	for {
		out, err := c.Kubectl(5*time.Second, "get", "--raw=/readyz")
		if err == nil && strings.TrimSpace(out) == "ok" {
			return nil
		}
		if state, _ := c.podman.run(30*time.Second, "inspect", "--format", "{{.State.Status}}", api); strings.TrimSpace(state) != "running" {
			return fmt.Errorf("the API server's container is %s:\n%s", strings.TrimSpace(state), c.containerLog(api, 30))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the API server did not answer /readyz within %v: %v\n%s", timeout, err, c.containerLog(api, 30))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// containerLog is the last n lines of a container's log.
func (c *Cluster) containerLog(name string, n int) string {
	out, err := c.podman.combined(30*time.Second, "logs", "--tail", fmt.Sprint(n), name)
	if err != nil {
		return out + err.Error()
	}
	return out
}

// routeToPods routes each node's pod CIDR, in the control plane's network
// namespace, to the node's address. The API server reaches pods for
// `kubectl port-forward`'s and the pods' proxy, webhooks and aggregated
// APIs; in kind the control plane is a node whose CNI routes it there.
// Here it is not a node, and takes the routes a cloud's route controller
// would write into the network: each node forwards to its pods, whose
// network flannel makes.
func (c *Cluster) routeToPods() error {
	out, err := c.Kubectl(30*time.Second, "get", "nodes", "-o",
		`jsonpath={range .items[*]}{.spec.podCIDR} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}`)
	if err != nil {
		return err
	}
	pid, err := c.podman.run(30*time.Second, "inspect", "--format", "{{.State.Pid}}", c.controlPlaneContainers()[0])
	if err != nil {
		return err
	}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			return fmt.Errorf("a node without a pod CIDR or an address: %q", l)
		}
		if _, err := run(10*time.Second, "nsenter", "--target", strings.TrimSpace(pid), "--net", "ip", "route", "replace", f[0], "via", f[1]); err != nil {
			return fmt.Errorf("route %s to node %s in the control plane: %w", f[0], f[1], err)
		}
	}
	return nil
}
