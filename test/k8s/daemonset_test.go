//go:build k8s

package k8s

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodeinit/nodeinit/test/testenv"
)

const (
	// kubeletLock is the lock file both kubelets take, as the DaemonSet's
	// comment tells the node's own kubelet to.
	kubeletLock = "/run/lock/kubelet.lock"
	// rolloutImage is the node image under a second tag: a new image in
	// the DaemonSet's template rolls it.
	rolloutImage = "localhost/nodeinit-k8s-node:rollout"
	daemonSets   = "/apis/apps/v1/namespaces/kube-system/daemonsets"
	daemonSetPod = "app.kubernetes.io/name=nodeinit-node"
	// kubeletRestartDelay is how long the test's loop waits before it
	// restarts the node's own kubelet, as systemd's Restart= would.
	kubeletRestartDelay = time.Second
	// holdFor is how long each kubelet keeps the node before the next step:
	// a node lease renew interval, over which the new kubelet has synced
	// every pod it found (at its start) and renewed its heartbeat, so that
	// a container it were to restart would be restarted by then.
	holdFor = 10 * time.Second
)

// TestDaemonSetTakesOverTheNodeAndHandsItBack runs the self-hosted handover
// of images/node/daemonset.yaml with the real kubelet, kube-proxy and
// containerd, for each release of the matrix (the node's own kubelet and
// kube-proxy and the image's of the same release): the node's own kubelet
// runs on the host with --lock-file and --exit-on-lock-contention
// (restarted by the test when it exits, as an init system would), and runs
// a 2-replica Deployment behind a ClusterIP Service and a static pod. The
// node image, imported into containerd, is deployed with the manifest; its
// kubelet takes the node over; it dies, OOM-killed by the kernel (the
// suite's release) or killed with SIGKILL (the oldest), and the pod's
// container, restarted by the node's own kubelet, takes the node back;
// with the suite's release the DaemonSet is then rolled to a kubelet that
// exits 1 right after it has taken the lock (its container runtime's
// socket missing), which crash-loops while the node's own kubelet keeps
// the node; the DaemonSet is rolled to a new image tag, then deleted, and
// the node's own kubelet takes the node back. Throughout, the host requests
// the Service every 50 ms, watches the Node, its lease and the pods, and
// samples the lock and the kubelet's port. What must hold: no workload
// container restarted or replaced, no request failed, the Node Ready, only
// the lock's holder serving, the old DaemonSet pod's nodeinit ending within
// its grace period without draining the node, and the dead kubelet's
// nodeinit ending its container with the kubelet's status (137, 1),
// kube-proxy last.
func TestDaemonSetTakesOverTheNodeAndHandsItBack(t *testing.T) {
	c := getCluster(t)
	c.buildNodeImage(t)
	for i, r := range releases(t) {
		t.Run(r.version, func(t *testing.T) { c.checkDaemonSetHandovers(t, r, i == 0) })
	}
}

// checkDaemonSetHandovers is TestDaemonSetTakesOverTheNodeAndHandsItBack
// with release r; suite: r is the suite's release, whose run has the pod's
// kubelet OOM-killed (the oldest's: killed) and the crash loop.
func (c *cluster) checkDaemonSetHandovers(t *testing.T, r release, suite bool) {
	image, rollout := nodeImage, rolloutImage
	if !suite {
		image, rollout = c.releaseNodeImage(t, r)
	}
	c.importNodeImage(t, image, rollout)
	h := c.startHostNode(t, r.bin)
	k := h.k

	_, took := k.waitReady(90 * time.Second)
	t.Logf("the node's own kubelet %s: Node Ready %v after its start", r.version, took.Round(10*time.Millisecond))
	k.deployWeb()
	web := k.waitPods("app=web", 2, 90*time.Second)
	k.waitPods("metadata.name=static-sleeper-"+nodeName, 1, 60*time.Second)
	ip := k.clusterIP()
	k.waitRules("iptables", ip, web, 30*time.Second)
	k.checkService(ip, web, 30*time.Second)
	before := k.workloadContainers()
	h.waitLease(30 * time.Second)

	m := h.monitor(ip)
	defer m.stop()

	// 1. The DaemonSet: the pod's kubelet opens the lock, the node's exits
	// on the contention, the pod's takes the lock and the node.
	start := time.Now()
	h.createDaemonSet(image)
	h.waitHandover(m, "the DaemonSet's pod", start, func(hd holder) bool { return hd.pod != "" }, 2*time.Minute)
	taken, _ := m.holder()
	first := taken.pod
	if v := k.getNode().Status.NodeInfo.KubeletVersion; v != r.version {
		t.Errorf("the Node's kubelet is %s; want %s", v, r.version)
	}
	h.checkWorkload(before, "after the DaemonSet took the node")
	h.checkPodMounts()
	if hd, _ := m.holder(); hd.pod != first {
		t.Fatalf("the lock moved to %v while the DaemonSet pod's kubelet ran a pod", hd)
	}

	// 2. The pod's kubelet dies: its nodeinit ends the container with 137,
	// the node's own kubelet (waiting on the lock in its restart loop)
	// takes the lock and restarts the container in the same pod, and the
	// new container's kubelet takes the node back.
	taken, _ = m.holder()
	h.killPodKubelet(m, taken, suite)
	h.checkWorkload(before, "after the pod's kubelet died")

	// 3. With the suite's release, a rollout to a kubelet that exits 1
	// once it holds the lock: the node's own kubelet takes the node back
	// after each exit, and restarts the crashing container.
	if suite {
		h.crashLoop(m, image, first)
		h.checkWorkload(before, "during the crash loop")
	}

	// 4. A rollout to a new image tag: the old pod ends on TERM (or, the
	// crashing one, is deleted), the node's own kubelet takes the lock it
	// leaves and starts the new pod, whose kubelet takes the node.
	start = time.Now()
	h.setDaemonSet(rollout, nil)
	h.waitHandover(m, "the rolled DaemonSet's pod", start, func(hd holder) bool { return hd.pod != "" && hd.pod != first && !h.crashed[hd.pod] }, 3*time.Minute)
	h.checkWorkload(before, "after the rollout")

	// 5. The DaemonSet deleted: the node's own kubelet takes the node back.
	start = time.Now()
	h.deleteDaemonSet()
	h.waitHandover(m, "the node's own kubelet", start, func(hd holder) bool { return hd.host }, 2*time.Minute)
	h.waitNoDaemonSetPods(time.Minute)
	h.checkWorkload(before, "after the DaemonSet was deleted")

	// The last requests and events.
	time.Sleep(time.Second)
	m.stop()
	m.report(t)
	h.checkOldPods(m, 2)
	h.checkNodeIdentity(m)
	if t.Failed() {
		h.dumpPodLogs(m)
	}
}

// releaseNodeImage builds the node image with release r's kubelet and
// kube-proxy (the suite's node image with them copied over its own), under
// a tag and a rollout tag of r's, and removes it when the test ends.
func (c *cluster) releaseNodeImage(t *testing.T, r release) (image, rollout string) {
	t.Helper()
	image, rollout = "localhost/nodeinit-k8s-node:"+r.version, "localhost/nodeinit-k8s-node:"+r.version+"-rollout"
	dir := t.TempDir()
	for _, b := range []string{"kubelet", "kube-proxy"} {
		must(t, linkOrCopy(filepath.Join(r.bin, b), filepath.Join(dir, b)))
	}
	start := time.Now()
	must(t, c.podman.build(image, "FROM "+nodeImage+"\nCOPY kubelet kube-proxy /usr/local/bin/\n", dir))
	t.Cleanup(func() { _, _ = c.podman.run(time.Minute, "rmi", "--force", image) })
	t.Logf("the node image with the %s kubelet and kube-proxy built in %v", r.version, time.Since(start).Round(100*time.Millisecond))
	return image, rollout
}

// hostNode is a node whose own kubelet runs on the host, restarted by the
// test's loop, with a kube-proxy of its own, and what the DaemonSet needs
// of it.
type hostNode struct {
	t       *testing.T
	c       *cluster
	k       *kubeNode
	kubelet *kubeletLoop
	proxy   *server
	// guest is the modern host's VM when the node is there: its own
	// kubelet and kube-proxy are the guest's systemd units.
	guest *vm
	// killed is when the kubelet of a DaemonSet pod (by uid) was killed:
	// that pod's container restarts once.
	killed map[string]time.Time
	// crashed are the DaemonSet pods (by uid) whose kubelet crash-looped.
	crashed map[string]bool
}

