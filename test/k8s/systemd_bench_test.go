//go:build k8s

package k8s

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	nodecluster "github.com/nodeinit/nodeinit/test/cluster"
	"github.com/nodeinit/nodeinit/test/testenv"
)

// The comparison of issue 24: nodeinit's node image against the node
// container people run instead, systemd as PID 1 with the kubelet and
// kube-proxy as units (images/systemd-node, built as kind builds its node
// image), on the same kubelet, kube-proxy, configuration, control plane
// and containerd, in podman, rounds alternated. TestRealNodeBench runs it
// after its own table.

const (
	systemdNodeBaseImage = "localhost/nodeinit-k8s-systemd-node-base:test"
	systemdNodeImage     = "localhost/nodeinit-k8s-systemd-node:test"
	// benchContainerName is the node container of every round: one at a
	// time, on the host's network and /var/lib/kubelet.
	benchContainerName = "nodeinit-k8s-bench-node"
	// idleWindow is how long the supervision's CPU is measured, after the
	// node is Ready and its pods run.
	idleWindow = time.Minute
)

// systemdNodeBasePackages are the node base's packages and the two the
// service manager needs: systemd (PID 1, journald, logind) and dbus, the
// bus the kubelet asks logind on. kind's base adds no other for the
// kubelet: the rest of its list is for its containerd, storage and shell.
var systemdNodeBasePackages = append(slices.Clone(nodeBasePackages), "systemd", "dbus")

// The goals, nodeinit / systemd in the same run, on either host: Node
// Ready after the start, the stop of the node that drains (where systemd's
// does not), and the supervision's memory.
const (
	readyGoal  = 0.8
	stopGoal   = 0.6
	memoryGoal = 0.25
)

// The node containers compared, in the order of a round's first.
const (
	systemdNode  = "systemd"
	nodeinitNode = "nodeinit"
	drainingNode = "nodeinit --graceful-node-shutdown"
)

var containerNodes = []string{systemdNode, nodeinitNode, drainingNode}

// systemdImage builds the systemd node image once per run.
var systemdImage struct {
	once sync.Once
	err  error
}

// buildSystemdNodeImage builds images/systemd-node/Dockerfile on a Debian
// base made with mmdebstrap (the node base's packages, systemd and dbus;
// nothing pulled), with the built kubelet and kube-proxy.
func (c *cluster) buildSystemdNodeImage(t *testing.T) {
	t.Helper()
	systemdImage.once.Do(func() {
		systemdImage.err = errors.New("the build stopped before it ended")
		start := time.Now()
		base := debianRoot(t, filepath.Dir(c.bin), systemdNodeBasePackages)
		if _, err := c.podman.run(5*time.Minute, "import", base, systemdNodeBaseImage); err != nil {
			systemdImage.err = err
			return
		}
		root := testenv.ModuleRoot(t)
		context := filepath.Join(t.TempDir(), "context")
		files := map[string]string{
			filepath.Join(c.bin, "kubelet"):    "bin/kubelet",
			filepath.Join(c.bin, "kube-proxy"): "bin/kube-proxy",
		}
		for _, f := range []string{"kubelet.service", "10-kubeadm.conf", "kubelet.slice", "kube-proxy.service"} {
			files[filepath.Join(root, "images/systemd-node", f)] = "images/systemd-node/" + f
		}
		for from, to := range files {
			if systemdImage.err = linkOrCopy(from, filepath.Join(context, to)); systemdImage.err != nil {
				return
			}
		}
		dockerfile, err := os.ReadFile(filepath.Join(root, "images/systemd-node/Dockerfile"))
		if err != nil {
			systemdImage.err = err
			return
		}
		if systemdImage.err = c.podman.build(systemdNodeImage, string(dockerfile), context, "BASE="+systemdNodeBaseImage); systemdImage.err != nil {
			return
		}
		// The image's own systemd reads the units as it will at boot: a
		// misspelt key or a missing binary shows here, in one line each,
		// where at boot it would only be a warning in the journal.
		// It warns on stderr and exits 0: its output is the verdict.
		out, err := c.podman.run(time.Minute, "run", "--rm", "--network=none", "--entrypoint", "/bin/sh", systemdNodeImage, "-c",
			"cd /etc/systemd/system && systemd-analyze verify --man=no kubelet.service kube-proxy.service kubelet.slice 2>&1")
		if err != nil || strings.TrimSpace(out) != "" {
			systemdImage.err = fmt.Errorf("systemd-analyze verify of the units: %v %s", err, out)
			return
		}
		t.Logf("systemd node image built on its mmdebstrap base in %v", time.Since(start).Round(100*time.Millisecond))
	})
	if systemdImage.err != nil {
		t.Fatalf("the systemd node image: %v", systemdImage.err)
	}
}

