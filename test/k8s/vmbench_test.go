//go:build k8s

package k8s

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The node containers' comparison of make bench-k8s (benchContainers) on
// the modern host: one guest boot of the VM suite (cgroup v2 only, systemd
// as PID 1, containerd 2 with the systemd cgroup driver), nodeinit's node
// image run as its README runs it there and the systemd node image
// (images/systemd-node) run as kind runs a node on cgroup v2, the same
// kubelet, kube-proxy, configuration and containerd, rounds alternated.
// Under TCG the guest runs some ten times slower than the machine: the
// ratios are the result, not the times.

// vmStopTimeout is podman stop's --time in the guest: a drain under TCG
// takes longer than podman's default 10 s.
const vmStopTimeout = 90 * time.Second

// guestTestBinary is this test binary in the shared folder: in the guest
// it measures the node container's processes (TestGuestMeasureHelper)
// with the code that measures them on this machine.
const guestTestBinary = guestShare + "/k8s.test"

// TestModernHostBench runs $NODEINIT_VM_BENCH_ROUNDS rounds (3 unless
// set) of the three node containers in one guest and writes the table and
// the goals' verdicts to $NODEINIT_VM_BENCH_OUT (make bench-k8s-vm prints
// it), or to the test's log.
func TestModernHostBench(t *testing.T) {
	rounds := 3
	if s := os.Getenv("NODEINIT_VM_BENCH_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("NODEINIT_VM_BENCH_ROUNDS=%q: want a number of rounds, 1 or more", s)
		}
		rounds = n
	}
	c := getCluster(t)
	c.buildNodeImage(t)
	c.buildSystemdNodeImage(t)
	share := filepath.Join(t.TempDir(), "share")
	start := time.Now()
	c.fillShare(t, share, map[string]string{"node": nodeImage, "systemd-node": systemdNodeImage, "pause": pauseImage, "busybox": busyboxImage})
	exe, err := os.Executable()
	must(t, err)
	must(t, linkOrCopy(exe, filepath.Join(share, filepath.Base(guestTestBinary))))
	t.Logf("shared folder filled in %v", time.Since(start).Round(100*time.Millisecond))
	stores := imageStores(t, t.TempDir(), share, []string{"node", "systemd-node"}, false)
	load := loadAverage()
	v := bootNodeHost(t, t.TempDir(), share, stores)
	guest := strings.Join(strings.Fields(v.ssh("uname -r; systemctl --version | head -1; "+guestContainerdDir+"/containerd --version | cut -d' ' -f3; podman --version")), " ")

	flags := c.guestImageFlags(t, v)
	t.Logf("nodeinit's node image runs %q and %q", flags.kubelet, flags.proxy)
	runs := map[string][]containerRun{}
	began := time.Now()
	for round := range rounds {
		for i := range containerNodes {
			who := containerNodes[(i+round)%len(containerNodes)]
			name := fmt.Sprintf("container%d-%s", round+1, strings.NewReplacer(" ", "-", "--", "").Replace(who))
			t.Run(name, func(t *testing.T) {
				runs[who] = append(runs[who], c.benchGuestNode(t, v, who, flags))
			})
		}
	}
	for _, who := range containerNodes {
		if len(runs[who]) < rounds {
			t.Fatalf("%s ran %d of %d rounds: no table", who, len(runs[who]), rounds)
		}
	}
	// The guest's images are this machine's, saved and loaded.
	sizes := map[string]int64{}
	for image, who := range map[string]string{nodeImage: nodeinitNode, systemdNodeImage: systemdNode} {
		sizes[who] = c.imageSizeOverBinaries(t, image)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "\nOn the cgroup v2 systemd host under qemu (TCG, 2 vCPUs, 4 GiB; guest %s): the machine's load average %s before the guest's boot, %s at the end.\n",
		guest, load, loadAverage())
	writeContainers(&b, runs, sizes, c.imageSize(t, nodeBaseImage), rounds, time.Since(began))
	if out := os.Getenv("NODEINIT_VM_BENCH_OUT"); out != "" {
		must(t, os.WriteFile(out, b.Bytes(), 0o644))
	} else {
		t.Log(b.String())
	}
}