// startHostNode writes the node's files where the DaemonSet's hostPath
// volumes find them (the KubeletConfiguration in /var/lib/kubelet, the
// kubeconfigs, certificates and static pod in /etc/kubernetes), makes the
// host's /run a shared mount (for the DaemonSet's HostToContainer mount of
// it: systemd makes / shared on a node, these hosts have no systemd), and
// starts the node's own kube-proxy and kubelet, those in bin.
func (c *cluster) startHostNode(t *testing.T, bin string) *hostNode {
	t.Helper()
	const etc = "/etc/kubernetes"
	if _, err := os.Stat(etc); err == nil {
		t.Fatalf("%s exists on this host: the test would write the node's files over it", etc)
	}
	_, libModulesErr := os.Stat("/lib/modules")
	bind := "" // the shared bind of /run, once made
	logs := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(logs, "logs"), 0o755))
	k := &kubeNode{t: t, c: c, dir: logs, started: time.Now()}
	h := &hostNode{t: t, c: c, k: k, killed: map[string]time.Time{}, crashed: map[string]bool{}}

	// Cleanups run last first: this one after the kubelet and kube-proxy
	// are stopped and before the host is compared with how it was.
	t.Cleanup(func() {
		h.stopHost()
		for _, err := range c.containerd.removePods() {
			t.Error(err)
		}
		if bind != "" {
			unmountRunBind(t, bind)
		}
		for _, p := range []string{kubeletLock} {
			if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
				t.Error(err)
			}
		}
		if os.IsNotExist(libModulesErr) {
			// The DaemonSet's DirectoryOrCreate volume made it.
			if err := os.Remove("/lib/modules"); err != nil && !os.IsNotExist(err) {
				t.Error(err)
			}
		}
		k.teardown()
	})

	c.writeImageNodeFiles(t, etc, etc, nodeSpec{})
	must(t, os.Remove(filepath.Join(etc, "kubelet.yaml")))
	must(t, unix.Mount("/run", "/run", "", unix.MS_BIND, ""))
	bind = topRunMount(t)
	must(t, unix.Mount("", "/run", "", unix.MS_SHARED, ""))

	var err error
	h.proxy, err = startServer(filepath.Join(logs, "logs"), "proxy", filepath.Join(bin, "kube-proxy"),
		"--kubeconfig="+etc+"/kube-proxy.conf", "--proxy-mode=iptables", "--hostname-override="+nodeName,
		"--conntrack-max-per-core=0", "--conntrack-min=0", "--conntrack-tcp-timeout-established=0s",
		"--conntrack-tcp-timeout-close-wait=0s", "--iptables-localhost-nodeports=false",
		"--healthz-bind-address=127.0.0.1:10256", "--metrics-bind-address=127.0.0.1:10249",
		"--cluster-cidr="+podCIDR)
	must(t, err)
	h.kubelet = startKubeletLoop(filepath.Join(logs, "logs"), filepath.Join(bin, "kubelet"),
		"--config=/var/lib/kubelet/config.yaml", "--kubeconfig="+etc+"/kubelet.conf",
		"--node-ip="+c.nodeIP, "--hostname-override="+nodeName,
		"--lock-file="+kubeletLock, "--exit-on-lock-contention")
	k.pid = func() int { return os.Getpid() }
	k.running = func() bool { return h.proxy.running() }
	k.log = func() string { return h.kubelet.tail() }
	k.created = append(k.created, daemonSets+"/nodeinit-node",
		"/api/v1/namespaces/kube-system/pods?labelSelector="+url.QueryEscape(daemonSetPod))
	return h
}

// unmountRunBind unmounts the shared bind of /run startHostNode made, and
// first what was mounted inside it: the runtime makes /run/netns a mount
// of its own when, in the bind's view, it is none (once or more: seen
// stacked twice), and the bind is busy while they are there. Seen
// through the bind the host's own mounts below /run are hidden: only
// the bind's own are unmounted.
func unmountRunBind(t *testing.T, bind string) {
	t.Helper()
	for range 20 {
		b, err := os.ReadFile("/proc/self/mountinfo")
		must(t, err)
		if topRunMount(t) != bind {
			t.Errorf("the topmost mount on /run is not the test's shared bind (mount %s): left alone", bind)
			return
		}
		var inside []string
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 4 && f[1] == bind {
				inside = append(inside, f[4])
			}
		}
		if len(inside) == 0 {
			if err := unix.Unmount("/run", 0); err != nil {
				t.Errorf("unmount the shared bind of /run: %v", err)
			}
			return
		}
		for _, m := range inside {
			if err := unix.Unmount(m, 0); err != nil && err != unix.EINVAL {
				t.Errorf("unmount %s in the shared bind of /run: %v", m, err)
				return
			}
		}
	}
	t.Errorf("the shared bind of /run still holds mounts after 20 rounds of unmounts")
}

// topRunMount is the id of the topmost mount on /run, the last one
// mountinfo lists there; "" when /run is no mount.
func topRunMount(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	must(t, err)
	id := ""
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == "/run" {
			id = f[0]
		}
	}
	return id
}

// stopHost stops the node's own kubelet (and its loop) and kube-proxy.
func (h *hostNode) stopHost() {
	if h.kubelet != nil {
		h.kubelet.stop()
	}
	if h.proxy != nil {
		if err := h.proxy.stop(15 * time.Second); err != nil {
			h.t.Error(err)
		}
	}
}

// kubeletLoop runs the node's own kubelet and starts it again
// kubeletRestartDelay after each exit, as an init system's Restart= does.
type kubeletLoop struct {
	mu   sync.Mutex
	cur  *server
	runs []kubeletRun
	halt chan struct{}
	done chan struct{}
	dir  string
}

// kubeletRun is one run of the node's own kubelet.
type kubeletRun struct {
	pid            int
	log            string
	started, ended time.Time
}

func startKubeletLoop(dir string, argv ...string) *kubeletLoop {
	l := &kubeletLoop{halt: make(chan struct{}), done: make(chan struct{}), dir: dir}
	go func() {
		defer close(l.done)
		for n := 1; ; n++ {
			s, err := startServer(dir, fmt.Sprintf("kubelet-%d", n), argv...)
			if err != nil {
				return
			}
			l.mu.Lock()
			l.cur = s
			l.runs = append(l.runs, kubeletRun{pid: s.cmd.Process.Pid, log: s.log, started: time.Now()})
			l.mu.Unlock()
			select {
			case <-s.done:
			case <-l.halt:
				_ = s.stop(30 * time.Second)
			}
			l.mu.Lock()
			l.runs[len(l.runs)-1].ended = time.Now()
			l.mu.Unlock()
			select {
			case <-l.halt:
				return
			case <-time.After(kubeletRestartDelay):
			}
		}
	}()
	return l
}

func (l *kubeletLoop) stop() {
	select {
	case <-l.halt:
	default:
		close(l.halt)
	}
	<-l.done
}

// pid is the pid of the node's own kubelet that runs now, 0 when none.
func (l *kubeletLoop) pid() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.runs); n > 0 && l.runs[n-1].ended.IsZero() {
		return l.runs[n-1].pid
	}
	return 0
}

func (l *kubeletLoop) history() []kubeletRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.runs)
}

// tail is the end of the last run's log.
func (l *kubeletLoop) tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == nil {
		return ""
	}
	return l.cur.tail()
}

// importNodeImage saves the node image image from podman into containerd,
// under its tag and rollout.
func (c *cluster) importNodeImage(t *testing.T, image, rollout string) {
	t.Helper()
	start := time.Now()
	archive := filepath.Join(t.TempDir(), "node.tar")
	if _, err := c.podman.run(5*time.Minute, "save", "--format", "docker-archive", "-o", archive, image); err != nil {
		t.Fatal(err)
	}
	must(t, c.containerd.importImage(archive))
	must(t, os.Remove(archive))
	if _, err := run(time.Minute, c.containerd.ctr, "--address", c.containerd.socket(), "--namespace", "k8s.io", "images", "tag", "--force", image, rollout); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, image := range []string{image, rollout} {
			if _, err := run(time.Minute, c.containerd.ctr, "--address", c.containerd.socket(), "--namespace", "k8s.io", "images", "rm", image); err != nil {
				t.Error(err)
			}
		}
	})
	t.Logf("node image %s saved from podman and imported into containerd in %v", image, time.Since(start).Round(100*time.Millisecond))
}

// manifest is images/node/daemonset.yaml with image, and the index in
// its container's args of the "--" before the kubelet's command line.
func (h *hostNode) manifest(image string) (*appsv1.DaemonSet, int) {
	h.t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(h.t), "images/node/daemonset.yaml"))
	must(h.t, err)
	var ds appsv1.DaemonSet
	must(h.t, yaml.UnmarshalStrict(b, &ds))
	ctr := &ds.Spec.Template.Spec.Containers[0]
	ctr.Image = image
	sep := slices.Index(ctr.Args, "--")
	if sep < 0 {
		h.t.Fatalf("the DaemonSet's args %q have no -- before the kubelet's command line", ctr.Args)
	}
	return &ds, sep
}