// containerRun is what one node container measured.
type containerRun struct {
	ready, stop time.Duration
	exitCode    int
	// drained: the pod's preStop hook ran and the kubelet ended it with
	// DisruptionTarget (TerminationByKubelet).
	drained bool
	// proxyAfter is kube-proxy's end less the kubelet's, as seen from the
	// host (negative: kube-proxy ended first).
	proxyAfter time.Duration
	// pss and cpu are the supervision's: every process of the container
	// but the kubelet, kube-proxy and what they started. cpu is over
	// idleWindow.
	pss         int64
	cpu         time.Duration
	supervisors string
}

// nodeFlags are the kubelet's and kube-proxy's command lines (the program
// and its arguments) nodeinit's node image gives them in this run, as its
// --write-flags prints them inside the container.
type nodeFlags struct{ kubelet, proxy []string }

// benchContainers measures each of containerNodes rounds times, the
// first of each round another, and writes the table.
func (c *cluster) benchContainers(t *testing.T, w io.Writer, rounds int) {
	c.buildNodeImage(t)
	c.buildSystemdNodeImage(t)
	flags := c.imageFlags(t)
	t.Logf("systemd's node runs with %q", nodecluster.SystemdCgroupArgs())
	t.Logf("nodeinit's node image runs %q and %q", flags.kubelet, flags.proxy)
	runs := map[string][]containerRun{}
	began := time.Now()
	for round := range rounds {
		for i := range containerNodes {
			who := containerNodes[(i+round)%len(containerNodes)]
			name := fmt.Sprintf("container%d-%s", round+1, strings.NewReplacer(" ", "-", "--", "").Replace(who))
			t.Run(name, func(t *testing.T) {
				runs[who] = append(runs[who], c.benchContainerNode(t, who, flags))
			})
		}
	}
	for _, who := range containerNodes {
		if len(runs[who]) == 0 {
			return
		}
	}
	sizes := map[string]int64{}
	for image, who := range map[string]string{nodeImage: nodeinitNode, systemdNodeImage: systemdNode} {
		sizes[who] = c.imageSizeOverBinaries(t, image)
	}
	base := c.imageSize(t, nodeBaseImage)
	writeContainers(w, runs, sizes, base, rounds, time.Since(began))
}