// loadAverage is this machine's load average over 1, 5 and 15 minutes.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

// guestImageFlags asks nodeinit's node image, run in the guest as the
// bench runs it, for the command lines it gives the kubelet and
// kube-proxy, and puts the guest back.
func (c *cluster) guestImageFlags(t *testing.T, v *vm) nodeFlags {
	t.Helper()
	c.writeGuestNodeFiles(t, v, vmKubeletConfig+kubeletShutdown, staticPod)
	defer c.putGuestBack(t, v, "true")
	args := append(append([]string{"podman", "run", "--rm"}, readmeRun("podman")[5:]...), nodeImage, "--make-rshared", "--write-flags")
	out := v.ssh(strings.Join(args, " "))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("--write-flags printed %d lines, want the kubelet's and kube-proxy's:\n%s", len(lines), out)
	}
	var f nodeFlags
	for i, l := range lines {
		// A unit's $VAR is split at white space, without quotes.
		if strings.ContainsAny(l, `'"\`) {
			t.Fatalf("--write-flags quoted a word; a unit's environment cannot carry it: %s", l)
		}
		if i == 0 {
			f.kubelet = strings.Fields(l)
		} else {
			f.proxy = strings.Fields(l)
		}
	}
	if filepath.Base(f.kubelet[0]) != "kubelet" || filepath.Base(f.proxy[0]) != "kube-proxy" {
		t.Fatalf("--write-flags printed %q and %q, want the kubelet's and kube-proxy's lines", f.kubelet, f.proxy)
	}
	return f
}

// guestBenchArgs are podman create's options for a node container of the
// bench in the guest, whose files are in the shared folder's directory
// files (writeGuestNodeFiles). nodeinit's node is run with the README's
// line (readmeRun). The systemd node is run as kind runs a node on cgroup
// v2: a private cgroup namespace, where its systemd manages the kubelet's
// slices, tmpfs /run and /tmp, container=podman; with the host's network,
// /var/lib/kubelet (rshared), the node's files, pod logs, modules and
// containerd's socket and root, since the guest's containerd runs the
// pods, in the guest systemd's kubepods.slice.
func guestBenchArgs(who, files string) []string {
	if who != systemdNode {
		return readmeRun("podman")[3:]
	}
	return []string{"--name", guestNodeName, "--privileged", "--network=host", "--cgroupns=private",
		"-v", "/var/lib/kubelet:/var/lib/kubelet:rshared", "-v", "/etc/kubernetes:/etc/kubernetes:ro",
		"-v", "/var/log/pods:/var/log/pods", "-v", "/lib/modules:/lib/modules:ro",
		"-v", "/run/containerd:/run/containerd", "-v", "/var/lib/containerd:/var/lib/containerd:ro",
		"--tmpfs", "/tmp", "--tmpfs", "/run", "-e", "container=podman",
		"-v", guestShare + "/" + filepath.Base(files) + "/kube-proxy.env:/etc/default/kube-proxy:ro"}
}

// benchGuestNode is benchContainerNode in the guest: the container
// created, then timed from podman start to the Node Ready; the static pod
// and a pod with a preStop hook running; the supervision's CPU over
// idleWindow and its memory, and podman stop with the kubelet's and
// kube-proxy's ends, measured in the guest by this test binary; then
// whether the pod drained.
func (c *cluster) benchGuestNode(t *testing.T, v *vm, who string, flags nodeFlags) containerRun {
	files := c.writeGuestNodeFiles(t, v, vmKubeletConfig+kubeletShutdown, staticPod)
	create := append([]string{"podman", "create"}, guestBenchArgs(who, files)...)
	if who == systemdNode {
		// As kubeadm does: the node's own kubelet flags in
		// kubeadm-flags.env, the unit's drop-in giving --config and
		// --kubeconfig. kube-proxy's whole line in its unit's file.
		var own []string
		for _, a := range flags.kubelet[1:] {
			if !strings.HasPrefix(a, "--config=") && !strings.HasPrefix(a, "--kubeconfig=") {
				own = append(own, a)
			}
		}
		must(t, os.WriteFile(filepath.Join(files, "kubeadm-flags.env"), []byte(`KUBELET_KUBEADM_ARGS="`+strings.Join(own, " ")+"\"\n"), 0o644))
		must(t, os.WriteFile(filepath.Join(files, "kube-proxy.env"), []byte(`KUBE_PROXY_ARGS="`+strings.Join(flags.proxy[1:], " ")+"\"\n"), 0o644))
		v.ssh("cp " + guestShare + "/" + filepath.Base(files) + "/kubeadm-flags.env /var/lib/kubelet/")
		create = append(create, systemdNodeImage)
	} else {
		create = append(create, nodeImage, "--make-rshared")
		if who == drainingNode {
			create = append(create, "--graceful-node-shutdown")
		}
	}
	v.ssh("mkdir -p /var/log/pods && " + strings.Join(create, " ") + " >/dev/null")

	k := &kubeNode{t: t, c: c, dir: files}
	guestContainer(k, v, "podman", guestNodeName)
	if who == systemdNode {
		// The units' output is in the journal, inside.
		podmanLog := k.log
		k.log = func() string {
			j, _ := v.sshTimeout(time.Minute, "podman exec "+guestNodeName+" journalctl --no-pager -n 80")
			return podmanLog() + j
		}
	}
	t.Cleanup(func() { c.removeGuestNode(t, v, k, "podman rm --force --time 30 "+guestNodeName) })

	k.started = time.Now()
	v.ssh("podman start " + guestNodeName + " >/dev/null")
	_, ready := k.waitReady(5 * time.Minute)
	if who == systemdNode {
		if out, err := v.sshTimeout(time.Minute, "podman exec "+guestNodeName+" systemctl is-active kubelet.service kube-proxy.service"); err != nil || strings.TrimSpace(out) != "active\nactive" {
			t.Fatalf("systemd's node does not run the kubelet and kube-proxy units (%v): %q", err, out)
		}
	}
	k.waitPods("metadata.name=static-sleeper-"+nodeName, 1, 5*time.Minute)
	k.create("/api/v1/namespaces/default/pods", "drain", fmt.Sprintf(drainPod, guestDrainDir))
	k.waitPods("metadata.name=drain", 1, 5*time.Minute)

	before := guestMeasure[map[int]containerProcess](t, v, "processes")
	time.Sleep(idleWindow)
	after := guestMeasure[map[int]containerProcess](t, v, "processes")
	r := containerRun{ready: ready}
	r.supervision(before, after)

	s := guestMeasure[guestStop](t, v, "stop")
	r.stop = s.Stop
	code, err := strconv.Atoi(strings.TrimSpace(v.ssh("podman inspect --format '{{.State.ExitCode}}' " + guestNodeName)))
	must(t, err)
	r.exitCode = code
	if s.Kubelet.IsZero() || s.Proxy.IsZero() {
		t.Fatalf("the kubelet or kube-proxy outlived its container: %+v", s)
	}
	r.proxyAfter = s.Proxy.Sub(s.Kubelet)

	_, prestop := v.sshTimeout(time.Minute, "test -e "+guestDrainDir+"/prestop")
	r.finish(t, k, who, ready, prestop == nil)
	return r
}