// daemonSet is images/node/daemonset.yaml changed where its comment tells
// an operator to, and for the fixture: the image; the node's name and
// address (the fixture's node is not the host's name); kube-proxy's flags
// of the other real-node tests, with its healthz and metrics ports moved
// off the node's own kube-proxy's; and the fixture's containerd, whose
// socket and root are not under /run and /var/lib.
func (h *hostNode) daemonSet(image string) *appsv1.DaemonSet {
	h.t.Helper()
	if h.guest != nil {
		return h.guestDaemonSet(image)
	}
	ds, sep := h.manifest(image)
	ctr := &ds.Spec.Template.Spec.Containers[0]
	var proxy []string
	for _, f := range proxyFlags("iptables") {
		f = strings.Replace(f, ":10256", ":10266", 1)
		proxy = append(proxy, strings.Replace(f, ":10249", ":10269", 1))
	}
	args := append(slices.Clone(ctr.Args[:sep]), proxy...)
	args = append(append(args, ctr.Args[sep:]...), "--node-ip="+h.c.nodeIP, "--hostname-override="+nodeName)
	ctr.Args = args
	socket, root := h.c.containerd.socket(), filepath.Join(h.c.containerd.dir, "root")
	sock := corev1.HostPathSocket
	ds.Spec.Template.Spec.Volumes = append(ds.Spec.Template.Spec.Volumes,
		corev1.Volume{Name: "containerd-socket", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: socket, Type: &sock}}})
	ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: "containerd-socket", MountPath: socket})
	// The manifest's containerd root is the default's; the fixture's is
	// elsewhere.
	for i, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == "containerd-root" {
			ds.Spec.Template.Spec.Volumes[i].HostPath.Path = root
		}
	}
	for i, m := range ctr.VolumeMounts {
		if m.Name == "containerd-root" {
			ctr.VolumeMounts[i].MountPath = root
		}
	}
	return ds
}

// createDaemonSet creates the DaemonSet; the monitor watches the handover.
func (h *hostNode) createDaemonSet(image string) {
	h.t.Helper()
	body, err := json.Marshal(h.daemonSet(image))
	must(h.t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	must(h.t, h.c.api.do(ctx, http.MethodPost, daemonSets, body, nil))
}

// setDaemonSet rolls the DaemonSet to image, with kubeletArgs added to
// the pod's kubelet's command line.
func (h *hostNode) setDaemonSet(image string, kubeletArgs []string) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ds appsv1.DaemonSet
	must(h.t, h.c.api.get(ctx, daemonSets+"/nodeinit-node", &ds))
	ctr := h.daemonSet(image).Spec.Template.Spec.Containers[0]
	ctr.Args = append(ctr.Args, kubeletArgs...)
	ds.Spec.Template.Spec.Containers[0] = ctr
	body, err := json.Marshal(&ds)
	must(h.t, err)
	must(h.t, h.c.api.do(ctx, http.MethodPut, daemonSets+"/nodeinit-node", body, nil))
}

// deleteDaemonSet deletes the DaemonSet; the garbage collector deletes its
// pod, gracefully.
func (h *hostNode) deleteDaemonSet() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	must(h.t, h.c.api.do(ctx, http.MethodDelete, daemonSets+"/nodeinit-node", []byte(`{"propagationPolicy":"Background"}`), nil))
}

// tokenPod needs its service-account token to be Ready: the tmpfs the
// pod's kubelet mounts below /var/lib/kubelet must reach containerd on the
// host (Bidirectional), or the container sees an empty directory.
const tokenPod = `apiVersion: v1
kind: Pod
metadata: {name: token-reader, namespace: default}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: ` + busyboxImage + `
    imagePullPolicy: Never
    command: [sh, -c, 'test -s /var/run/secrets/kubernetes.io/serviceaccount/token && exec sleep 1000000']
    readinessProbe:
      exec: {command: [test, -s, /var/run/secrets/kubernetes.io/serviceaccount/token]}
      periodSeconds: 1
`