// imageFlags asks nodeinit's node image, run as the bench runs it, for
// the command lines it gives the kubelet and kube-proxy.
func (c *cluster) imageFlags(t *testing.T) nodeFlags {
	t.Helper()
	dir := t.TempDir()
	c.writeNodeFiles(t, dir, "/etc/kubernetes", nodeSpec{kubeletConfig: kubeletShutdown})
	// The kubelet's directories of its own, not the host's: nothing runs.
	kubeletDir, podLogs := t.TempDir(), t.TempDir()
	kubeletConfig, err := os.ReadFile(filepath.Join(dir, "kubelet.yaml"))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(kubeletDir, "config.yaml"), kubeletConfig, 0o600))
	args := []string{"run", "--rm"}
	for _, a := range c.benchPodmanArgs(dir, nodeinitNode) {
		a = strings.Replace(a, "/var/lib/kubelet:/var/lib/kubelet:rshared", kubeletDir+":/var/lib/kubelet", 1)
		args = append(args, strings.Replace(a, "/var/log/pods:", podLogs+":", 1))
	}
	args = append(append(args, nodeImage), c.nodeinitImageArgs(nodeinitNode, "--write-flags")...)
	out, err := c.podman.run(time.Minute, args...)
	must(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("--write-flags printed %d lines, want the kubelet's and kube-proxy's:\n%s", len(lines), out)
	}
	var f nodeFlags
	for i, l := range lines {
		words := strings.Fields(l)
		// A unit's $VAR is split at white space, without quotes.
		if strings.ContainsAny(l, `'"\`) {
			t.Fatalf("--write-flags quoted a word; a unit's environment cannot carry it: %s", l)
		}
		if i == 0 {
			f.kubelet = words
		} else {
			f.proxy = words
		}
	}
	if filepath.Base(f.kubelet[0]) != "kubelet" || filepath.Base(f.proxy[0]) != "kube-proxy" {
		t.Fatalf("--write-flags printed %q and %q, want the kubelet's and kube-proxy's lines", f.kubelet, f.proxy)
	}
	return f
}

// benchPodmanArgs are podman's options for a node container of the bench
// whose files are in dir. Both kinds run privileged on the host's network
// and cgroup namespace, with /var/lib/kubelet shared with the host
// (rshared) and what the host's containerd needs (as runNodeImage says):
// the kubelet must see the cgroup paths the host's containerd makes the
// pods in (kind's nodes have their containerd inside, and a private cgroup
// namespace).
//
// nodeinit's node has the host's /sys/fs/cgroup, as its README runs it.
// The systemd node has what kind gives its nodes (tmpfs /run and /tmp,
// container=podman) and what systemd needs on a cgroup v1 host that is not
// systemd's (nodecluster.SystemdCgroupArgs).
func (c *cluster) benchPodmanArgs(dir, who string) []string {
	cd := c.containerd.dir
	args := []string{"--name", benchContainerName, "--privileged", "--network=host", "--cgroupns=host",
		"-v", "/var/lib/kubelet:/var/lib/kubelet:rshared", "-v", dir + ":/etc/kubernetes:ro",
		"-v", "/var/log/pods:/var/log/pods", "-v", cd + ":" + cd, "-v", cd + "/root:" + cd + "/root:ro"}
	if who != systemdNode {
		return append(args, "-v", "/sys/fs/cgroup:/sys/fs/cgroup")
	}
	args = append(args, "--tmpfs", "/tmp", "--tmpfs", "/run", "-e", "container=podman",
		"-v", filepath.Join(dir, "kube-proxy.env")+":/etc/default/kube-proxy:ro")
	return append(args, nodecluster.SystemdCgroupArgs()...)
}

// nodeinitImageArgs are the arguments after nodeinit's image name: the
// README's --make-rshared, the test's kube-proxy flags (as runNodeImage
// gives them), and the image's kubelet line with the node's address and
// name.
func (c *cluster) nodeinitImageArgs(who string, more ...string) []string {
	args := []string{"--make-rshared"}
	if who == drainingNode {
		args = append(args, "--graceful-node-shutdown")
	}
	args = append(append(append(args, more...), proxyFlags("iptables")...), "--",
		"/usr/local/bin/kubelet", "--config=/var/lib/kubelet/config.yaml", "--kubeconfig=/etc/kubernetes/kubelet.conf",
		"--node-ip="+c.nodeIP, "--hostname-override="+nodeName)
	return args
}

// benchContainerNode runs one node container: created, then timed from
// podman start to the Node Ready; the static pod and a pod with a preStop
// hook running; the supervision's CPU over idleWindow and its memory;
// then podman stop with podman's default timeout, the kubelet's and
// kube-proxy's ends watched from the host; then whether the pod drained.
func (c *cluster) benchContainerNode(t *testing.T, who string, flags nodeFlags) containerRun {
	dir := t.TempDir()
	c.writeImageNodeFiles(t, dir, "/etc/kubernetes", nodeSpec{kubeletConfig: kubeletShutdown})
	must(t, os.MkdirAll("/var/log/pods", 0o755))
	must(t, os.RemoveAll(nodeIdentityDir))

	args := append([]string{"create"}, c.benchPodmanArgs(dir, who)...)
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
		must(t, os.WriteFile("/var/lib/kubelet/kubeadm-flags.env",
			[]byte(`KUBELET_KUBEADM_ARGS="`+strings.Join(own, " ")+"\"\n"), 0o644))
		must(t, os.WriteFile(filepath.Join(dir, "kube-proxy.env"),
			[]byte(`KUBE_PROXY_ARGS="`+strings.Join(flags.proxy[1:], " ")+"\"\n"), 0o644))
		args = append(args, systemdNodeImage)
	} else {
		args = append(append(args, nodeImage), c.nodeinitImageArgs(who)...)
	}
	if _, err := c.podman.run(2*time.Minute, args...); err != nil {
		t.Fatal(err)
	}

	k := &kubeNode{t: t, c: c, dir: dir}
	inspect := func(format string) string {
		out, err := c.podman.run(30*time.Second, "inspect", "--format", format, benchContainerName)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	k.running = func() bool { return inspect("{{.State.Running}}") == "true" }
	k.pid = func() int {
		pid, err := strconv.Atoi(inspect("{{.State.Pid}}"))
		if err != nil || pid == 0 {
			t.Fatalf("the node container has no pid (%v)", err)
		}
		return pid
	}
	// The log is read when a test fails too, maybe after the container
	// is gone: it never fails itself.
	k.log = func() string {
		out, _ := c.podman.run(30*time.Second, "logs", benchContainerName)
		if who == systemdNode {
			// The units' output is in the journal, inside.
			j, _ := c.podman.run(30*time.Second, "exec", benchContainerName, "journalctl", "--no-pager", "-n", "80")
			out += j
		}
		return out
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the node container's log, last lines:\n%s", testenv.Tail(k.log(), 60))
		}
		if _, err := c.podman.run(2*time.Minute, "rm", "--force", "--time", "30", benchContainerName); err != nil {
			t.Error(err)
		}
		if err := os.RemoveAll(nodeIdentityDir); err != nil {
			t.Error(err)
		}
		k.teardown()
	})

	k.started = time.Now()
	if _, err := c.podman.run(2*time.Minute, "start", benchContainerName); err != nil {
		t.Fatal(err)
	}
	_, ready := k.waitReady(90 * time.Second)
	if who == systemdNode {
		c.checkUnits(t)
	}
	k.waitPods("metadata.name=static-sleeper-"+nodeName, 1, 60*time.Second)
	k.create("/api/v1/namespaces/default/pods", "drain", fmt.Sprintf(drainPod, k.dir))
	k.waitPods("metadata.name=drain", 1, 60*time.Second)

	pid1 := k.pid()
	before := containerProcesses(t, pid1)
	time.Sleep(idleWindow)
	after := containerProcesses(t, pid1)
	r := containerRun{ready: ready}
	r.supervision(before, after)

	if who == systemdNode {
		// Whether the kubelet took logind's delay lock, as it does on a
		// machine: the halt that SIGRTMIN+3 starts does not go through
		// logind.
		locks, err := c.podman.run(30*time.Second, "exec", benchContainerName, "systemd-inhibit", "--list", "--no-pager")
		t.Logf("logind's inhibitors in systemd's node (%v):\n%s", err, locks)
	}
	var kubelet, proxy int
	for _, p := range after {
		switch p.name {
		case "kubelet":
			kubelet = p.pid
		case "kube-proxy":
			proxy = p.pid
		}
	}
	if kubelet == 0 || proxy == 0 {
		t.Fatalf("the node container runs no kubelet or no kube-proxy: %+v", after)
	}
	ends := watchEnds(kubelet, proxy)
	start := time.Now()
	if _, err := c.podman.run(2*time.Minute, "stop", benchContainerName); err != nil {
		t.Fatal(err)
	}
	r.stop = time.Since(start)
	seen := ends()
	r.exitCode, _ = strconv.Atoi(inspect("{{.State.ExitCode}}"))
	if seen[0].IsZero() || seen[1].IsZero() {
		t.Fatalf("the kubelet or kube-proxy outlived its container: %v", seen)
	}
	r.proxyAfter = seen[1].Sub(seen[0])

	_, prestop := os.Stat(filepath.Join(dir, "prestop"))
	r.finish(t, k, who, ready, prestop == nil)
	return r
}