// guestStop is podman stop of the node container, measured in the guest:
// how long it took, and when the kubelet and kube-proxy were seen gone.
type guestStop struct {
	Stop           time.Duration
	Kubelet, Proxy time.Time
}

// guestProcess is containerProcess as JSON carries it.
type guestProcess struct {
	Pid        int
	Name       string
	Pss        int64
	Anon, File int64
	CPU        time.Duration
	Work       bool
}

// guestMeasureLine starts the line of the helper's result on its stdout.
const guestMeasureLine = "guest-measure: "

// guestMeasure runs this test binary in the guest (TestGuestMeasureHelper)
// to measure the node container: what ("processes": its processes,
// containerProcesses; "stop": podman stop, with watchEnds on its kubelet
// and kube-proxy), and returns the result.
func guestMeasure[T map[int]containerProcess | guestStop](t *testing.T, v *vm, what string) T {
	t.Helper()
	out := v.ssh(fmt.Sprintf("NODEINIT_GUEST_MEASURE=%s NODEINIT_GUEST_CONTAINER=%s NODEINIT_GUEST_STOP_TIMEOUT=%d %s -test.run '^TestGuestMeasureHelper$'",
		what, guestNodeName, int(vmStopTimeout.Seconds()), guestTestBinary))
	var result T
	for l := range strings.SplitSeq(out, "\n") {
		if j, ok := strings.CutPrefix(l, guestMeasureLine); ok {
			if m, isMap := any(&result).(*map[int]containerProcess); isMap {
				var ps []guestProcess
				must(t, json.Unmarshal([]byte(j), &ps))
				*m = map[int]containerProcess{}
				for _, p := range ps {
					(*m)[p.Pid] = containerProcess{pid: p.Pid, name: p.Name, pss: p.Pss, anon: p.Anon, file: p.File, cpu: p.CPU, work: p.Work}
				}
			} else {
				must(t, json.Unmarshal([]byte(j), &result))
			}
			return result
		}
	}
	t.Fatalf("the guest's measure %s printed no result:\n%s", what, out)
	return result
}