// checkPodMounts has the pod's kubelet start a pod that needs its token
// volume, then removes it: the DaemonSet pod's kubelet mounts volumes the
// host's containerd sees.
func (h *hostNode) checkPodMounts() {
	h.t.Helper()
	start := time.Now()
	h.k.create("/api/v1/namespaces/default/pods", "token-reader", tokenPod)
	h.k.waitPods("metadata.name=token-reader", 1, time.Minute)
	h.t.Logf("a pod the DaemonSet pod's kubelet started with its token volume is Ready after %v", time.Since(start).Round(10*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	must(h.t, h.c.api.do(ctx, http.MethodDelete, "/api/v1/namespaces/default/pods/token-reader", []byte(`{"gracePeriodSeconds":1}`), nil))
	for {
		var p pod
		err := h.c.api.get(ctx, "/api/v1/namespaces/default/pods/token-reader", &p)
		if isNotFound(err) {
			return
		}
		if ctx.Err() != nil {
			h.t.Fatalf("the token-reader pod was not removed: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitLease waits for the Node's lease, as a node that has run for a while
// has it: the node's kubelet makes it on its first renewal after the Node
// is registered, up to a renew interval after its start.
func (h *hostNode) waitLease(timeout time.Duration) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := h.c.waitObject(ctx, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", nodeName); err != nil {
		h.t.Fatalf("the node's kubelet made no lease: %v", err)
	}
}

// daemonSetPods lists the DaemonSet's pods.
func (h *hostNode) daemonSetPods() []pod {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var list struct{ Items []pod }
	must(h.t, h.c.api.get(ctx, "/api/v1/namespaces/kube-system/pods?labelSelector="+url.QueryEscape(daemonSetPod), &list))
	return list.Items
}

func (h *hostNode) waitNoDaemonSetPods(timeout time.Duration) {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	for len(h.daemonSetPods()) > 0 {
		if time.Now().After(deadline) {
			h.t.Fatalf("the DaemonSet's pods are still there %v after it was deleted: %s", timeout, podSummary(h.daemonSetPods()))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitHandover waits until the lock is held by the kubelet want describes,
// that kubelet has renewed the Node's lease, (for a pod's kubelet) its pod
// is Running and Ready, and it has held the node for holdFor; then it logs
// the lock's hands since start.
func (h *hostNode) waitHandover(m *monitor, who string, start time.Time, want func(holder) bool, timeout time.Duration) {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		hd, since := m.holder()
		if want(hd) && m.leaseRenewedAfter(since) && (hd.host || h.podReady(hd.pod)) && time.Since(since) >= holdFor {
			break
		}
		if s := m.strangerList(); len(s) > 0 {
			h.dumpPodLogs(m)
			h.t.Fatalf("while %s was to take the node, a kubelet served or ran without the lock:\n%s", who, strings.Join(s, "\n"))
		}
		if time.Now().After(deadline) {
			h.dumpPodLogs(m)
			h.k.dumpLogs()
			h.t.Fatalf("%s did not take the node within %v; the lock's holder: %+v since %v; DaemonSet pods: %s",
				who, timeout, hd, since.Format(time.StampMilli), podSummary(h.daemonSetPods()))
		}
		time.Sleep(100 * time.Millisecond)
	}
	h.t.Logf("%s took the node; the lock since the step began:\n%s", who, m.handoverSince(start))
	if hd, _ := m.holder(); hd.pod != "" && h.guest != nil {
		h.checkGuestPodNode(hd)
	} else if hd.pod != "" {
		h.checkPodNode(hd)
	}
}

// killPodKubelet kills the kubelet of the DaemonSet pod that holds the
// node, hd, with SIGKILL, or has the kernel's OOM killer end it (oom),
// and waits until the kubelet of that pod's restarted container holds the
// node. Then it logs each step's time from the kill: the lock free and
// taken by the node's own kubelet (waiting on it in its restart loop) and
// its lease renewal, the pod's container ended and started again, the new
// container's kubelet opening the lock (the node's own kubelet exiting on
// it), holding it and renewing the lease.
func (h *hostNode) killPodKubelet(m *monitor, hd holder, oom bool) {
	h.t.Helper()
	if st, err := testenv.ReadStat(hd.pid); err != nil || st.Comm != "kubelet" {
		h.t.Fatalf("the lock's holder %v is not a kubelet (%+v, %v)", hd, st, err)
	}
	old := h.podContainer(hd.pod)
	killed := time.Now()
	if oom {
		h.oomKill(hd.pid)
	} else {
		must(h.t, unix.Kill(hd.pid, unix.SIGKILL))
		h.t.Logf("killed the DaemonSet pod's kubelet (pid %d) with SIGKILL", hd.pid)
	}
	h.killed[hd.pod] = killed
	h.waitHandover(m, "the kubelet of the DaemonSet pod's restarted container", killed,
		func(n holder) bool { return n.pod == hd.pod && n.pid != hd.pid }, 2*time.Minute)

	now := h.podContainer(hd.pod)
	if now.ContainerID == old.ContainerID {
		h.t.Errorf("the DaemonSet pod's container is still %s after its kubelet was killed", old.ContainerID)
	}
	after := func(at time.Time, ok bool) string {
		if !ok {
			return "never seen"
		}
		return "+" + at.Sub(killed).Round(time.Millisecond).String()
	}
	free, freeOK := m.firstHand(killed, func(n holder) bool { return n.pid != hd.pid })
	host, hostOK := m.firstHand(killed, func(n holder) bool { return n.host })
	back, backOK := m.firstHand(killed, func(n holder) bool { return n.pod == hd.pod && n.pid != hd.pid })
	hostRenewed, hostRenewedOK := m.renewalAfter(host)
	backRenewed, backRenewedOK := m.renewalAfter(back)
	ended, endedOK := h.containerTime(old.ContainerID, "finishedAt")
	started, startedOK := h.containerTime(now.ContainerID, "startedAt")
	opened, exited := "never seen", "never seen"
	for _, r := range h.kubelet.history() {
		if r.started.Before(killed) && !r.ended.IsZero() && r.ended.After(killed) {
			at, ok := kubeletContention(r.log)
			opened, exited = after(at, ok), after(r.ended, true)
		}
	}
	h.t.Logf("the DaemonSet pod's kubelet killed (SIGKILL) at +0: the lock free %s; the node's own kubelet held it %s and renewed the lease %s; "+
		"the pod's container %s ended %s and started again (same pod, %s) %s; its kubelet opened the lock %s, the node's own kubelet exited %s; "+
		"the new kubelet held the lock %s and renewed the lease %s",
		after(free, freeOK), after(host, hostOK), after(hostRenewed, hostRenewedOK && hostOK),
		shortID(old.ContainerID), after(ended, endedOK), shortID(now.ContainerID), after(started, startedOK),
		opened, exited, after(back, backOK), after(backRenewed, backRenewedOK && backOK))
	if !hostOK || (backOK && back.Before(host)) {
		h.t.Errorf("the node's own kubelet did not hold the lock between the kill and the restarted container's kubelet")
	}
}

// crashLoopRestarts is how many times the node's own kubelet restarts the
// crashing container before the test rolls on.
const crashLoopRestarts = 2

// crashLoop rolls the DaemonSet to image with a kubelet that exits 1 once
// it holds the lock (its container runtime's socket does not exist) and
// waits until the node's own kubelet has restarted that container
// crashLoopRestarts times. Each crash: the pod's kubelet opens the lock,
// the node's own kubelet exits on it, the pod's kubelet takes the lock and
// exits 1, its nodeinit ends the container with 1, kube-proxy last, the
// node's own kubelet, restarted, takes the node back and restarts the
// container on its crash-loop backoff. It checks the node's own kubelet
// holds the node after the last crash, and logs each crash's time.
func (h *hostNode) crashLoop(m *monitor, image, first string) {
	t := h.t
	t.Helper()
	start := time.Now()
	h.setDaemonSet(image, []string{"--container-runtime-endpoint=unix:///nodeinit-test-no-runtime/containerd.sock"})
	// The crashing kubelet's opens of the lock, as the node's own kubelet
	// saw them and exited on them.
	contentions := func() (n int, last time.Time) {
		for _, r := range h.kubelet.history() {
			if r.ended.After(start) {
				if _, ok := kubeletContention(r.log); ok {
					n, last = n+1, r.ended
				}
			}
		}
		return n, last
	}
	var crash pod
	var cs containerStatus
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		for _, p := range h.daemonSetPods() {
			if p.Metadata.UID != first && len(p.Status.ContainerStatuses) == 1 {
				crash, cs = p, p.Status.ContainerStatuses[0]
				h.crashed[p.Metadata.UID] = true
			}
		}
		hd, since := m.holder()
		n, last := contentions()
		if n >= crashLoopRestarts+1 && cs.RestartCount >= crashLoopRestarts && hd.host && since.After(last) && time.Since(since) >= time.Second {
			break
		}
		if time.Now().After(deadline) {
			h.dumpPodLogs(m)
			t.Fatalf("the crashing DaemonSet pod's kubelet did not start %d times within 3 minutes, the node's own kubelet holding the lock after: %d seen; %s; the lock's holder %v since %s",
				crashLoopRestarts+1, n, podSummary(h.daemonSetPods()), hd, since.Format(time.StampMilli))
		}
	}
	last := "none"
	if lt := cs.LastState.Terminated; lt != nil {
		last = fmt.Sprintf("exit code %d (%s)", lt.ExitCode, lt.Reason)
	}
	waiting := "running"
	if cs.State.Waiting != nil {
		waiting = "waiting: " + cs.State.Waiting.Reason
	}
	t.Logf("the crashing DaemonSet pod %s: container restarted %d times, %s, last ended: %s", crash.Metadata.Name, cs.RestartCount, waiting, last)
	if lt := cs.LastState.Terminated; lt == nil || lt.ExitCode != 1 {
		t.Errorf("the crashing DaemonSet pod's container last ended with %s; want exit code 1, its kubelet's status", last)
	}
	// Each crash: the node's own kubelet exited on the crashing kubelet's
	// open of the lock, and took the node back.
	var crashes []string
	for _, r := range h.kubelet.history() {
		if !r.ended.After(start) {
			continue
		}
		at, ok := kubeletContention(r.log)
		if !ok {
			continue
		}
		back, backOK := m.firstHand(r.ended, func(n holder) bool { return n.host })
		took := "never"
		if backOK {
			took = "+" + back.Sub(start).Round(time.Millisecond).String()
		}
		crashes = append(crashes, fmt.Sprintf("  the node's own kubelet (pid %d) saw the lock opened at +%v, exited at +%v; the node's own kubelet held the lock again at %s",
			r.pid, at.Sub(start).Round(time.Millisecond), r.ended.Sub(start).Round(time.Millisecond), took))
		if !backOK {
			t.Errorf("the node's own kubelet did not take the lock back after the crashing kubelet's open at +%v", at.Sub(start).Round(time.Millisecond))
		}
	}
	t.Logf("the crash loop since the rollout:\n%s\nthe lock since the rollout:\n%s", strings.Join(crashes, "\n"), m.handoverSince(start))
	if len(crashes) < crashLoopRestarts+1 {
		t.Errorf("the node's own kubelet exited on the crashing kubelet's lock %d times; want %d, one per start of the crashing container", len(crashes), crashLoopRestarts+1)
	}
}

// oomKillLimit is the memory limit of the cgroup oomKill moves a kubelet
// into: one page, which the kubelet's next new page exceeds. (With 8 MiB
// the v1.37.2 kubelet ran on for 30 s: in its steady state it reuses the
// pages it has.)
const oomKillLimit = "4096"

// oomKill has the kernel's OOM killer end the kubelet pid, as a container
// memory limit the kubelet outgrows would: it moves the kubelet alone into
// a memory cgroup of its own below its container's (its charges stay with
// the container's), limited to oomKillLimit, where its next allocations
// find no room and no other process to kill. It waits for the kubelet's
// end and checks the kernel's log: one OOM kill, of the kubelet, in that
// cgroup.
func (h *hostNode) oomKill(pid int) {
	t := h.t
	t.Helper()
	log := openKmsg(t)
	cg := cgroupOf(t, pid, "memory") + "/nodeinit-oom-kill"
	procs := cgroupFile(t, "memory", cg, "cgroup.procs")
	dir := filepath.Dir(procs)
	must(t, os.Mkdir(dir, 0o755))
	// The container's end removes its cgroup and this one below it; if
	// that failed, the container's cgroup would stay: remove it first,
	// with what still runs in it (a kubelet that was not killed) moved
	// back to the container's.
	t.Cleanup(func() {
		if b, err := os.ReadFile(procs); err == nil {
			for p := range strings.FieldsSeq(string(b)) {
				_ = os.WriteFile(filepath.Join(filepath.Dir(dir), "cgroup.procs"), []byte(p), 0o644)
			}
		}
		if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
			t.Errorf("remove the OOM kill's memory cgroup %s: %v", dir, err)
		}
	})
	pidfd, err := unix.PidfdOpen(pid, 0)
	must(t, err)
	defer unix.Close(pidfd)
	must(t, os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte(oomKillLimit), 0o644))
	must(t, os.WriteFile(procs, []byte(strconv.Itoa(pid)), 0o644))
	moved := time.Now()
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, 60_000); n != 1 || err != nil {
		t.Fatalf("the DaemonSet pod's kubelet (pid %d) runs on 60 s after it was moved into %s, limited to %s bytes (%v)", pid, cg, oomKillLimit, err)
	}
	var seen []victim
	for deadline := time.Now().Add(10 * time.Second); len(seen) == 0 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		seen = victims(log.lines(t))
	}
	if len(seen) != 1 || seen[0].pid != pid || seen[0].task != "kubelet" || seen[0].domain != cg {
		t.Fatalf("the kernel's OOM kills after the kubelet (pid %d) was limited to %s bytes in %s: %+v; want the kubelet's, there", pid, oomKillLimit, cg, seen)
	}
	t.Logf("the DaemonSet pod's kubelet (pid %d) OOM-killed by the kernel in %s, limited to %s bytes, %v after it was moved there", pid, cg, oomKillLimit, time.Since(moved).Round(time.Millisecond))
}

// podContainer is the status of the container of the DaemonSet pod with
// uid.
func (h *hostNode) podContainer(uid string) containerStatus {
	h.t.Helper()
	for _, p := range h.daemonSetPods() {
		if p.Metadata.UID == uid && len(p.Status.ContainerStatuses) == 1 {
			return p.Status.ContainerStatuses[0]
		}
	}
	h.t.Fatalf("no DaemonSet pod %s with one container: %s", uid, podSummary(h.daemonSetPods()))
	return containerStatus{}
}

// containerTime is a time containerd has of the container with id (a
// CRI id, containerd:// or not): its startedAt or finishedAt.
func (h *hostNode) containerTime(id, which string) (time.Time, bool) {
	out, err := h.c.containerd.cri("inspect", "-o", "json", strings.TrimPrefix(id, "containerd://"))
	if err != nil {
		h.t.Logf("crictl inspect %s: %v", id, err)
		return time.Time{}, false
	}
	var st struct{ Status map[string]any }
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		h.t.Logf("crictl inspect %s: %v", id, err)
		return time.Time{}, false
	}
	v, _ := st.Status[which].(string)
	at, err := time.Parse(time.RFC3339Nano, v)
	return at, err == nil && at.Year() > 1970
}

// shortID is a container id's first 12 hex digits.
func shortID(id string) string {
	id = strings.TrimPrefix(id, "containerd://")
	return id[:min(12, len(id))]
}

// checkPodNode checks the DaemonSet pod whose kubelet holds the lock: its
// container has not restarted (or, once its kubelet was killed, restarted
// once, after it ended with 137), nodeinit runs the kubelet and kube-proxy,
// and the kubelet manages the node's own cgroups (no --cgroup-root of the
// pod's cgroup, which would be another hierarchy than the node kubelet's
// /kubepods, whose pods it would then restart).
func (h *hostNode) checkPodNode(hd holder) {
	h.t.Helper()
	for _, p := range h.daemonSetPods() {
		if p.Metadata.UID != hd.pod {
			continue
		}
		restarts := 0
		if _, ok := h.killed[hd.pod]; ok {
			restarts = 1
		}
		for _, s := range p.Status.ContainerStatuses {
			last := "none"
			if lt := s.LastState.Terminated; lt != nil {
				last = fmt.Sprintf("exit code %d (%s)", lt.ExitCode, lt.Reason)
			}
			h.t.Logf("DaemonSet pod %s, container %s: %s restartCount=%d, last ended: %s", p.Metadata.Name, s.Name, s.ContainerID, s.RestartCount, last)
			if s.RestartCount != restarts {
				h.t.Errorf("the DaemonSet pod's container %s restarted %d times; want %d", s.Name, s.RestartCount, restarts)
			}
			if restarts > 0 && (s.LastState.Terminated == nil || s.LastState.Terminated.ExitCode != 128+int(unix.SIGKILL)) {
				h.t.Errorf("the DaemonSet pod's container %s last ended with %s; want exit code 137, its kubelet's status", s.Name, last)
			}
		}
	}
	st, err := testenv.ReadStat(hd.pid)
	must(h.t, err)
	tasks := map[string]int{}
	children, _ := testenv.Children(st.Ppid)
	for _, c := range children {
		if cs, err := testenv.ReadStat(c); err == nil {
			tasks[cs.Comm] = c
		}
	}
	parent, _ := testenv.ReadStat(st.Ppid)
	if parent.Comm != "nodeinit" || tasks["kube-proxy"] == 0 {
		h.t.Errorf("the pod's kubelet (pid %d) is a child of %q (pid %d), with %v beside it; want nodeinit's, with kube-proxy", hd.pid, parent.Comm, st.Ppid, tasks)
	}
	argv := cmdline(hd.pid)
	for _, a := range argv {
		if strings.HasPrefix(a, "--cgroup-root") || a == "--exit-on-lock-contention" {
			h.t.Errorf("the pod's kubelet runs with %s: %q", a, argv)
		}
	}
	h.t.Logf("the pod's kubelet (pid %d, nodeinit pid %d, kube-proxy pid %d): %s", hd.pid, st.Ppid, tasks["kube-proxy"], strings.Join(argv, " "))
	// The pod's kube-proxy answers its healthz once it has programmed the
	// rules (the node's own kube-proxy serves 10256).
	start := time.Now()
	if err := waitHTTP(&http.Client{Timeout: time.Second}, "http://127.0.0.1:10266/healthz", nil, 30*time.Second); err != nil {
		h.t.Errorf("the DaemonSet pod's kube-proxy: %v", err)
	} else {
		h.t.Logf("the DaemonSet pod's kube-proxy is healthy (it has synced its rules), seen %v after the check began", time.Since(start).Round(time.Millisecond))
	}
}

// podReady says whether the pod with uid is Running and Ready.
func (h *hostNode) podReady(uid string) bool {
	for _, p := range h.daemonSetPods() {
		if p.Metadata.UID == uid {
			return p.Status.Phase == "Running" && p.ready()
		}
	}
	return false
}

// workloadContainers are the default namespace's pods' containers, by pod
// and container name: their ids and restart counts.
func (k *kubeNode) workloadContainers() map[string]string {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var list struct{ Items []pod }
	must(k.t, k.c.api.get(ctx, "/api/v1/namespaces/default/pods", &list))
	out := map[string]string{}
	for _, p := range list.Items {
		for _, s := range p.Status.ContainerStatuses {
			out[p.Metadata.Name+"/"+s.Name] = fmt.Sprintf("%s restartCount=%d", s.ContainerID, s.RestartCount)
		}
	}
	return out
}

// checkWorkload checks that the workload's pods and containers are those
// of before, none restarted, and logs them.
func (h *hostNode) checkWorkload(before map[string]string, when string) {
	h.t.Helper()
	now := h.k.workloadContainers()
	var lines []string
	for name, was := range before {
		lines = append(lines, fmt.Sprintf("  %s: %s", name, now[name]))
		if now[name] != was {
			h.t.Errorf("%s, container %s is %q; before the handovers it was %q", when, name, now[name], was)
		}
		if !strings.HasSuffix(was, " restartCount=0") {
			h.t.Errorf("container %s had restarted before the handovers: %s", name, was)
		}
	}
	for name := range now {
		if _, ok := before[name]; !ok {
			h.t.Errorf("%s, a new container %s: %s", when, name, now[name])
		}
	}
	slices.Sort(lines)
	h.t.Logf("%s, the workload's containers:\n%s", when, strings.Join(lines, "\n"))
}

// holder is who holds the kubelet's lock: the node's own kubelet, or the
// kubelet of a DaemonSet pod (its uid), by pid.
type holder struct {
	pid  int
	host bool
	pod  string
}

func (hd holder) String() string {
	switch {
	case hd.pid == 0:
		return "nobody"
	case hd.host:
		return fmt.Sprintf("the node's own kubelet (pid %d)", hd.pid)
	case hd.pod != "":
		return fmt.Sprintf("the kubelet of pod %s (pid %d)", hd.pod, hd.pid)
	}
	return fmt.Sprintf("pid %d", hd.pid)
}

// monitor is what the test watches from the host throughout: a request
// to the Service every 50 ms, the Node's Ready condition, the Node's lease,
// the lock's holder and the kubelet that serves on port 10250, and the
// logs of the DaemonSet's pods.
type monitor struct {
	h      *hostNode
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	begun  time.Time

	mu       sync.Mutex
	requests int
	failures []string
	failedAt []time.Time // when each failed request was sent
	// The guest's answered requests: the slowest, and how many took over
	// a second (under TCG a request is lost only past its 5 s).
	slowest   time.Duration
	slow      int
	ready     []readyChange
	renewals  []time.Time
	hands     []hand
	samples   int
	strangers []string          // a kubelet serving that does not hold the lock
	podLogs   map[string]string // a DaemonSet pod's log file -> its last content
	// identities are the Node's machineID, systemUUID and bootID as
	// reported, each once.
	identities []string
	leaseLog   []string
	stopped    bool
}

type readyChange struct {
	at    time.Time
	ready bool
	why   string // the Ready condition's reason and message when not Ready
}

// hand is the lock changing hands, as sampled.
type hand struct {
	at time.Time
	to holder
}

func (h *hostNode) monitor(ip string) *monitor {
	m := watchService(h, ip)
	m.wg.Add(2)
	go m.watchLease(m.ctx)
	go m.sampleLock(m.ctx)
	return m
}

// watchService starts the part of the monitor that any node has: a
// request to the Service at ip every 50 ms and the Node's Ready condition.
func watchService(h *hostNode, ip string) *monitor {
	m := newMonitor(h)
	m.wg.Add(2)
	go m.request(m.ctx, ip)
	go m.watchNode(m.ctx)
	return m
}

// newMonitor is a monitor of h's node that watches nothing yet.
func newMonitor(h *hostNode) *monitor {
	ctx, cancel := context.WithCancel(context.Background())
	return &monitor{h: h, ctx: ctx, cancel: cancel, begun: time.Now(), podLogs: map[string]string{}}
}

func (m *monitor) stop() {
	m.mu.Lock()
	stopped := m.stopped
	m.stopped = true
	m.mu.Unlock()
	if !stopped {
		m.cancel()
		m.wg.Wait()
	}
}

// request sends a request to the Service every 50 ms, each with a second
// to answer, and counts those that fail.
func (m *monitor) request(ctx context.Context, ip string) {
	defer m.wg.Done()
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var inflight sync.WaitGroup
	defer inflight.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case at := <-tick.C:
			inflight.Add(1)
			go func() {
				defer inflight.Done()
				resp, err := client.Get("http://" + ip + "/")
				if err == nil {
					body, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("%s: %q", resp.Status, body)
					}
				}
				m.mu.Lock()
				defer m.mu.Unlock()
				m.requests++
				if err != nil {
					m.failures = append(m.failures, at.Format("15:04:05.000")+" "+err.Error())
					m.failedAt = append(m.failedAt, at)
					if len(m.failures) == 1 {
						// What the pods serve and have, while it fails;
						// stop waits for it, so that it logs within the
						// test. (This request's goroutine holds wg.)
						m.wg.Add(1)
						go func() {
							defer m.wg.Done()
							m.h.diagnoseWeb()
						}()
					}
				}
			}()
		}
	}
}