// finish sets r.drained, the drain pod ended by the kubelet's shutdown
// (its DisruptionTarget condition) with its preStop hook run, and logs the
// run.
func (r *containerRun) finish(t *testing.T, k *kubeNode, who string, ready time.Duration, prestopRan bool) {
	t.Helper()
	for _, c := range k.getPod("drain").Status.Conditions {
		if c.Type == "DisruptionTarget" && c.Status == "True" && c.Reason == "TerminationByKubelet" {
			r.drained = prestopRan
		}
	}
	t.Logf("%s: Ready %v after podman start; podman stop %v, exit code %d; pod drained %v; kube-proxy ended %v after the kubelet; supervision %.1f MB PSS (%s), %v CPU in %v idle",
		who, ready.Round(time.Millisecond), r.stop.Round(time.Millisecond), r.exitCode, r.drained, r.proxyAfter.Round(time.Millisecond),
		float64(r.pss)/1e6, r.supervisors, r.cpu.Round(time.Microsecond), idleWindow)
}

// checkUnits fails with the units' state when systemd's node does not run
// both: a unit file or an image that is off shows here, not as a timeout.
func (c *cluster) checkUnits(t *testing.T) {
	t.Helper()
	out, err := c.podman.run(30*time.Second, "exec", benchContainerName, "systemctl", "is-active", "kubelet.service", "kube-proxy.service")
	if err != nil || strings.TrimSpace(out) != "active\nactive" {
		status, _ := c.podman.run(30*time.Second, "exec", benchContainerName, "systemctl", "status", "--no-pager", "kubelet.service", "kube-proxy.service")
		t.Fatalf("systemd's node does not run the kubelet and kube-proxy units (%v):\n%s\n%s", err, out, status)
	}
}

