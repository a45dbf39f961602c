//go:build k8s

package k8s

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	nodeidentity "github.com/nodeinit/nodeinit/identity"
	"github.com/nodeinit/nodeinit/test/testenv"
)

// vmKubeletConfig is the kubelet's configuration on the modern host, as a
// node's own would be there: the systemd cgroup driver (containerd's
// SystemdCgroup = true, which containerd 2 also tells the kubelet over the
// CRI), containerd's default socket, the static pods in
// /etc/kubernetes/manifests; the kubelet makes its own serving certificate.
// Thresholds as kubeletConfig's: the imported images cannot be pulled again.
const vmKubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
staticPodPath: /etc/kubernetes/manifests
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: /etc/kubernetes/ca.crt}
authorization: {mode: AlwaysAllow}
evictionHard: {memory.available: 1Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
rotateCertificates: false
`

// guestCrictl is crictl from the shared folder against the guest's
// containerd.
const guestCrictl = guestShare + "/k8s/crictl --runtime-endpoint unix:///run/containerd/containerd.sock --image-endpoint unix:///run/containerd/containerd.sock --timeout 60s"

// guestNodeName is the container name of the node in the guest's podman.
const guestNodeName = "node"

// guestDrainDir is the drain pod's hostPath in the guest, where its preStop
// hook writes.
const guestDrainDir = "/var/lib/nodeinit-vm-drain"

// TestModernHost runs the real kubelet and kube-proxy of the node image on
// a modern node host, booted under qemu: cgroup v2 only, systemd as PID 1,
// containerd with the systemd cgroup driver. The control plane is the
// shared fixture's, on this machine's loopback. One guest serves the cases
// under "guest", each of which puts the guest back for the next; the
// host's shutdown cases boot a guest each, which they power off. The times
// it prints (image, boot, Node Ready, stop, the host's shutdown) are the
// ones docs/testing.md quotes.
func TestModernHost(t *testing.T) {
	c := getCluster(t)
	c.buildNodeImage(t)
	c.buildNodeRuntimeImage(t)
	dir := t.TempDir()
	share := filepath.Join(dir, "share")
	start := time.Now()
	c.fillShare(t, share, map[string]string{"node": nodeImage, "node-runtime": nodeRuntimeImage, "pause": pauseImage, "busybox": busyboxImage})
	for _, b := range []string{"kubelet", "kube-proxy"} {
		must(t, linkOrCopy(filepath.Join(releases(t)[1].bin, b), filepath.Join(share, guestOldestDir, b)))
	}
	t.Logf("shared folder filled (kubelet, kube-proxy and the oldest release's, crictl, containerd, nodeinit, node images, pod images) in %v", time.Since(start).Round(100*time.Millisecond))
	stores := imageStores(t, t.TempDir(), share, []string{"node", "node-runtime"}, true)

	// The cases that leave the guest as they found it share one guest; the
	// host's shutdown powers its guest off, so each of its cases boots its own.
	t.Run("guest", func(t *testing.T) {
		v := bootNodeHost(t, t.TempDir(), share, stores)
		t.Run("facts", func(t *testing.T) { checkModernFacts(t, v) })
		t.Run("node image", func(t *testing.T) {
			k := c.runGuestNode(t, v, "")
			n, took := k.waitGuestReady(5 * time.Minute)
			t.Logf("Node %s Ready %v after podman run (kubelet %s, InternalIP %s)", n.Metadata.Name, took.Round(100*time.Millisecond), n.Status.NodeInfo.KubeletVersion, nodeAddress(n))
			static := k.waitPods("metadata.name=static-sleeper-"+nodeName, 1, 5*time.Minute)
			t.Logf("static pod %s Running %v after podman run", static[0].Metadata.Name, time.Since(k.started).Round(100*time.Millisecond))
			checkSystemdPod(t, v)
			checkGuestHostPathSubPath(t, v, k)
			// containerd 2 tells the kubelet its driver over the CRI.
			if l := grepLines(k.log(), "Using cgroup driver setting received from the CRI runtime"); !strings.Contains(l, `cgroupDriver="systemd"`) {
				t.Errorf("the kubelet did not take the systemd cgroup driver from containerd over the CRI: %q", l)
			} else {
				t.Logf("kubelet: %s", testenv.Tail(l, 1))
			}
			// The kubelet's eviction manager and its image file system stats
			// stat containerd's root, which the README's line mounts.
			if log := k.log(); strings.Contains(log, `"Eviction manager: failed to synchronize"`) {
				t.Errorf("the kubelet's eviction manager cannot run: it cannot stat containerd's root /var/lib/containerd in the container:\n%s",
					testenv.Tail(grepLines(log, "Eviction manager: failed to synchronize"), 1))
			}
			checkGuestMachineID(t, v, n)
			checkGuestOOMScores(t, v, k)
			s := k.stopAndCheck(90 * time.Second)
			t.Logf("podman stop: %v", s)
			if s.code != 0 {
				t.Errorf("the node container exited %d; want 0", s.code)
			}
		})
		t.Run("graceful node shutdown", func(t *testing.T) {
			k := c.runGuestNode(t, v, kubeletShutdown, "--graceful-node-shutdown")
			_, took := k.waitGuestReady(5 * time.Minute)
			t.Logf("Node Ready %v after podman run", took.Round(100*time.Millisecond))
			k.waitLog(3*time.Minute, 0, `"Took a shutdown delay inhibitor"`, `who="kubelet"`)
			k.create("/api/v1/namespaces/default/pods", "drain", fmt.Sprintf(drainPod, guestDrainDir))
			k.waitPods("metadata.name=drain", 1, 5*time.Minute)
			k.stopAndCheckGuestDrained(v, guestCrictl)
		})
		t.Run("limits", func(t *testing.T) { c.checkGuestLimitedNode(t, v) })
		t.Run("self-contained node image", func(t *testing.T) { c.checkGuestNodeRuntime(t, v) })
		// The guest's Docker engine, started once and left running with
		// the node image for the cases below.
		t.Run("docker", func(t *testing.T) {
			startGuestDocker(t, v)
			t.Run("node image", func(t *testing.T) { c.checkGuestDockerNode(t, v) })
			t.Run("mesos task", func(t *testing.T) { c.checkGuestMesosTask(t, v) })
		})
		// The DaemonSet's last step powers the guest off.
		t.Run("daemonset", func(t *testing.T) { c.checkGuestDaemonSet(t, v) })
	})
	t.Run("host shutdown drains the node", func(t *testing.T) { c.checkHostShutdown(t, share, stores, true, "") })
	t.Run("host shutdown without the drain", func(t *testing.T) { c.checkHostShutdown(t, share, stores, false, "") })
	// The oldest release's kubelet and kube-proxy in the same node image
	// (mounted over the image's own from the shared folder).
	t.Run("host shutdown drains the node, oldest release", func(t *testing.T) {
		c.checkHostShutdown(t, share, stores, true, releases(t)[1].version)
	})
}

// cmdAccel is the accelerator qemu was started with.
func cmdAccel(v *vm) string {
	args := v.qemu.cmd.Args
	if i := slices.Index(args, "-accel"); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return "?"
}

// guestOldestDir is where the shared folder holds the oldest release's
// kubelet and kube-proxy.
const guestOldestDir = "k8s-oldest"

// oldestBinaries are podman's flags that run the node image with the
// oldest release's kubelet and kube-proxy from the shared folder over the
// image's own.
func oldestBinaries() []string {
	var flags []string
	for _, b := range []string{"kubelet", "kube-proxy"} {
		flags = append(flags, "-v", guestShare+"/"+guestOldestDir+"/"+b+":/usr/local/bin/"+b+":ro")
	}
	return flags
}

// guestContainerdDir is where the shared folder holds containerd 2 (the
// guest's containerd.service runs it from there, test/vm/guest), as the
// guest sees it.
const guestContainerdDir = guestShare + "/containerd"

// fillShare puts what the guest needs into the shared folder: the kubelet,
// kube-proxy and crictl, containerd 2 (containerd, its runc shim, ctr), nodeinit, and images
// (the node, self-contained node, pause and busybox images, say), by
// archive name, as archives (podman save) in images/NAME.tar, which
// imageStores loads into the guest's stores and the Mesos case imports
// into a containerd of its own.
func (c *cluster) fillShare(t *testing.T, share string, images map[string]string) {
	t.Helper()
	for _, b := range []string{"kubelet", "kube-proxy", "crictl"} {
		must(t, linkOrCopy(filepath.Join(c.bin, b), filepath.Join(share, "k8s", b)))
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "ctr"} {
		must(t, linkOrCopy(filepath.Join(c.bin, "containerd-"+containerd2Version, b), filepath.Join(share, filepath.Base(guestContainerdDir), b)))
	}
	nodeinit := os.Getenv("NODEINIT_VM_NODEINIT")
	if nodeinit == "" {
		nodeinit = testenv.Build(t, "./cmd/nodeinit")
	}
	must(t, linkOrCopy(nodeinit, filepath.Join(share, "nodeinit")))
	must(t, os.MkdirAll(filepath.Join(share, "images"), 0o755))
	for name, image := range images {
		if _, err := c.podman.run(10*time.Minute, "save", "--format", "docker-archive", "-o", filepath.Join(share, "images", name+".tar"), image); err != nil {
			t.Fatal(err)
		}
	}
}

// checkModernFacts checks that the guest is the host this suite is for:
// /sys/fs/cgroup is cgroup2 with the kubelet's controllers and no v1
// hierarchy is mounted, systemd is PID 1, containerd runs runc with
// SystemdCgroup = true, no swap is on, the API server forward runs, and the
// runtimes' roots are the image stores' disk, with the images in them.
func checkModernFacts(t *testing.T, v *vm) {
	if fs := strings.TrimSpace(v.ssh("stat -f -c %T /sys/fs/cgroup")); fs != "cgroup2fs" {
		t.Errorf("/sys/fs/cgroup is %s; want cgroup2fs", fs)
	}
	controllers := strings.Fields(v.ssh("cat /sys/fs/cgroup/cgroup.controllers"))
	for _, want := range []string{"cpuset", "cpu", "io", "memory", "pids"} {
		if !slices.Contains(controllers, want) {
			t.Errorf("the cgroup2 root has controllers %v, without %s", controllers, want)
		}
	}
	// A v1 hierarchy is a mount of type cgroup (not cgroup2).
	if v1 := strings.TrimSpace(v.ssh("awk '$3 == \"cgroup\"' /proc/mounts")); v1 != "" {
		t.Errorf("the guest has cgroup v1 hierarchies mounted:\n%s", v1)
	}
	if pid1 := strings.TrimSpace(v.ssh("cat /proc/1/comm")); pid1 != "systemd" {
		t.Errorf("PID 1 is %q; want systemd", pid1)
	}
	sysd := strings.TrimSpace(v.ssh("systemctl --version | head -1"))
	// containerd.service runs containerd 2 from the shared folder.
	if exe := strings.TrimSpace(v.ssh("readlink /proc/$(systemctl show -P MainPID containerd.service)/exe")); exe != guestContainerdDir+"/containerd" {
		t.Errorf("containerd.service runs %q; want %s/containerd (containerd %s)", exe, guestContainerdDir, containerd2Version)
	}
	if !regexp.MustCompile(`(?m)^\s*SystemdCgroup = true$`).MatchString(v.ssh(guestContainerdDir + "/containerd config dump")) {
		t.Errorf("containerd's configuration has no SystemdCgroup = true")
	}
	cd := strings.TrimSpace(v.ssh(guestContainerdDir + "/containerd --version"))
	// A build from the module proxy says its version without the v.
	if !strings.Contains(cd, " "+strings.TrimPrefix(containerd2Version, "v")) {
		t.Errorf("the guest's containerd is %q; want %s", cd, containerd2Version)
	}
	if swaps := strings.TrimSpace(v.ssh("swapon --show --noheadings")); swaps != "" {
		t.Errorf("swap is on in the guest: %s", swaps)
	}
	for _, unit := range []string{"containerd.service", "apiserver-forward.service"} {
		if s := strings.TrimSpace(v.ssh("systemctl is-active " + unit + " || true")); s != "active" {
			t.Errorf("%s is %s in the guest", unit, s)
		}
	}
	roots := strings.TrimSpace(v.ssh(`for d in /var/lib/containerd /var/lib/containers/storage /var/lib/docker; do
  printf '%s %s\n' $d "$(findmnt -n -o SOURCE --mountpoint $d)"; done`))
	for _, l := range strings.Split(roots, "\n") {
		if root, source, _ := strings.Cut(l, " "); !strings.HasPrefix(source, "/dev/vdb[") {
			t.Errorf("the runtime root %s is not bound from the image stores' disk (/dev/vdb, label %s): %q", root, guestStoresLabel, source)
		}
	}
	if images := strings.Fields(v.ssh(guestCrictl + " images -q | wc -l; podman images -q | wc -l")); !slices.Equal(images, []string{"3", "2"}) {
		t.Errorf("the guest's stores have %q images (containerd's CRI, podman); want 3 and 2", images)
	}
	t.Logf("guest: cgroup2 only with %v, PID 1 %s, %s with SystemdCgroup = true, no swap; the runtimes' roots:\n%s", controllers, sysd, cd, roots)
}

// runGuestNode starts the node image in the guest's podman with the
// README's line (privileged, host network and cgroup namespace, the host's
// /sys/fs/cgroup, /var/lib/kubelet rshared, /etc/kubernetes read-only, /run,
// /var/log, /lib/modules, --make-rshared) and more nodeinit flags. The
// node's kubeconfigs, CA and static pod are the guest's /etc/kubernetes;
// its KubeletConfiguration (vmKubeletConfig and more lines) is
// /var/lib/kubelet/config.yaml, where the image's configuration looks. The
// kubelet's name for the node is the guest's hostname, nodeName. When the
// test ends the container, its pods and what the kubelet left are removed
// from the guest, and the node's API objects from the control plane.
func (c *cluster) runGuestNode(t *testing.T, v *vm, kubeletConfig string, flags ...string) *kubeNode {
	t.Helper()
	return c.runGuestNodeIn(t, v, "podman", vmKubeletConfig+kubeletConfig, staticPod, nil, flags...)
}

// readmeRun is the README's podman or docker run line of the node image,
// named guestNodeName, up to the image.
func readmeRun(engine string) []string {
	return []string{engine, "run", "-d", "--name", guestNodeName, "--privileged", "--network=host", "--cgroupns=host",
		"-v", "/var/lib/kubelet:/var/lib/kubelet:rshared", "-v", "/sys/fs/cgroup:/sys/fs/cgroup",
		"-v", "/etc/kubernetes:/etc/kubernetes:ro", "-v", "/run:/run", "-v", "/var/log:/var/log",
		"-v", "/lib/modules:/lib/modules:ro", "-v", "/var/lib/containerd:/var/lib/containerd:ro", "-v", "/tmp:/tmp"}
}

// runGuestNodeIn is runGuestNode in the guest's engine (podman or docker),
// with the whole KubeletConfiguration kubeletConfig, the static pod
// manifest static, and more of the engine's flags.
func (c *cluster) runGuestNodeIn(t *testing.T, v *vm, engine, kubeletConfig, static string, engineFlags []string, flags ...string) *kubeNode {
	t.Helper()
	files := c.writeGuestNodeFiles(t, v, kubeletConfig, static)
	run := append(append(append(readmeRun(engine), engineFlags...), nodeImage, "--make-rshared"), flags...)
	k := &kubeNode{t: t, c: c, dir: files, started: time.Now()}
	remove := engine + " rm --force " + guestNodeName
	if engine == "podman" {
		remove = "podman rm --force --time 60 " + guestNodeName
	}
	t.Cleanup(func() { c.removeGuestNode(t, v, k, remove) })
	v.ssh(strings.Join(run, " "))
	guestContainer(k, v, engine, guestNodeName)
	return k
}

// guestContainer makes k the node in the guest's container name, run by
// engine (podman or docker): its state from inspect, its log from logs, its
// stop the engine's stop with the timeout.
func guestContainer(k *kubeNode, v *vm, engine, name string) {
	t := k.t
	inspect := func(format string) (string, error) {
		out, err := v.sshTimeout(time.Minute, fmt.Sprintf("%s inspect --format '%s' %s", engine, format, name))
		return strings.TrimSpace(out), err
	}
	k.pid = func() int {
		t.Fatal("the node runs in the guest: it has no pid here")
		return 0
	}
	k.running = func() bool {
		out, _ := inspect("{{.State.Running}}")
		return out == "true"
	}
	k.log = func() string {
		out, err := v.sshTimeout(time.Minute, engine+" logs "+name+" 2>&1")
		if err != nil {
			return out + "\n" + err.Error()
		}
		return out
	}
	k.stop = func(timeout time.Duration) int {
		v.ssh(fmt.Sprintf("%s stop --time %d %s", engine, int(timeout.Seconds()), name))
		out, err := inspect("{{.State.ExitCode}}")
		must(t, err)
		code, err := strconv.Atoi(out)
		must(t, err)
		return code
	}
}

// writeGuestNodeFiles puts a node's files into the guest: its kubeconfigs,
// CA and static pod (the manifest static) as /etc/kubernetes, the KubeletConfiguration
// kubeletConfig as /var/lib/kubelet/config.yaml, where the image's
// configuration looks, and the drain pod's directory. It returns their
// directory in the shared folder, as this machine sees it.
func (c *cluster) writeGuestNodeFiles(t *testing.T, v *vm, kubeletConfig, static string) string {
	t.Helper()
	files := filepath.Join(v.share, "node-"+strings.NewReplacer(" ", "-", "/", "-").Replace(t.Name()))
	name := filepath.Base(files)
	kubelet, err := c.pki.issue("kubelet-"+name, "system:node:"+nodeName, []string{"system:nodes"})
	must(t, err)
	proxy, err := c.pki.issue("kube-proxy-"+name, "system:kube-proxy", nil)
	must(t, err)
	for p, data := range map[string][]byte{
		"etc/kubelet.conf":          c.pki.kubeconfig(apiServer, kubelet),
		"etc/kube-proxy.conf":       c.pki.kubeconfig(apiServer, proxy),
		"etc/ca.crt":                c.pki.caPEM,
		"etc/manifests/static.yaml": []byte(static),
		"config.yaml":               []byte(kubeletConfig),
	} {
		p = filepath.Join(files, p)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, data, 0o600))
	}
	guestFiles := guestShare + "/" + name
	v.ssh(fmt.Sprintf("set -e; rm -rf /etc/kubernetes; mkdir -p /etc/kubernetes /var/lib/kubelet %[2]s; cp -r %[1]s/etc/. /etc/kubernetes/; cp %[1]s/config.yaml /var/lib/kubelet/config.yaml",
		guestFiles, guestDrainDir))
	return files
}

// removeGuestNode puts the guest back for the next case: the node
// container, its pods (through the CRI, so CNI takes their network down),
// the kubelet's mounts and directories, the node's files; and deletes the
// node's pods and Node from the control plane (also when the guest is gone:
// powered off). For a failed test it first prints the end of the node's
// log.
func (c *cluster) removeGuestNode(t *testing.T, v *vm, k *kubeNode, remove string) {
	if t.Failed() {
		t.Logf("the node container's log, last lines:\n%s", testenv.Tail(k.log(), 60))
	}
	if v.qemu.running() {
		c.putGuestBack(t, v, remove)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, p := range append(k.created, "/api/v1/namespaces/default/pods", "/api/v1/nodes/"+nodeName) {
		if err := c.api.remove(ctx, p); err != nil {
			t.Errorf("delete %s: %v", p, err)
		}
	}
}

// putGuestBack removes from the running guest the node container (the
// shell command remove), its pods (through the CRI, so CNI takes their
// network down), the kubelet's mounts and directories, and the node's
// files.
func (c *cluster) putGuestBack(t *testing.T, v *vm, remove string) {
	script := `set -u
{ ` + remove + `; } >/dev/null 2>&1 || true
` + guestCrictl + ` rmp --all --force >/dev/null || echo "crictl rmp failed"
findmnt -rn -o TARGET | grep '^/var/lib/kubelet/' | sort -r | while read -r m; do umount "$m" || echo "umount $m failed"; done
rm -rf /var/lib/kubelet /etc/kubernetes /var/log/pods /var/log/containers ` + guestDrainDir + `
`
	if out, err := v.sshTimeout(5*time.Minute, script); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("putting the guest back: %s %v", out, err)
	}
}

// waitGuestReady waits for the Node to be Ready, as waitReady, but asks the
// guest every few seconds whether the node container still runs: one
// that exits before the Node registers brings no watch event.
func (k *kubeNode) waitGuestReady(timeout time.Duration) (node, time.Duration) {
	k.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var n node
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := k.c.api.get(ctx, "/api/v1/nodes/"+nodeName, &n)
		cancel()
		if err == nil && n.ready() {
			return n, time.Since(k.started)
		}
		if !k.running() {
			k.t.Fatalf("the node container ended %v after podman run, before the Node was Ready (last: %v, Ready %+v)",
				time.Since(k.started).Round(100*time.Millisecond), err, n.condition("Ready"))
		}
		if time.Now().After(deadline) {
			k.t.Fatalf("the Node did not become Ready within %v (last: %v, Ready %+v)", timeout, err, n.condition("Ready"))
		}
		time.Sleep(2 * time.Second)
	}
}

func nodeAddress(n node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == "InternalIP" {
			return a.Address
		}
	}
	return ""
}

// checkSystemdPod checks that the static pod's container runs in the
// guest's kubepods.slice, a slice of the host's systemd, in a scope unit of
// its own: the kubelet's systemd cgroup driver and containerd's
// SystemdCgroup at work.
func checkSystemdPod(t *testing.T, v *vm) {
	t.Helper()
	pid, cg := guestStaticPodCgroup(t, v, guestCrictl)
	if !strings.HasPrefix(cg, "/kubepods.slice/") || !strings.HasSuffix(cg, ".scope") {
		t.Errorf("the static pod's container (pid %s) is in %q; want a scope below /kubepods.slice", pid, cg)
	}
	slice := v.ssh("systemctl show --property=ActiveState,ControlGroup kubepods.slice")
	if !strings.Contains(slice, "ActiveState=active") || !strings.Contains(slice, "ControlGroup=/kubepods.slice") {
		t.Errorf("the guest's systemd shows kubepods.slice as %q", slice)
	}
	scope := filepath.Base(cg)
	if s := strings.TrimSpace(v.ssh("systemctl is-active " + scope + " || true")); s != "active" {
		t.Errorf("the container's unit %s is %s in the guest's systemd", scope, s)
	}
	t.Logf("the static pod's container runs in %s, unit %s of the guest's systemd", cg, scope)
}

// guestStaticPodCgroup is the pid in the guest of the static pod's sleep
// container, as crictl (a command line for one of the guest's containerds)
// finds it, and its cgroup v2 path.
func guestStaticPodCgroup(t *testing.T, v *vm, crictl string) (pid, cgroup string) {
	t.Helper()
	id := strings.Fields(v.ssh(crictl + " ps --quiet --name sleep --label io.kubernetes.pod.name=static-sleeper-" + nodeName))
	if len(id) == 0 {
		t.Fatal("crictl in the guest lists no sleep container of the static pod")
	}
	pid = strings.TrimSpace(v.ssh(crictl + " inspect --output go-template --template '{{.info.pid}}' " + id[0]))
	return pid, strings.TrimPrefix(strings.TrimSpace(v.ssh("cat /proc/"+pid+"/cgroup")), "0::")
}

// checkGuestOOMScores checks the OOM score adjustments on a host where
// nodeinit has CAP_SYS_RESOURCE (the privileged node container): nodeinit
// at -1000, where the OOM killer never chooses it, the kubelet and
// kube-proxy at the -999 they set themselves, having started at the value
// nodeinit started with, as its log says; the static pod's container, a
// BestEffort pod's, at 1000.
func checkGuestOOMScores(t *testing.T, v *vm, k *kubeNode) {
	t.Helper()
	out := v.ssh(`n=$(podman inspect --format '{{.State.Pid}}' ` + guestNodeName + `); ` +
		`for p in $n $(pgrep -P $n -x kubelet) $(pgrep -P $n -x kube-proxy); do echo $(cat /proc/$p/comm) $(cat /proc/$p/oom_score_adj); done; ` +
		`c=$(` + guestCrictl + ` ps --quiet --name sleep --label io.kubernetes.pod.name=static-sleeper-` + nodeName + ` | head -n1); ` +
		`p=$(` + guestCrictl + ` inspect --output go-template --template '{{.info.pid}}' $c); echo pod $(cat /proc/$p/oom_score_adj)`)
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			got[f[0]] = f[1]
		}
	}
	want := map[string]string{"nodeinit": "-1000", "kubelet": "-999", "kube-proxy": "-999", "pod": "1000"}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("OOM SCORES: %s's oom_score_adj is %q; want %s (all: %q)", name, got[name], w, out)
		}
	}
	lowered := k.waitLog(0, 0, "Lowered nodeinit's OOM score adjustment")
	t.Logf("oom_score_adj in the guest: %v; %s", got, lowered.text)
}

// guestContainerEnd is when the container name of pod (default namespace)
// ended in the guest's containerd crictl names, and its exit code.
func guestContainerEnd(v *vm, crictl, pod, name string) (time.Time, int, error) {
	ids, err := v.sshTimeout(time.Minute, crictl+" ps --all --quiet --name "+name+" --label io.kubernetes.pod.name="+pod+" --label io.kubernetes.pod.namespace=default")
	if f := strings.Fields(ids); err != nil || len(f) != 1 {
		return time.Time{}, 0, fmt.Errorf("crictl lists %q (%v); want one container %s of pod %s", ids, err, name, pod)
	}
	out, err := v.sshTimeout(time.Minute, crictl+" inspect --output go-template --template '{{.status.state}} {{.status.finishedAt}} {{.status.exitCode}}' "+strings.TrimSpace(ids))
	f := strings.Fields(out)
	if err != nil || len(f) != 3 || f[0] != "CONTAINER_EXITED" {
		return time.Time{}, 0, fmt.Errorf("crictl inspect: %q (%v); want an exited container", out, err)
	}
	ended, err := time.Parse(time.RFC3339Nano, f[1])
	if err != nil {
		return time.Time{}, 0, err
	}
	code, err := strconv.Atoi(f[2])
	return ended, code, err
}

// guestDrain is one drain before a stop, as nodeinit's log has it: when it
// began, was over and the executor got its TERM (times of day), and what
// is wrong with it.
type guestDrain struct {
	began, over, term time.Duration
	problems          []string
}

// drainOf reads the drain of one run of nodeinit from its log, the lines
// from time of day from to to: one drain ("Draining the node before the
// executor stops"), the kubelet's lock released after it began, the drain
// over for that reason, and only then the TERM forwarded to the executor.
func drainOf(log string, from, to time.Duration) guestDrain {
	var d guestDrain
	var drains, released, overs, terms []time.Duration
	for _, l := range nodeinitLines(log) {
		if l.at < from || l.at >= to {
			continue
		}
		switch {
		case strings.Contains(l.text, `"Draining the node before the executor stops"`):
			drains = append(drains, l.at)
		case strings.Contains(l.text, `"Released a shutdown delay inhibitor" who="kubelet"`):
			released = append(released, l.at)
		case strings.Contains(l.text, `"Drain over"`):
			overs = append(overs, l.at)
			if !strings.Contains(l.text, `reason="the node has drained"`) {
				d.problems = append(d.problems, "the drain was over for another reason than the kubelet's release: "+l.text)
			}
		case strings.Contains(l.text, `"Forwarded signal to the executor"`):
			terms = append(terms, l.at)
		}
	}
	if len(drains) != 1 || len(overs) != 1 || len(terms) == 0 || len(released) == 0 {
		d.problems = append(d.problems, fmt.Sprintf("nodeinit's log of the run has %d drains, %d ends of one, %d releases of the kubelet's lock and %d signals forwarded to the executor; want one drain, one end, a release and a TERM",
			len(drains), len(overs), len(released), len(terms)))
		return d
	}
	d.began, d.over, d.term = drains[0], overs[0], terms[0]
	// The release ends the drain, but the bus's line for it can come a
	// few milliseconds after "Drain over" and the TERM (seen: 8 and 48 ms).
	if !slices.ContainsFunc(released, func(r time.Duration) bool { return r >= d.began }) {
		d.problems = append(d.problems, fmt.Sprintf("the kubelet released its lock at %v, never after the drain began at %v", released, d.began))
	}
	if d.over < d.began {
		d.problems = append(d.problems, fmt.Sprintf("the drain was over at %v, before it began at %v", d.over, d.began))
	}
	if d.term < d.over {
		d.problems = append(d.problems, fmt.Sprintf("the executor got its TERM at %v, before the drain was over at %v", d.term, d.over))
	}
	return d
}

// checkGuestMachineID reports the Node's machineID and checks it is a
// machine-id: the node image's own (generated, kept in
// /var/lib/kubelet/nodeinit) in a pid namespace of its own, as the README
// runs it, never the image's "uninitialized".
func checkGuestMachineID(t *testing.T, v *vm, n node) {
	t.Helper()
	id := n.Status.NodeInfo.MachineID
	host := strings.TrimSpace(v.ssh("cat /etc/machine-id"))
	kept, _ := v.sshTimeout(time.Minute, "cat "+nodeIdentityDir+"/machine-id")
	t.Logf("the Node's machineID is %q (the guest's /etc/machine-id %s, kept in %s: %q)", id, host, nodeIdentityDir, strings.TrimSpace(kept))
	if !nodeidentity.Valid(id) {
		t.Errorf("MACHINE-ID ON A SYSTEMD HOST: the Node's machineID is %q, not a machine-id; the node image in podman on a systemd host must report one of its own", id)
	}
	if id == host {
		t.Errorf("MACHINE-ID ON A SYSTEMD HOST: the Node's machineID %q is the guest's own /etc/machine-id; the node image in a pid namespace of its own must report one of its own", id)
	}
}

// stopAndCheckGuestDrained is stopAndCheckDrained for the node in the
// guest: podman stop drains the node (PrepareForShutdown, the kubelet's
// preStop hook and pod shutdown, the lock released before the kubelet's
// TERM) and the container exits 0 within the delay and the grace period.
// The checks of nodeinit's log read this run's lines only (from k.since):
// a restarted container's log holds every run. crictl is a command line
// for the guest's containerd that runs the node's pods.
//
// The drain pod's container must have ended with its TERM trap's exit code
// 0 before the drain was over (its finishedAt in the guest's containerd,
// the guest's clock as nodeinit's log), whatever the API shows: the
// kubelet releases its lock once it has stopped the pods, and reports
// their status afterwards, from its status manager, which the TERM that
// follows the release can beat under TCG. A drain over before the pod's
// end (nodeinit ending it early), or a pod ended by anything but its TERM
// within the drain, fails.
func (k *kubeNode) stopAndCheckGuestDrained(v *vm, crictl string) {
	t := k.t
	t.Helper()
	stopped := time.Now()
	s := k.stopAndCheck(90 * time.Second)
	took := time.Since(stopped)
	t.Logf("graceful node shutdown: the container's stop %v in all; after the drain, %v", took.Round(100*time.Millisecond), s)
	if s.code != 0 {
		t.Errorf("the node container exited %d, want 0", s.code)
	}
	// The delay (the kubelet's 30s) and the grace period (20s) bound it,
	// with podman's own time in the slow guest on top.
	if took > 75*time.Second {
		t.Errorf("the stop took %v, more than the delay and the grace period", took)
	}
	d := drainOf(k.log(), k.since, 24*time.Hour)
	for _, p := range d.problems {
		t.Errorf("the stop's drain: %s", p)
	}
	t.Logf("the stop's drain: %v from PrepareForShutdown to its end; the kubelet's TERM %v after it", (d.over - d.began).Round(time.Millisecond), (d.term - d.over).Round(time.Millisecond))
	if ended, code, err := guestContainerEnd(v, crictl, "drain", "c"); err != nil {
		t.Errorf("the drain pod's container: %v", err)
	} else {
		t.Logf("the drain pod's container ended with exit code %d at %s, %v before the drain was over", code, ended.Format("15:04:05.000"), (d.over - timeOfDay(ended)).Round(time.Millisecond))
		if code != 0 || len(d.problems) == 0 && timeOfDay(ended) > d.over {
			t.Errorf("the drain pod's container ended with exit code %d at %s, the drain over at %v: want exit code 0 (its TERM trap) before the drain's end",
				code, ended.Format("15:04:05.000000"), d.over)
		}
	}
	if out, err := v.sshTimeout(time.Minute, "cat "+guestDrainDir+"/prestop"); err != nil {
		t.Errorf("the pod's preStop hook did not run: %v", err)
	} else {
		t.Logf("preStop ran at %s", strings.TrimSpace(out))
	}
	// What the API server shows of the pod is the kubelet's status
	// manager's, sent after the kubelet has stopped the pod and released
	// its lock, which the TERM that follows can beat under TCG: once the
	// pod still Running and Ready (its container had ended 10.4 s before
	// the drain's end), in earlier runs Running with its containers ended
	// (ContainersReady False, PodCompleted) or a terminal phase with
	// DisruptionTarget. No bound on it holds on the emulated host; the
	// container's end above is the check, and this is logged.
	p := k.getPod("drain")
	var conditions []string
	for _, c := range p.Status.Conditions {
		if c.Status != "True" || c.Reason != "" {
			conditions = append(conditions, strings.TrimSpace(c.Type+"="+c.Status+" "+c.Reason))
		}
	}
	t.Logf("the API server shows the drain pod %s, conditions not plainly true: %q", p.Status.Phase, conditions)
	if n := k.getNode(); !strings.Contains(n.condition("Ready").Message, "shutting down") {
		t.Errorf("the Node does not show the shutdown: Ready is %+v", n.condition("Ready"))
	}
}

// TestDrainOfOneRun reads the drain of one run of nodeinit from a log that
// holds two (a container restarted): each run's own lines decide, and a
// TERM before the drain's end, a second drain or none fail.
func TestDrainOfOneRun(t *testing.T) {
	run := func(h int, termFirst bool) []string {
		at := func(s int) string { return fmt.Sprintf("I1203 %02d:00:%02d.000000       1 ", h, s) }
		lines := []string{at(0) + `shutdown.go:1] "Starting nodeinit"`,
			at(10) + `supervisor.go:1] "Draining the node before the executor stops" signal="SIGTERM"`,
			at(20) + `inhibit_linux.go:1] "Released a shutdown delay inhibitor" who="kubelet" pid=9`,
			at(20) + `supervisor.go:1] "Drain over" reason="the node has drained"`,
			at(21) + `supervisor.go:1] "Forwarded signal to the executor" signal="SIGTERM"`}
		if termFirst {
			lines[4] = at(5) + `supervisor.go:1] "Forwarded signal to the executor" signal="SIGTERM"`
		}
		return lines
	}
	hour := func(h int) time.Duration { return time.Duration(h) * time.Hour }
	for _, c := range []struct {
		name     string
		log      []string
		from, to time.Duration
		problems int
	}{
		{"the first run, drained", append(run(1, false), run(2, true)...), hour(1), hour(2), 0},
		{"the second run, its TERM before its drain", append(run(1, false), run(2, true)...), hour(2), hour(3), 1},
		{"both runs as one", append(run(1, false), run(2, false)...), hour(1), hour(3), 1},
		{"a run without a drain", run(1, false)[:1], hour(1), hour(2), 1},
	} {
		slices.SortFunc(c.log, strings.Compare)
		if d := drainOf(strings.Join(c.log, "\n"), c.from, c.to); len(d.problems) != c.problems {
			t.Errorf("%s: problems %q; want %d", c.name, d.problems, c.problems)
		}
	}
}

// subPathPod writes a file through a subPath of a hostPath volume (/tmp),
// and is Ready once its other container, mounting the whole volume, reads
// it there: as the e2e suite's "HostPath should support subPath" spec.
const subPathPod = `apiVersion: v1
kind: Pod
metadata: {name: subpath, namespace: default}
spec:
  terminationGracePeriodSeconds: 1
  volumes: [{name: tmp, hostPath: {path: /tmp}}]
  containers:
  - name: writer
    image: ` + busyboxImage + `
    imagePullPolicy: Never
    command: [sh, -c, 'echo written > /sub/file && exec sleep 3600']
    volumeMounts: [{name: tmp, mountPath: /sub, subPath: ` + guestSubPath + `}]
  - name: reader
    image: ` + busyboxImage + `
    imagePullPolicy: Never
    command: [sleep, "3600"]
    volumeMounts: [{name: tmp, mountPath: /tmp-volume}]
    readinessProbe:
      exec: {command: [grep, -q, written, /tmp-volume/` + guestSubPath + `/file]}
      periodSeconds: 2
`

// guestSubPath is subPathPod's subPath in the host's /tmp.
const guestSubPath = "nodeinit-subpath"

// checkGuestHostPathSubPath checks that a hostPath volume's subPath is the
// host's: the kubelet makes and mounts it in its own mount namespace, the
// runtime mounts the whole volume from the host's, so the node container's
// /tmp must be the host's for both to be one directory.
func checkGuestHostPathSubPath(t *testing.T, v *vm, k *kubeNode) {
	t.Helper()
	defer v.ssh("rm -rf /tmp/" + guestSubPath)
	k.create("/api/v1/namespaces/default/pods", "subpath", subPathPod)
	k.waitPods("metadata.name=subpath", 1, 2*time.Minute)
	if got := strings.TrimSpace(v.ssh("cat /tmp/" + guestSubPath + "/file")); got != "written" {
		t.Errorf("the host's /tmp/%s/file holds %q; want what the pod wrote through the subPath, \"written\"", guestSubPath, got)
	}
}