// watchNode records each change of the Node's Ready condition.
func (m *monitor) watchNode(ctx context.Context) {
	defer m.wg.Done()
	type identified struct {
		Metadata objectMeta
		Status   struct {
			Conditions []condition
			NodeInfo   struct{ MachineID, SystemUUID, BootID string }
		}
	}
	q := url.Values{"fieldSelector": {"metadata.name=" + nodeName}}
	_, _ = watchUntil(ctx, m.h.c.api, "/api/v1/nodes", q, func(n identified) string { return n.Metadata.Name }, func(ns []identified) bool {
		if len(ns) == 1 {
			m.mu.Lock()
			var n node
			n.Status.Conditions = ns[0].Status.Conditions
			if r := n.ready(); len(m.ready) == 0 || m.ready[len(m.ready)-1].ready != r {
				c := readyChange{at: time.Now(), ready: r}
				if !r {
					cond := n.condition("Ready")
					c.why = strings.TrimSpace(cond.Status + " " + cond.Reason + ": " + cond.Message)
				}
				m.ready = append(m.ready, c)
			}
			info := ns[0].Status.NodeInfo
			id := fmt.Sprintf("machineID %s, systemUUID %s, bootID %s", info.MachineID, info.SystemUUID, info.BootID)
			if !slices.Contains(m.identities, id) {
				m.identities = append(m.identities, id)
			}
			m.mu.Unlock()
		}
		return false
	})
}