// containerProcess is one process of a node container, as the host sees it.
type containerProcess struct {
	pid  int
	name string // the executable's base name
	pss  int64  // bytes
	// anon and file are its resident anonymous and file pages, bytes.
	anon, file int64
	cpu        time.Duration
	work       bool // the kubelet, kube-proxy, or started by them
}

// containerProcesses are the processes in the pid namespace of the
// container's PID 1 (host pid pid1), by pid. CPU is the sum of each
// thread's run time (schedstat, in ns: the clock ticks of stat are 10 ms).
func containerProcesses(t *testing.T, pid1 int) map[int]containerProcess {
	t.Helper()
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid1))
	must(t, err)
	entries, err := os.ReadDir("/proc")
	must(t, err)
	parent := map[int]int{}
	out := map[int]containerProcess{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err != nil || l != ns {
			continue
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil {
			continue // ended meanwhile, or a kernel thread
		}
		p := containerProcess{pid: pid, name: filepath.Base(strings.TrimSuffix(exe, " (deleted)"))}
		parent[pid] = statPPID(pid)
		p.pss = smapsPss(pid)
		p.anon, p.file = statusRss(pid)
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		for _, task := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, task.Name()))
			if err != nil {
				continue
			}
			if f := strings.Fields(string(b)); len(f) > 0 {
				ns, _ := strconv.ParseInt(f[0], 10, 64)
				p.cpu += time.Duration(ns)
			}
		}
		out[pid] = p
	}
	for pid, p := range out {
		for q := pid; q != 0; q = parent[q] {
			if n := out[q].name; n == "kubelet" || n == "kube-proxy" {
				p.work = true
				break
			}
			if _, ok := out[q]; !ok {
				break
			}
		}
		out[pid] = p
	}
	return out
}

// statPPID is a process's parent pid, 0 if it is gone.
func statPPID(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The name, in parentheses, may hold spaces: fields start after it.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// smapsPss is a process's proportional set size in bytes.
func smapsPss(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "Pss:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// statusRss is a process's RssAnon and RssFile in bytes.
func statusRss(pid int) (anon, file int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "RssAnon:":
			anon = kb * 1024
		case "RssFile:":
			file = kb * 1024
		}
	}
	return anon, file
}