// TestGuestMeasureHelper is what guestMeasure runs in the guest, this test
// binary from the shared folder; run otherwise it has nothing to measure
// and returns. It prints its result on one line after guestMeasureLine.
func TestGuestMeasureHelper(t *testing.T) {
	what := os.Getenv("NODEINIT_GUEST_MEASURE")
	if what == "" {
		return
	}
	name := os.Getenv("NODEINIT_GUEST_CONTAINER")
	pid1 := func() int {
		out, err := exec.Command("podman", "inspect", "--format", "{{.State.Pid}}", name).Output()
		must(t, err)
		pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil || pid == 0 {
			t.Fatalf("the container %s has no pid (%v)", name, err)
		}
		return pid
	}
	var result any
	switch what {
	case "processes":
		var ps []guestProcess
		for _, p := range containerProcesses(t, pid1()) {
			ps = append(ps, guestProcess{Pid: p.pid, Name: p.name, Pss: p.pss, Anon: p.anon, File: p.file, CPU: p.cpu, Work: p.work})
		}
		result = ps
	case "stop":
		var kubelet, proxy int
		for _, p := range containerProcesses(t, pid1()) {
			switch p.name {
			case "kubelet":
				kubelet = p.pid
			case "kube-proxy":
				proxy = p.pid
			}
		}
		if kubelet == 0 || proxy == 0 {
			t.Fatalf("the node container runs no kubelet or no kube-proxy")
		}
		ends := watchEnds(kubelet, proxy)
		start := time.Now()
		if out, err := exec.Command("podman", "stop", "--time", os.Getenv("NODEINIT_GUEST_STOP_TIMEOUT"), name).CombinedOutput(); err != nil {
			t.Fatalf("podman stop: %v %s", err, out)
		}
		s := guestStop{Stop: time.Since(start)}
		seen := ends()
		s.Kubelet, s.Proxy = seen[0], seen[1]
		result = s
	default:
		t.Fatalf("NODEINIT_GUEST_MEASURE=%q: want processes or stop", what)
	}
	b, err := json.Marshal(result)
	must(t, err)
	fmt.Println(guestMeasureLine + string(b))
}