// watchLease records when the Node's lease was renewed (the kubelet's
// heartbeat): the renew time the kubelet wrote.
func (m *monitor) watchLease(ctx context.Context) {
	defer m.wg.Done()
	type lease struct {
		Metadata objectMeta
		Spec     struct{ RenewTime string }
	}
	last := ""
	q := url.Values{"fieldSelector": {"metadata.name=" + nodeName}}
	_, _ = watchUntil(ctx, m.h.c.api, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", q, func(l lease) string { return l.Metadata.Name }, func(ls []lease) bool {
		if len(ls) == 1 && ls[0].Spec.RenewTime != last {
			// The kubelet's own clock, which is the host's.
			renewed, err := time.Parse(time.RFC3339Nano, ls[0].Spec.RenewTime)
			m.mu.Lock()
			// A lease made after the watch began is a heartbeat too: a
			// kubelet that finds none creates it, and renews it only a
			// renew interval later.
			if err == nil && (last != "" || renewed.After(m.begun)) {
				m.renewals = append(m.renewals, renewed)
				m.leaseLog = append(m.leaseLog, fmt.Sprintf("  renewTime %s seen %s", renewed.Format("15:04:05.000000"), time.Now().Format("15:04:05.000")))
			}
			m.mu.Unlock()
			last = ls[0].Spec.RenewTime
		}
		return false
	})
}

// sampleLock reads /proc/locks every 20 ms for the holder of the kubelet's
// lock (never opening the file: an open is the contention the node's
// kubelet exits on), and every 100 ms which kubelet listens on 127.0.0.1:10250;
// every 250 ms it copies the DaemonSet pods' logs, which go with their pods.
func (m *monitor) sampleLock(ctx context.Context) {
	defer m.wg.Done()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	closing := 0 // a kubelet seen serving without the lock in the last sample
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		hd := m.h.lockHolder()
		m.mu.Lock()
		if len(m.hands) == 0 || m.hands[len(m.hands)-1].to != hd {
			m.hands = append(m.hands, hand{time.Now(), hd})
		}
		m.mu.Unlock()
		if n%5 == 0 {
			// An ending kubelet closes its descriptors one after another:
			// the lock can be free (and taken) a moment before its port
			// closes. One serving without the lock in two samples in a
			// row, 100 ms apart, is a kubelet that serves without it.
			pid := kubeletListening()
			if pid != 0 && pid != hd.pid && pid == closing {
				m.mu.Lock()
				m.strangers = append(m.strangers, fmt.Sprintf("%s: kubelet pid %d serves on 10250, the lock is held by %v", time.Now().Format("15:04:05.000"), pid, hd))
				m.mu.Unlock()
			}
			closing = 0
			if pid != 0 && pid != hd.pid {
				closing = pid
			}
			m.mu.Lock()
			m.samples++
			m.mu.Unlock()
		}
		if n%12 == 0 {
			files, _ := filepath.Glob("/var/log/pods/kube-system_nodeinit-node-*/node/*.log")
			for _, f := range files {
				if b, err := os.ReadFile(f); err == nil {
					m.mu.Lock()
					m.podLogs[f] = string(b)
					m.mu.Unlock()
				}
			}
		}
	}
}

// holder is the lock's holder now, and since when.
func (m *monitor) holder() (holder, time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.hands) == 0 {
		return holder{}, time.Time{}
	}
	last := m.hands[len(m.hands)-1]
	return last.to, last.at
}

// strangerList is what the monitor saw of kubelets serving (or running)
// without the lock so far.
func (m *monitor) strangerList() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.strangers)
}

// firstHand is when the lock first went, after t, to a holder want
// describes.
func (m *monitor) firstHand(t time.Time, want func(holder) bool) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, hd := range m.hands {
		if hd.at.After(t) && want(hd.to) {
			return hd.at, true
		}
	}
	return time.Time{}, false
}

// renewalAfter is the lease's first renewal after t.
func (m *monitor) renewalAfter(t time.Time) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.renewals {
		if r.After(t) {
			return r, true
		}
	}
	return time.Time{}, false
}

// leaseRenewedAfter says whether the lease was renewed after t.
func (m *monitor) leaseRenewedAfter(t time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.renewals) > 0 && m.renewals[len(m.renewals)-1].After(t)
}