// watchEnds polls the processes every millisecond, from the host, and
// returns a function that stops the polling and returns when each was
// seen gone or a zombie (the zero time: never).
func watchEnds(pids ...int) func() []time.Time {
	ends := make([]time.Time, len(pids))
	done := make(chan struct{})
	over := make(chan struct{})
	go func() {
		defer close(over)
		for {
			left := false
			for i, pid := range pids {
				if !ends[i].IsZero() {
					continue
				}
				b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
				s := string(b)
				if err != nil || strings.HasPrefix(strings.TrimSpace(s[strings.LastIndexByte(s, ')')+1:]), "Z") {
					ends[i] = time.Now()
					continue
				}
				left = true
			}
			if !left {
				return
			}
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	return func() []time.Time {
		close(done)
		<-over
		return ends
	}
}

// imageSizeOverBinaries is an image's size less its kubelet and
// kube-proxy, which both images have the same.
func (c *cluster) imageSizeOverBinaries(t *testing.T, image string) int64 {
	t.Helper()
	size := c.imageSize(t, image)
	for _, b := range []string{"kubelet", "kube-proxy"} {
		fi, err := os.Stat(filepath.Join(c.bin, b))
		must(t, err)
		size -= fi.Size()
	}
	return size
}

// imageSize is an image's size in bytes, as podman reports it.
func (c *cluster) imageSize(t *testing.T, image string) int64 {
	t.Helper()
	out, err := c.podman.run(30*time.Second, "image", "inspect", "--format", "{{.Size}}", image)
	must(t, err)
	size, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	must(t, err)
	return size
}

// writeContainers prints the comparison's table, the ratios and the
// verdicts against the goals.
func writeContainers(w io.Writer, runs map[string][]containerRun, sizes map[string]int64, base int64, rounds int, took time.Duration) {
	fmt.Fprintf(w, "\nNode containers in podman: nodeinit's node image (with and without --graceful-node-shutdown) and a systemd node image (kind's way), the same kubelet, kube-proxy, configuration and containerd; %d rounds of each, alternated; took %s.\n\n",
		rounds, took.Round(time.Second))
	durations := func(who string, of func(containerRun) time.Duration) []time.Duration {
		return sortedTimes(runs[who], of)
	}
	spread := func(d []time.Duration, unit func(time.Duration) string) string {
		return fmt.Sprintf("%s (%s–%s)", unit(quantile(d, 0.5)), unit(quantile(d, 0.25)), unit(quantile(d, 0.75)))
	}
	ready := func(r containerRun) time.Duration { return r.ready }
	stop := func(r containerRun) time.Duration { return r.stop }
	after := func(r containerRun) time.Duration { return r.proxyAfter }
	// Memory goes through the same quantiles as a Duration of bytes.
	pss := func(r containerRun) time.Duration { return time.Duration(r.pss) }
	cpu := func(r containerRun) time.Duration { return r.cpu }
	mb := func(d time.Duration) string { return fmt.Sprintf("%.1f MB", float64(d)/1e6) }
	cpuMs := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/1e6) }

	fmt.Fprintf(w, "| row | %s | %s | %s |\n", systemdNode, nodeinitNode, drainingNode)
	fmt.Fprintln(w, "|---|---:|---:|---:|")
	row := func(what string, cell func(who string) string) {
		fmt.Fprintf(w, "| %s |", what)
		for _, who := range containerNodes {
			fmt.Fprintf(w, " %s |", cell(who))
		}
		fmt.Fprintln(w)
	}
	row("podman start → Node Ready, median (p25–p75)", func(who string) string { return spread(durations(who, ready), ms) })
	row("podman stop (default timeout) → exit", func(who string) string { return spread(durations(who, stop), ms) })
	row("exit codes", func(who string) string {
		var codes []string
		for _, r := range runs[who] {
			codes = append(codes, strconv.Itoa(r.exitCode))
		}
		return strings.Join(codes, " ")
	})
	row("pods drained on stop (preStop, DisruptionTarget)", func(who string) string {
		n := 0
		for _, r := range runs[who] {
			if r.drained {
				n++
			}
		}
		return fmt.Sprintf("%d of %d", n, len(runs[who]))
	})
	row("kube-proxy ended after the kubelet", func(who string) string {
		n := 0
		for _, r := range runs[who] {
			if r.proxyAfter > 0 {
				n++
			}
		}
		return fmt.Sprintf("%d of %d, by %s", n, len(runs[who]), spread(durations(who, after), ms))
	})
	row("supervision memory (PSS)", func(who string) string { return spread(durations(who, pss), mb) })
	row(fmt.Sprintf("supervision CPU over %v idle", idleWindow), func(who string) string { return spread(durations(who, cpu), cpuMs) })
	row("image size over the kubelet and kube-proxy", func(who string) string {
		if who == drainingNode {
			who = nodeinitNode
		}
		return fmt.Sprintf("%.1f MB", float64(sizes[who])/1e6)
	})
	row("of which over the node image's Debian base", func(who string) string {
		if who == drainingNode {
			who = nodeinitNode
		}
		return fmt.Sprintf("%.1f MB", float64(sizes[who]-base)/1e6)
	})
	fmt.Fprintln(w)
	for _, who := range containerNodes {
		fmt.Fprintf(w, "Supervision of %s, last round: %s.\n", who, runs[who][len(runs[who])-1].supervisors)
	}

	writeGoals(w, runs)
}

// writeGoals prints the goals' verdicts, nodeinit / systemd from the
// medians of the same run.
func writeGoals(w io.Writer, runs map[string][]containerRun) {
	median := func(who string, of func(containerRun) time.Duration) time.Duration {
		return quantile(sortedTimes(runs[who], of), 0.5)
	}
	ratio := func(who string, of func(containerRun) time.Duration) float64 {
		return float64(median(who, of)) / float64(median(systemdNode, of))
	}
	drained := func(who string) int {
		n := 0
		for _, r := range runs[who] {
			if r.drained {
				n++
			}
		}
		return n
	}
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**not met**"
	}
	ready := func(r containerRun) time.Duration { return r.ready }
	stop := func(r containerRun) time.Duration { return r.stop }
	pss := func(r containerRun) time.Duration { return time.Duration(r.pss) }
	cpu := func(r containerRun) time.Duration { return r.cpu }
	fmt.Fprintln(w, "\n| goal, nodeinit / systemd (medians) | nodeinit | nodeinit --graceful-node-shutdown | met |")
	fmt.Fprintln(w, "|---|---:|---:|---|")
	a, b := ratio(nodeinitNode, ready), ratio(drainingNode, ready)
	fmt.Fprintf(w, "| Node Ready after the start ≤ %.2f × | %.2f × | %.2f × | %s |\n", readyGoal, a, b, verdict(a <= readyGoal && b <= readyGoal))
	n, d := len(runs[drainingNode]), drained(drainingNode)
	b = ratio(drainingNode, stop)
	fmt.Fprintf(w, "| stop ≤ %.2f × with the drain (systemd's node drained %d of %d) | %.2f × (no drain) | %.2f × (drained %d of %d) | %s |\n",
		stopGoal, drained(systemdNode), len(runs[systemdNode]), ratio(nodeinitNode, stop), b, d, n, verdict(b <= stopGoal && d == n))
	a, b = ratio(nodeinitNode, pss), ratio(drainingNode, pss)
	fmt.Fprintf(w, "| supervision memory (PSS) ≤ %.2f × | %.2f × | %.2f × | %s |\n", memoryGoal, a, b, verdict(a <= memoryGoal && b <= memoryGoal))
	if median(systemdNode, cpu) == 0 {
		fmt.Fprintln(w, "| supervision idle CPU (no goal) | – (systemd's is 0) | – | |")
	} else {
		fmt.Fprintf(w, "| supervision idle CPU (no goal) | %.2f × | %.2f × | |\n", ratio(nodeinitNode, cpu), ratio(drainingNode, cpu))
	}
}

// TestVMGoals: the goals' table reads the medians of the runs (here the
// three goals met, and "met" in the header), and the stop goal holds only
// for a node that drained every time.
func TestGoals(t *testing.T) {
	run := func(ready, stop time.Duration, pss int64, drained bool) containerRun {
		return containerRun{ready: ready, stop: stop, pss: pss, cpu: time.Millisecond, drained: drained}
	}
	runs := map[string][]containerRun{
		systemdNode:  {run(10*time.Second, 10*time.Second, 40e6, false)},
		nodeinitNode: {run(7*time.Second, 3*time.Second, 8e6, false)},
		drainingNode: {run(7*time.Second, 5*time.Second, 8e6, true)},
	}
	var b bytes.Buffer
	writeGoals(&b, runs)
	if got := strings.Count(b.String(), " | met |\n"); got != 4 || strings.Contains(b.String(), "not met") {
		t.Errorf("want the three goals met:\n%s", b.String())
	}
	runs[drainingNode][0].drained = false
	b.Reset()
	writeGoals(&b, runs)
	if !strings.Contains(b.String(), "(drained 0 of 1) | **not met**") {
		t.Errorf("a stop without the drain meets the stop goal:\n%s", b.String())
	}
}

// supervision sums the container's processes other than the kubelet,
// kube-proxy and their children into r: their PSS in after, and the CPU
// they used between before and after, with each one named.
func (r *containerRun) supervision(before, after map[int]containerProcess) {
	var names []string
	for _, p := range after {
		if p.work {
			continue
		}
		cpu := p.cpu
		if q, ok := before[p.pid]; ok {
			cpu -= q.cpu
		}
		r.pss += p.pss
		r.cpu += cpu
		names = append(names, fmt.Sprintf("%s %.1f MB (RssAnon %.1f, RssFile %.1f) %v CPU", p.name,
			float64(p.pss)/1e6, float64(p.anon)/1e6, float64(p.file)/1e6, cpu.Round(time.Microsecond)))
	}
	slices.Sort(names)
	r.supervisors = strings.Join(names, ", ")
}