// handoverSince describes the lock's hands since start: each holder, when
// it took the lock (and, for the node's own kubelet, when it saw the
// contention), and the first lease renewal after.
func (m *monitor) handoverSince(start time.Time) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b strings.Builder
	for i, hd := range m.hands {
		if hd.at.Before(start) && (i+1 < len(m.hands) && m.hands[i+1].at.Before(start)) {
			continue
		}
		fmt.Fprintf(&b, "  +%v %v", hd.at.Sub(start).Round(time.Millisecond), hd.to)
		if hd.to.pid != 0 {
			for _, r := range m.renewals {
				if r.After(hd.at) && (i+1 == len(m.hands) || r.Before(m.hands[i+1].at)) {
					fmt.Fprintf(&b, "; lease renewed %v later", r.Sub(hd.at).Round(time.Millisecond))
					break
				}
			}
		}
		b.WriteString("\n")
	}
	if m.h.kubelet == nil {
		return strings.TrimRight(b.String(), "\n")
	}
	for _, r := range m.h.kubelet.history() {
		if r.ended.After(start) {
			if at, ok := kubeletContention(r.log); ok {
				fmt.Fprintf(&b, "  the node's own kubelet (pid %d) saw the lock opened at +%v and exited at +%v\n", r.pid, at.Sub(start).Round(time.Millisecond), r.ended.Sub(start).Round(time.Millisecond))
			} else {
				fmt.Fprintf(&b, "  the node's own kubelet (pid %d) exited at +%v\n", r.pid, r.ended.Sub(start).Round(time.Millisecond))
			}
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// kubeletContention is when the node's kubelet logged the inotify event
// it exits on: another process opened the lock.
func kubeletContention(log string) (time.Time, bool) {
	b, err := os.ReadFile(log)
	if err != nil {
		return time.Time{}, false
	}
	for _, l := range nodeinitLines(string(b)) {
		if strings.Contains(l.text, `"Inotify event"`) {
			y, mo, d := time.Now().Date()
			return time.Date(y, mo, d, 0, 0, 0, 0, time.Local).Add(l.at), true
		}
	}
	return time.Time{}, false
}

// lockHolder reads /proc/locks for the flock on the kubelet's lock file
// and says whose it is.
func (h *hostNode) lockHolder() holder {
	var st unix.Stat_t
	if err := unix.Stat(kubeletLock, &st); err != nil {
		return holder{}
	}
	id := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	f, err := os.Open("/proc/locks")
	if err != nil {
		return holder{}
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// "1: FLOCK  ADVISORY  WRITE 12345 fe:00:9995626 0 EOF"; a waiter's
		// line has "->" after the number.
		if len(fields) < 6 || fields[1] != "FLOCK" || fields[5] != id {
			continue
		}
		pid, _ := strconv.Atoi(fields[4])
		hd := holder{pid: pid, host: pid == h.kubelet.pid()}
		if !hd.host {
			hd.pod = podOfProcess(pid)
		}
		return hd
	}
	return holder{}
}

// podOfProcess is the uid of the pod whose cgroup holds pid, from its
// /kubepods/<qos>/pod<uid>/<container> path.
func podOfProcess(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return ""
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		for elem := range strings.SplitSeq(line, "/") {
			if uid, ok := strings.CutPrefix(elem, "pod"); ok && len(uid) == 36 {
				return uid
			}
		}
	}
	return ""
}

// kubeletListening is the pid of the kubelet listening on 127.0.0.1:10250,
// 0 when none does.
func kubeletListening() int {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return 0
	}
	inode := ""
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		// local address 127.0.0.1:10250, state 0A (LISTEN).
		if len(f) > 9 && f[1] == "0100007F:280A" && f[3] == "0A" {
			inode = f[9]
		}
	}
	if inode == "" {
		return 0
	}
	want := "socket:[" + inode + "]"
	for _, pid := range processesNamed("kubelet") {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); l == want {
				return pid
			}
		}
	}
	return 0
}

// report logs what the monitor saw and fails the test on a failed
// request, a Node not Ready or a kubelet serving without the lock.
func (m *monitor) report(t *testing.T) {
	t.Helper()
	m.reportRequests(t)
	// One starting status for each kubelet that took the lock, at most.
	if notReady := m.notReadyBesidesStarts(t, m.kubeletsTakingOver()); notReady > 0 {
		t.Errorf("the Node was not Ready for %v during the handovers; want 0", notReady.Round(time.Millisecond))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.h.guest == nil {
		t.Logf("the lock sampled every 20 ms and the kubelet's port every 100 ms (%d samples): %d times a kubelet served without the lock", m.samples, len(m.strangers))
	}
	for _, s := range m.strangers {
		t.Errorf("%s", s)
	}
	var lines []string
	for _, hd := range m.hands {
		lines = append(lines, fmt.Sprintf("  %s %v", hd.at.Format("15:04:05.000"), hd.to))
	}
	t.Logf("the lock's holders:\n%s", strings.Join(lines, "\n"))
	t.Logf("the Node's lease renewals:\n%s", strings.Join(m.leaseLog, "\n"))
}

// kubeletsTakingOver counts the kubelets that took the lock from another
// one, as sampled: each holder after the first with a pid of its own.
func (m *monitor) kubeletsTakingOver() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, last := 0, 0
	for _, hd := range m.hands {
		if hd.to.pid == 0 || hd.to.pid == last {
			continue
		}
		if last != 0 {
			n++
		}
		last = hd.to.pid
	}
	return n
}

// reportRequests logs the requests sent and those that failed, and fails
// the test on a failed one.
func (m *monitor) reportRequests(t *testing.T) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	end := time.Now()
	t.Logf("requests to the Service every 50 ms for %v: %d sent, %d failed", end.Sub(m.begun).Round(time.Second), m.requests, len(m.failures))
	if m.slowest > 0 {
		t.Logf("the slowest answer took %v; %d answers took over 1 s", m.slowest.Round(time.Millisecond), m.slow)
	}
	for i, f := range m.failures {
		if i == 20 {
			t.Logf("  ... and %d more", len(m.failures)-20)
			break
		}
		t.Logf("  failed: %s", f)
	}
	if len(m.failures) > 0 {
		t.Errorf("%d of %d requests to the Service failed", len(m.failures), m.requests)
		m.mu.Unlock()
		m.h.diagnoseWeb()
		m.mu.Lock()
	}
}

// notReady logs each time the Node was seen not Ready, and why, and
// returns how long that was in all.
func (m *monitor) notReady(t *testing.T) time.Duration {
	t.Helper()
	var notReady time.Duration
	spans := m.notReadySpans()
	for _, s := range spans {
		notReady += s.took
		t.Logf("the Node was not Ready from %s for %v: %s", s.from.Format("15:04:05.000"), s.took.Round(time.Millisecond), s.why)
	}
	t.Logf("the Node was not Ready for %v in all (Ready changes seen: %d)", notReady.Round(time.Millisecond), len(m.readyChanges()))
	return notReady
}

// notReadyBesidesStarts logs the Node's not-Ready spans and returns how
// long it was not Ready besides one starting status (kubeletStarting,
// within kubeletStartingBound) for each of the starts kubelets that
// started meanwhile.
func (m *monitor) notReadyBesidesStarts(t *testing.T, starts int) time.Duration {
	t.Helper()
	m.notReady(t)
	var notReady time.Duration
	starting := 0
	for _, s := range m.notReadySpans() {
		if kubeletStarting(s.why) && s.took <= kubeletStartingBound && starting < starts {
			starting++
			t.Logf("the Node not Ready from %s for %v is a starting kubelet's first status (%d of the %d kubelets that started), posted before its first relist of the pods",
				s.from.Format("15:04:05.000"), s.took.Round(time.Millisecond), starting, starts)
			continue
		}
		notReady += s.took
	}
	return notReady
}

// notReadySpan is a time the Node was not Ready, until now if it still is.
type notReadySpan struct {
	from time.Time
	took time.Duration
	why  string
}

func (m *monitor) notReadySpans() []notReadySpan {
	m.mu.Lock()
	defer m.mu.Unlock()
	end := time.Now()
	var spans []notReadySpan
	for i, r := range m.ready {
		if !r.ready {
			until := end
			if i+1 < len(m.ready) {
				until = m.ready[i+1].at
			}
			spans = append(spans, notReadySpan{r.at, until.Sub(r.at), r.why})
		}
	}
	return spans
}

// kubeletStartingBound is how long a starting kubelet's not-Ready status
// may stand: its next status, one nodeStatusUpdateFrequency (10 s, with 4%
// jitter) later, and slack.
const kubeletStartingBound = 15 * time.Second

// kubeletStarting says whether a not-Ready condition is only what a kubelet
// posts while it starts: pkg/kubelet's Run starts the node status loop in
// a goroutine right after its first runtime check and only then its pod
// lifecycle event generator, whose first relist the status can precede
// (seen under TCG, and on the host with containerd 2). A kubelet that stopped posting
// (NodeStatusUnknown, set by the node controller) or any other error is
// not.
func kubeletStarting(why string) bool {
	msg, ok := strings.CutPrefix(why, "False KubeletNotReady: ")
	if !ok {
		return false
	}
	msg = strings.TrimSuffix(strings.TrimPrefix(msg, "["), "]")
	for e := range strings.SplitSeq(msg, ", ") {
		if e != "PLEG is not healthy: pleg has yet to be successful" && e != "container runtime status check may not have completed yet" {
			return false
		}
	}
	return true
}

// readyChanges are the Node's Ready condition's changes seen so far.
func (m *monitor) readyChanges() []readyChange {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.ready)
}

// checkOldPods checks the logs of the DaemonSet's pods' containers, as
// the monitor copied them: each container that its pod's end stopped had
// its nodeinit get TERM, stop the kubelet, then kube-proxy, and every
// process had ended within the pod's grace period; the container whose
// kubelet was killed had its nodeinit log the kubelet's status (killed by
// SIGKILL), end kube-proxy after it and exit 137; each start of a
// crash-looping pod's container (h.crashed), unless its pod's end stopped
// it, had its nodeinit log the kubelet's exit code 1, end kube-proxy after
// it and exit 1.
func (h *hostNode) checkOldPods(m *monitor, ended int) {
	h.t.Helper()
	m.mu.Lock()
	logs := maps.Clone(m.podLogs)
	m.mu.Unlock()
	others := 0
	for f := range logs {
		if !h.crashed[podUIDOfLog(f)] {
			others++
		}
	}
	if want := ended + len(h.killed); others != want {
		h.t.Errorf("the logs of %d DaemonSet pod containers were seen, besides the crash loop's; want %d (%d pods ended, and one more per killed kubelet)", others, want, ended)
	}
	killed, crashes := 0, 0
	for _, f := range sortedKeys(logs) {
		log := criLog(logs[f])
		lines := nodeinitLines(log)
		find := func(msg string) (time.Duration, string, bool) {
			for _, l := range lines {
				if strings.Contains(l.text, `"`+msg+`"`) {
					return l.at, l.text, true
				}
			}
			return 0, "", false
		}
		dir := filepath.Base(filepath.Dir(filepath.Dir(f)))
		name := dir + "/" + filepath.Base(f)
		uid := podUIDOfLog(f)
		kubelet, status, _ := find("Executor ended")
		proxy, _, _ := find("Proxy ended")
		all, exit, ok := find("All processes have ended")
		if !ok {
			h.t.Errorf("%s: nodeinit did not log the end of every process:\n%s", name, testenv.Tail(log, 30))
			continue
		}
		if _, _, drained := find("Draining the node before the executor stops"); drained {
			h.t.Errorf("%s: nodeinit drained the node on a handover", name)
		}
		if term, _, ok := find("Forwarded signal to the executor"); ok {
			h.t.Logf("%s: nodeinit forwarded TERM to the kubelet; the kubelet ended %v later, kube-proxy %v, all processes %v (grace period 60s)",
				name, (kubelet - term).Round(time.Millisecond), (proxy - term).Round(time.Millisecond), (all - term).Round(time.Millisecond))
			if all-term > 60*time.Second {
				h.t.Errorf("%s: nodeinit took %v after TERM; the pod's grace period is 60s", name, all-term)
			}
			continue
		}
		if h.crashed[uid] {
			crashes++
			h.t.Logf("%s: the crashing kubelet ended %s; nodeinit logged kube-proxy's end %v after it: %s", name, status, (proxy - kubelet).Round(time.Millisecond), exit)
			if !strings.Contains(status, `status="exit code 1" exitCode=1`) || !strings.Contains(exit, "exitCode=1") || proxy < kubelet {
				h.t.Errorf("%s: want the kubelet's exit code 1, kube-proxy's end after it and nodeinit's exit code 1:\n%s", name, testenv.Tail(log, 30))
			}
			continue
		}
		at, ok := h.killed[uid]
		if !ok || !strings.Contains(status, `status="killed by signal SIGKILL" exitCode=137`) {
			h.t.Errorf("%s: nodeinit got no TERM, and its kubelet was not the one killed: %q\n%s", name, status, testenv.Tail(log, 30))
			continue
		}
		killed++
		kill := timeOfDay(at)
		h.t.Logf("%s: the kubelet killed; nodeinit logged its end %v after the kill, kube-proxy's %v, all processes' %v: %s",
			name, (kubelet - kill).Round(time.Millisecond), (proxy - kill).Round(time.Millisecond), (all - kill).Round(time.Millisecond), exit)
		if proxy < kubelet {
			h.t.Errorf("%s: kube-proxy ended before the killed kubelet", name)
		}
		if !strings.Contains(exit, "exitCode=137") {
			h.t.Errorf("%s: nodeinit did not exit with the kubelet's 137: %s", name, exit)
		}
	}
	if killed != len(h.killed) {
		h.t.Errorf("%d containers' logs show their kubelet killed; %d were killed", killed, len(h.killed))
	}
	if len(h.crashed) > 0 && crashes < crashLoopRestarts+1 {
		h.t.Errorf("%d logs of the crash-looping container show its kubelet's exit; want at least %d, one per start", crashes, crashLoopRestarts+1)
	}
}

// podUIDOfLog is the pod uid in the path of a pod's container log,
// .../kube-system_<pod name>_<uid>/<container>/<restart count>.log.
func podUIDOfLog(f string) string {
	dir := filepath.Base(filepath.Dir(filepath.Dir(f)))
	return dir[strings.LastIndexByte(dir, '_')+1:]
}

// diagnoseWeb logs what each web pod serves, asked directly, and what its
// container has in /www, for a failed request.
func (h *hostNode) diagnoseWeb() {
	if h.guest != nil {
		h.t.Logf("the Service's rules in the guest:\n%s", grepLines(h.guest.ssh("iptables-save -t nat"), "default/web"))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var list struct{ Items []pod }
	if err := h.c.api.get(ctx, "/api/v1/namespaces/default/pods?labelSelector=app%3Dweb", &list); err != nil {
		h.t.Log(err)
		return
	}
	client := &http.Client{Timeout: time.Second}
	for _, p := range list.Items {
		msg := ""
		if resp, err := client.Get("http://" + p.Status.PodIP + ":8080/"); err != nil {
			msg = err.Error()
		} else {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 100))
			resp.Body.Close()
			msg = fmt.Sprintf("%s %q", resp.Status, b)
		}
		ls := ""
		for _, s := range p.Status.ContainerStatuses {
			out, err := h.c.containerd.cri("exec", strings.TrimPrefix(s.ContainerID, "containerd://"), "ls", "-la", "/", "/www")
			ls = fmt.Sprintf("%s %v", out, err)
		}
		h.t.Logf("web pod %s (%s) answers %s; its container's / and /www:\n%s", p.Metadata.Name, p.Status.PodIP, msg, ls)
	}
	rules, _ := run(10*time.Second, "iptables-save", "-t", "nat")
	var web []string
	for l := range strings.SplitSeq(rules, "\n") {
		if strings.Contains(l, "default/web") {
			web = append(web, l)
		}
	}
	h.t.Logf("the Service's rules:\n%s", strings.Join(web, "\n"))
}

// checkNodeIdentity checks that the Node kept one identity through the
// handovers: every kubelet reported the host's machine-id, product_uuid
// and boot id.
func (h *hostNode) checkNodeIdentity(m *monitor) {
	h.t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	h.t.Logf("the Node's identity as reported: %q", m.identities)
	if len(m.identities) != 1 {
		h.t.Errorf("the Node's identity changed with its kubelet: %q", m.identities)
	}
}

// criLog is the messages of a log file the CRI runtime wrote: each line's
// time, stream and tag taken off.
func criLog(s string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(s, "\n") {
		if f := strings.SplitN(line, " ", 4); len(f) == 4 {
			b.WriteString(f[3] + "\n")
		}
	}
	return b.String()
}

// sortedKeys is the keys of m, sorted.
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// dumpPodLogs logs the end of each DaemonSet pod's log, for a failure.
func (h *hostNode) dumpPodLogs(m *monitor) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for f, s := range m.podLogs {
		h.t.Logf("%s, last lines:\n%s", f, testenv.Tail(s, 60))
	}
}

// TestKubeletStartingStatus tells a starting kubelet's not-Ready status,
// as pkg/kubelet/nodestatus writes its message, from every other.
func TestKubeletStartingStatus(t *testing.T) {
	for why, want := range map[string]bool{
		"False KubeletNotReady: PLEG is not healthy: pleg has yet to be successful":                                                              true,
		"False KubeletNotReady: [container runtime status check may not have completed yet, PLEG is not healthy: pleg has yet to be successful]": true,
		"False KubeletNotReady: [PLEG is not healthy: pleg has yet to be successful, container runtime network not ready: NetworkReady=false]":   false,
		"False KubeletNotReady: PLEG is not healthy: pleg was last seen active 3m0s ago; threshold is 3m0s":                                      false,
		"Unknown NodeStatusUnknown: Kubelet stopped posting node status.":                                                                        false,
	} {
		if got := kubeletStarting(why); got != want {
			t.Errorf("kubeletStarting(%q) = %v; want %v", why, got, want)
		}
	}
}

// TestKubeletsTakingOver counts the kubelets that took the lock from
// another: the handover there and back is two, whatever "none" samples
// come between, and the first holder is none.
func TestKubeletsTakingOver(t *testing.T) {
	m := &monitor{}
	for _, pid := range []int{0, 100, 100, 0, 200, 0, 0, 300} {
		m.hands = append(m.hands, hand{to: holder{pid: pid}})
	}
	if n := m.kubeletsTakingOver(); n != 2 {
		t.Errorf("kubeletsTakingOver = %d; want 2", n)
	}
}
