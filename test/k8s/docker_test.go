//go:build k8s

package k8s

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/cgroups"
	"github.com/nodeinit/nodeinit/test/testenv"
)

// dockerEngine is a Docker engine of the test's own: its data root, exec
// root, socket and pid file in one directory, no bridge and no iptables
// rules of its own, the cgroupfs driver. It runs its own containerd below
// its exec root.
type dockerEngine struct {
	dir    string
	client string // the engine's own client, beside dockerd
	socket string
	env    []string
	daemon *exec.Cmd
	done   chan struct{}
}

// engineBinaries finds dockerd and the client of the same package: Debian
// installs dockerd in /usr/sbin and its client in /usr/bin. Another docker
// earlier in PATH (a stand-alone client of another release) is not the
// engine's, and a new machine may have none.
func engineBinaries(t *testing.T) (dockerd, client string) {
	t.Helper()
	testenv.RequireTool(t, "dockerd")
	dockerd, err := exec.LookPath("dockerd")
	must(t, err)
	if resolved, err := filepath.EvalSymlinks(dockerd); err == nil {
		dockerd = resolved
	}
	dir := filepath.Dir(dockerd)
	for _, c := range []string{filepath.Join(dir, "docker"), filepath.Join(filepath.Dir(dir), "bin", "docker")} {
		if fi, err := os.Stat(c); err == nil && fi.Mode()&0o111 != 0 {
			return dockerd, c
		}
	}
	t.Fatalf("no docker client beside %s (the docker.io package installs both)", dockerd)
	return "", ""
}

// dockerdFlags is the whole configuration of the test's engine, beside its
// directories: no docker0 bridge, no iptables or ip6tables rules, the
// cgroupfs driver (no systemd here), so that it leaves the host's network
// and the other tests alone. Its configuration file is its own, so that a
// machine's /etc/docker/daemon.json (a CI runner's cgroup-parent, say) does
// not change it, and names the one file the engine would otherwise write
// into /etc/docker: its trust key.
var dockerdFlags = []string{"--bridge=none", "--iptables=false", "--ip6tables=false", "--exec-opt", "native.cgroupdriver=cgroupfs"}

// dockerTrustKey is where dockerd 20.10 writes its trust key unless told.
const dockerTrustKey = "/etc/docker/key.json"

// startDockerd starts the test's engine and stops it when the test ends:
// every container removed, dockerd stopped by its pid (its containerd ends
// with it), what it leaves mounted under its directories unmounted (the
// host network namespace it binds into its exec root), the /docker cgroups
// it made removed, the directory removed; then it checks that no process
// of it is left and that it wrote nothing into /etc/docker.
func startDockerd(t *testing.T) *dockerEngine {
	t.Helper()
	dockerd, client := engineBinaries(t)
	dir, err := os.MkdirTemp("", "nodeinit-docker-")
	must(t, err)
	d := &dockerEngine{dir: dir, client: client, socket: filepath.Join(dir, "docker.sock"), done: make(chan struct{})}
	// The client keeps its own configuration here, not in ~/.docker.
	d.env = append(os.Environ(), "DOCKER_CONFIG="+filepath.Join(dir, "client"))
	_, keyErr := os.Stat(dockerTrustKey)
	hadKey := keyErr == nil
	cgroupsBefore := dockerCgroups()

	config := filepath.Join(dir, "daemon.json")
	must(t, os.WriteFile(config, fmt.Appendf(nil, `{"deprecated-key-path": %q}`+"\n", filepath.Join(dir, "key.json")), 0o600))
	log, err := os.Create(filepath.Join(dir, "dockerd.log"))
	must(t, err)
	defer log.Close()
	args := append([]string{"--config-file=" + config, "--data-root=" + d.dataRoot(), "--exec-root=" + filepath.Join(dir, "exec"),
		"--pidfile=" + filepath.Join(dir, "docker.pid"), "-H", "unix://" + d.socket}, dockerdFlags...)
	d.daemon = exec.Command(dockerd, args...)
	d.daemon.Stdout, d.daemon.Stderr = log, log
	d.daemon.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := time.Now()
	must(t, d.daemon.Start())
	go func() { _ = d.daemon.Wait(); close(d.done) }()

	t.Cleanup(func() {
		if out, err := d.run(time.Minute, "ps", "--all", "--quiet"); err == nil && strings.TrimSpace(out) != "" {
			if _, err := d.run(2*time.Minute, append([]string{"rm", "--force"}, strings.Fields(out)...)...); err != nil {
				t.Error(err)
			}
		}
		if err := d.stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "dockerd.log"))
			t.Logf("dockerd's log, last lines:\n%s", testenv.Tail(string(b), 30))
		}
		for _, pid := range processesUnder(dir) {
			t.Errorf("process %d (%s) of the engine outlived dockerd; killing it", pid, strings.Join(cmdline(pid), " "))
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		left, err := mountsUnder([]string{dir})
		if err != nil {
			t.Error(err)
		}
		slices.Reverse(left) // the deepest first
		for _, mp := range left {
			if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil {
				t.Errorf("unmount %s, which dockerd left: %v", mp, err)
			}
		}
		if len(left) > 0 {
			t.Logf("dockerd left mounted, now unmounted: %s", strings.Join(left, " "))
		}
		for _, cg := range dockerCgroups() {
			if !slices.Contains(cgroupsBefore, cg) {
				if err := removeCgroupTree(cg); err != nil {
					t.Error(err)
				}
			}
		}
		if err := removeAll(dir); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(dockerTrustKey); err == nil && !hadKey {
			t.Errorf("dockerd wrote %s", dockerTrustKey)
		}
	})

	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := d.run(10*time.Second, "version", "--format", "client {{.Client.Version}}, engine {{.Server.Version}}, API {{.Server.APIVersion}}")
		if err == nil {
			t.Logf("the test's Docker engine answers %v after its start: %s (%s)", time.Since(start).Round(10*time.Millisecond), strings.TrimSpace(out), client)
			break
		}
		select {
		case <-d.done:
			t.Fatalf("dockerd exited: %v\n%s", d.daemon.ProcessState, d.logTail())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("dockerd does not answer within 60s: %v\n%s", err, d.logTail())
		}
		time.Sleep(200 * time.Millisecond)
	}
	return d
}

// dataRoot is the engine's data root: its images, layers and containers.
func (d *dockerEngine) dataRoot() string { return filepath.Join(d.dir, "data") }

// stop ends the engine: TERM, and KILL after 30 s. Its containerd ends
// with it.
func (d *dockerEngine) stop() error {
	_ = d.daemon.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		return nil
	case <-time.After(30 * time.Second):
		_ = d.daemon.Process.Kill()
		<-d.done
		return fmt.Errorf("dockerd did not end within 30s of TERM; killed it")
	}
}

func (d *dockerEngine) logTail() string {
	b, _ := os.ReadFile(filepath.Join(d.dir, "dockerd.log"))
	return testenv.Tail(string(b), 30)
}

// command is the engine's client with args, as the Mesos agent runs it:
// docker -H unix://<socket> ARGS.
func (d *dockerEngine) command(args ...string) *exec.Cmd {
	cmd := exec.Command(d.client, append([]string{"-H", "unix://" + d.socket}, args...)...)
	cmd.Env = d.env
	return cmd
}

// run runs one client command, bounded, and returns its combined output.
func (d *dockerEngine) run(timeout time.Duration, args ...string) (string, error) {
	return runEnv(timeout, d.env, append([]string{d.client, "-H", "unix://" + d.socket}, args...)...)
}

// runEnv is run with env as the command's environment.
func runEnv(timeout time.Duration, env []string, argv ...string) (string, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.WaitDelay = time.Second
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		err = fmt.Errorf("timed out after %v", timeout)
	}
	if err != nil {
		return string(out), fmt.Errorf("%s: %w\n%s", strings.Join(argv, " "), err, testenv.Tail(string(out), 20))
	}
	return string(out), nil
}

// dockerCgroups are the /docker cgroups of every mounted hierarchy, where
// the engine's cgroupfs driver puts its containers.
func dockerCgroups() []string {
	var out []string
	l, err := cgroups.ReadLayout("/")
	if err != nil {
		return nil
	}
	for _, h := range l.Hierarchies {
		if dir, ok := h.Dir("/", "/docker"); ok && dirExists(dir) {
			out = append(out, dir)
		}
	}
	return out
}

// processesUnder are the processes whose command line names dir.
func processesUnder(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if strings.Contains(strings.Join(cmdline(pid), " "), dir) {
			out = append(out, pid)
		}
	}
	return out
}

// loadNodeImage builds the node image (in the fixture's podman) and loads
// it into the engine: podman save, docker load. Nothing is pulled.
func (d *dockerEngine) loadNodeImage(t *testing.T, c *cluster) {
	t.Helper()
	c.buildNodeImage(t)
	start := time.Now()
	archive := filepath.Join(d.dir, "node-image.tar")
	if _, err := c.podman.run(5*time.Minute, "save", "--format", "docker-archive", "--output", archive, nodeImage); err != nil {
		t.Fatal(err)
	}
	if _, err := d.run(5*time.Minute, "load", "--input", archive); err != nil {
		t.Fatal(err)
	}
	must(t, os.Remove(archive))
	t.Logf("the node image saved from podman and loaded into the engine in %v", time.Since(start).Round(100*time.Millisecond))
}

// marathonNode is the part of images/node/marathon.json a Mesos agent
// turns into its docker run.
type marathonNode struct {
	ID        string
	Cpus, Mem float64
	Args      []string
	Container struct {
		Docker struct {
			Privileged bool
			Parameters []struct{ Key, Value string }
		}
		Volumes []struct{ ContainerPath, HostPath, Mode string }
	}
	Networks                   []struct{ Mode string }
	TaskKillGracePeriodSeconds int
}

func readMarathonNode(t *testing.T) marathonNode {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "images", "node", "marathon.json"))
	must(t, err)
	var app marathonNode
	must(t, json.Unmarshal(b, &app))
	return app
}

// The Mesos agent's constants (src/slave/constants.hpp) for a task's
// resources: 1024 cpu.shares per CPU, a CFS period of 100ms.
const (
	mesosSharesPerCPU = 1024
	mesosCFSPeriod    = 100 * time.Millisecond
	mesosSandbox      = "/mnt/mesos/sandbox" // the agent's --sandbox_directory default
)

// mesosDockerTask is one task of the Docker containerizer as the agent and
// its docker executor start it (src/docker/docker.cpp, Docker::RunOptions
// ::create and Docker::run).
type mesosDockerTask struct {
	name    string // mesos-<container id>, or an older agent's forms
	app     marathonNode
	sandbox string            // the sandbox on the host, mapped to mesosSandbox
	env     map[string]string // the task's own environment (Marathon's)
	// cfs is the agent's --cgroups_enable_cfs: a CFS quota of the task's
	// CPUs besides the shares.
	cfs bool
	// volumes are the app's volumes as this test's host can give them.
	volumes []string
	// privileged is how the privileged flag is passed: --privileged, or
	// what stands for it on a host that cannot grant every capability.
	privileged []string
	more       []string // docker flags of the test's own, before the image
	args       []string // after the app's args
}

// runArgs is the agent's docker run line, in Docker::run's order:
// privileged, resources, environment, volumes and the sandbox, network,
// name, the app's parameters as --key=value, the image, the arguments.
func (m mesosDockerTask) runArgs(image string) []string {
	args := append([]string{"run"}, m.privileged...)
	cpus, mem := m.app.Cpus, m.app.Mem
	args = append(args, "--cpu-shares", strconv.Itoa(int(cpus*mesosSharesPerCPU)))
	if m.cfs {
		args = append(args, "--cpu-quota", strconv.FormatInt(int64(cpus*float64(mesosCFSPeriod/time.Microsecond)), 10))
	}
	args = append(args, "--memory", strconv.FormatInt(int64(mem)<<20, 10))
	env := map[string]string{"MESOS_SANDBOX": mesosSandbox, "MESOS_CONTAINER_NAME": m.name, "MESOS_ALLOCATION_ROLE": "*"}
	for k, v := range m.env {
		env[k] = v
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the agent's map is ordered
	for _, k := range keys {
		args = append(args, "-e", k+"="+env[k])
	}
	for _, v := range m.volumes {
		args = append(args, "-v", v)
	}
	args = append(args, "-v", m.sandbox+":"+mesosSandbox)
	network := "host"
	if len(m.app.Networks) > 0 && m.app.Networks[0].Mode != "host" {
		network = m.app.Networks[0].Mode
	}
	args = append(args, "--net", network, "--name", m.name)
	for _, p := range m.app.Container.Docker.Parameters {
		args = append(args, "--"+p.Key+"="+p.Value)
	}
	args = append(append(args, m.more...), image)
	return append(append(args, m.app.Args...), m.args...)
}

// appVolumes are the app's volumes as -v values, with /etc/kubernetes the
// test node's files, and a host directory the host lacks (missing says
// which) left out: the engine would create it on the host (these machines
// have no /lib/modules).
func appVolumes(t *testing.T, app marathonNode, kubernetesDir string, missing func(string) bool) []string {
	t.Helper()
	var out []string
	for _, v := range app.Container.Volumes {
		host := v.HostPath
		if host == "/etc/kubernetes" {
			host = kubernetesDir
		}
		if missing(host) {
			t.Logf("the app's volume %s: the host has no %s; left out", v.ContainerPath, host)
			continue
		}
		out = append(out, host+":"+v.ContainerPath+":"+strings.ToLower(v.Mode))
	}
	return out
}

// privilegedFlags is --privileged where the engine can grant it. Docker
// 20.10 grants a privileged container every capability it knows, and runc
// fails ("unable to apply caps: operation not permitted") where the
// engine's own bounding set lacks one, as on hosts without
// CAP_SYS_RESOURCE; there the flags stand for it that --privileged sets,
// less the capabilities the host does not have.
func (d *dockerEngine) privilegedFlags(t *testing.T, image string) []string {
	t.Helper()
	out, err := d.run(time.Minute, "run", "--rm", "--privileged", "--entrypoint", "/nodeinit", image, "--version")
	if err == nil {
		return []string{"--privileged"}
	}
	if !strings.Contains(out, "unable to apply caps") {
		t.Fatalf("a privileged container: %v", err)
	}
	missing := missingCapabilities(t)
	t.Logf("the engine cannot grant --privileged here (%s): the host's bounding set lacks %s; standing in with every other capability, all devices, no seccomp, AppArmor or masked paths",
		strings.TrimSpace(testenv.Tail(out, 1)), strings.Join(missing, " "))
	flags := []string{"--cap-add=ALL"}
	for _, c := range missing {
		flags = append(flags, "--cap-drop="+c)
	}
	return append(flags, "--security-opt=seccomp=unconfined", "--security-opt=apparmor=unconfined",
		"--security-opt=systempaths=unconfined", "--device-cgroup-rule=a *:* rwm")
}

// capabilityNames are the kernel's capabilities by number.
var capabilityNames = []string{"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
	"SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER",
	"SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE",
	"SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN",
	"SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ"}

// missingCapabilities are the capabilities Docker knows that this
// process's bounding set lacks.
func missingCapabilities(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	must(t, err)
	m := regexp.MustCompile(`(?m)^CapBnd:\s*([0-9a-f]+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no CapBnd in /proc/self/status")
	}
	bnd, err := strconv.ParseUint(string(m[1]), 16, 64)
	must(t, err)
	var out []string
	for i, name := range capabilityNames {
		if bnd&(1<<i) == 0 {
			out = append(out, name)
		}
	}
	return out
}

// runMesosTask starts the task's docker run as the agent does, attached,
// its output in the sandbox's stdout and stderr, and returns the node it
// runs: its pid and state from docker inspect, its log from docker logs;
// stop is the agent's docker stop -t <grace>. exited is the exit status of
// the agent's docker run, once it has ended.
func (d *dockerEngine) runMesosTask(t *testing.T, c *cluster, m mesosDockerTask, dir string) (k *kubeNode, exited func() (int, bool)) {
	t.Helper()
	stdout, err := os.Create(filepath.Join(m.sandbox, "stdout"))
	must(t, err)
	stderr, err := os.Create(filepath.Join(m.sandbox, "stderr"))
	must(t, err)
	run := d.command(m.runArgs(nodeImage)...)
	run.Stdout, run.Stderr = stdout, stderr
	t.Logf("the agent's docker run: %s", strings.Join(run.Args, " "))
	k = &kubeNode{t: t, c: c, dir: dir, started: time.Now()}
	must(t, run.Start())
	runDone := make(chan struct{})
	go func() { _ = run.Wait(); stdout.Close(); stderr.Close(); close(runDone) }()
	exited = func() (int, bool) {
		select {
		case <-runDone:
			return run.ProcessState.ExitCode(), true
		default:
			return 0, false
		}
	}
	inspect := func(format string) string {
		out, err := d.run(30*time.Second, "inspect", "--type=container", "--format", format, m.name)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	// docker run returns only when the container ends: wait for it to run.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if out, err := d.run(30*time.Second, "inspect", "--type=container", "--format", "{{.State.Running}}", m.name); err == nil && strings.TrimSpace(out) == "true" {
			break
		}
		if code, done := exited(); done || time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(m.sandbox, "stderr"))
			t.Fatalf("the task's container does not run (docker run ended: %v, status %d):\n%s", done, code, testenv.Tail(string(b), 20))
		}
		time.Sleep(100 * time.Millisecond)
	}
	k.pid = func() int {
		pid, err := strconv.Atoi(inspect("{{.State.Pid}}"))
		if err != nil || pid == 0 {
			t.Fatalf("the task's container has no pid (%v)", err)
		}
		return pid
	}
	k.running = func() bool { return inspect("{{.State.Running}}") == "true" }
	k.log = func() string {
		out, _ := d.run(30*time.Second, "logs", m.name)
		return out
	}
	k.stop = func(timeout time.Duration) int {
		grace := m.app.TaskKillGracePeriodSeconds
		if _, err := d.run(time.Duration(grace)*time.Second+timeout, "stop", "-t", strconv.Itoa(grace), m.name); err != nil {
			t.Fatal(err)
		}
		code, err := strconv.Atoi(inspect("{{.State.ExitCode}}"))
		must(t, err)
		return code
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the task's log, last lines:\n%s", testenv.Tail(k.log(), 40))
		}
		if _, err := d.run(2*time.Minute, "rm", "--force", m.name); err != nil {
			t.Error(err)
		}
		select {
		case <-runDone:
		case <-time.After(30 * time.Second):
			t.Error("the agent's docker run did not end with its container")
			_ = run.Process.Kill()
		}
		if err := os.RemoveAll(nodeIdentityDir); err != nil {
			t.Error(err)
		}
		k.teardown()
	})
	return k, exited
}

// checkKubeletCgroups checks that pid is in cgroup prefix (exactly, or
// below it with below) in every mounted hierarchy the kubelet uses. Those
// are the ones the engine and the kubelet manage: a hierarchy that is not
// mounted here (one a container mounted for itself, which outlives its
// mount while it has cgroups) shows in /proc/<pid>/cgroup too, with every
// process at its root.
func checkKubeletCgroups(t *testing.T, name string, pid int, prefix string, below bool) {
	t.Helper()
	l, err := cgroups.ReadLayout("/")
	must(t, err)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	must(t, err)
	for _, h := range cgroups.KubeletHierarchies(l) {
		var in string
		found := false
		for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
			f := strings.SplitN(line, ":", 3)
			if len(f) == 3 && (h.Unified && f[1] == "" || !h.Unified && slices.Contains(strings.Split(f[1], ","), h.Controllers[0])) {
				in, found = f[2], true
			}
		}
		ok := in == prefix || below && strings.HasPrefix(in, prefix) || !below && strings.HasPrefix(in, prefix+"/")
		if !found || !ok {
			t.Errorf("%s (pid %d) is in %q of the %s hierarchy; want %s", name, pid, in, h.Name(), prefix)
		}
	}
}

// cgroupFile is the file of cgroup cg in the v1 hierarchy of controller.
func cgroupFile(t *testing.T, controller, cg, file string) string {
	t.Helper()
	l, err := cgroups.ReadLayout("/")
	must(t, err)
	for _, h := range l.Hierarchies {
		if slices.Contains(h.Controllers, controller) {
			dir, ok := h.Dir("/", cg)
			if !ok {
				t.Fatalf("the %s hierarchy does not reach %s", h.Name(), cg)
			}
			return filepath.Join(dir, file)
		}
	}
	t.Fatalf("no v1 hierarchy has the %s controller", controller)
	return ""
}

func readInt(t *testing.T, file string) int64 {
	t.Helper()
	b, err := os.ReadFile(file)
	must(t, err)
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	must(t, err)
	return v
}

// nodeSize is what the kubelet reports and enforces at one moment.
type nodeSize struct {
	capMemory, capCPU, allocMemory, allocCPU string
	kubepodsMemory                           int64
}

func (s nodeSize) String() string {
	return fmt.Sprintf("capacity memory %s cpu %s, allocatable memory %s cpu %s, kubepods memory.limit_in_bytes %d",
		s.capMemory, s.capCPU, s.allocMemory, s.allocCPU, s.kubepodsMemory)
}

func (k *kubeNode) size(cg string) nodeSize {
	n := k.getNode()
	return nodeSize{n.Status.Capacity["memory"], n.Status.Capacity["cpu"], n.Status.Allocatable["memory"], n.Status.Allocatable["cpu"],
		readInt(k.t, cgroupFile(k.t, "memory", cg+"/kubepods", "memory.limit_in_bytes"))}
}

// The node image run as a Marathon app of images/node/marathon.json, the
// way the Mesos Docker containerizer runs a task (its docker executor's
// docker run, with --cgroups_enable_cfs), under a Docker engine of the
// test's own: nodeinit finds the container's own cgroup (/docker/<id>) and
// hands it to the kubelet as its cgroup root; the Node is Ready and sized
// to the task's memory and CPUs; the pods run below the container's
// cgroup. Then the task's limits change as the agent changes them, and the
// test measures what the kubelet reports. docker stop -t <the app's kill
// grace period> drains the node (--graceful-node-shutdown), stops the
// kubelet first and kube-proxy last, and the container and the agent's
// docker run exit 0.
func TestNodeImageInDockerAsAMesosTask(t *testing.T) {
	c := getCluster(t)
	d := startDockerd(t)
	d.loadNodeImage(t, c)
	app := readMarathonNode(t)

	dir := t.TempDir()
	c.writeImageNodeFiles(t, dir, "/etc/kubernetes", nodeSpec{kubeletConfig: kubeletShutdown})
	must(t, os.RemoveAll(nodeIdentityDir))

	const agentID, frameworkID = "4b3c2d1e-0000-4000-8000-000000000001-S0", "4b3c2d1e-0000-4000-8000-000000000002-0000"
	containerID := fmt.Sprintf("6f1e2d3c-%04x-4b5a-9c8d-7e6f5a4b3c2d", os.Getpid()&0xffff)
	taskID := "kubernetes_node." + containerID
	sandbox := filepath.Join(t.TempDir(), "slaves", agentID, "frameworks", frameworkID, "executors", taskID, "runs", containerID)
	must(t, os.MkdirAll(sandbox, 0o755))
	cd := c.containerd.dir
	task := mesosDockerTask{
		name: "mesos-" + containerID, app: app, sandbox: sandbox, cfs: true,
		// Marathon's part of the task's environment.
		env:     map[string]string{"MESOS_TASK_ID": taskID, "MARATHON_APP_ID": app.ID},
		volumes: appVolumes(t, app, dir, func(p string) bool { _, err := os.Stat(p); return errors.Is(err, fs.ErrNotExist) }),
		// The test's containerd, as in the podman tests: its socket, and
		// its root read-only (the eviction manager stats the image file
		// system).
		more: []string{"-v", cd + ":" + cd, "-v", cd + "/root:" + cd + "/root:ro"},
		args: append(append(proxyFlags("iptables"), "--graceful-node-shutdown", "--"),
			"/usr/local/bin/kubelet", "--config=/var/lib/kubelet/config.yaml", "--kubeconfig=/etc/kubernetes/kubelet.conf",
			"--node-ip="+c.nodeIP, "--hostname-override="+nodeName),
	}
	if !app.Container.Docker.Privileged {
		t.Fatal("images/node/marathon.json does not ask for a privileged container")
	}
	task.privileged = d.privilegedFlags(t, nodeImage)
	checkDockerNames(t, d, task, agentID, frameworkID)

	k, exited := d.runMesosTask(t, c, task, dir)
	id := strings.TrimSpace(must1(t, func() (string, error) {
		return d.run(30*time.Second, "inspect", "--type=container", "--format", "{{.Id}}", task.name)
	}))
	cg := "/docker/" + id
	n, took := k.waitReady(90 * time.Second)
	t.Logf("Node Ready %v after the agent's docker run", took.Round(10*time.Millisecond))

	// The container's own cgroup, found and handed to the kubelet.
	k.waitLog(0, 0, "MESOS_CONTAINER_NAME="+task.name, "a Docker containerizer task, whose cgroup is its engine's: staying in")
	kubelet := k.children()["kubelet"]
	if line := cmdline(kubelet); !slices.Contains(line, "--cgroup-root="+cg) {
		t.Errorf("the kubelet runs as %q, without --cgroup-root=%s", line, cg)
	}
	for name, pid := range map[string]int{"nodeinit": k.pid(), "kubelet": kubelet, "kube-proxy": k.children()["kube-proxy"]} {
		checkKubeletCgroups(t, name, pid, cg, false)
	}
	static := k.waitPods("metadata.name=static-sleeper-"+nodeName, 1, 60*time.Second)
	checkKubeletCgroups(t, "the static pod's container", containerPid(t, c, static[0]), cg+"/kubepods/", true)

	// The task's resources, as the agent wrote them, and the Node sized
	// to them.
	memory, milliCPU := int64(app.Mem)<<20, int64(app.Cpus*1000)
	if got := readInt(t, cgroupFile(t, "memory", cg, "memory.limit_in_bytes")); got != memory {
		t.Errorf("the container's memory.limit_in_bytes is %d, want the task's %d", got, memory)
	}
	if got := readInt(t, cgroupFile(t, "cpu", cg, "cpu.shares")); got != int64(app.Cpus*mesosSharesPerCPU) {
		t.Errorf("the container's cpu.shares is %d, want %d", got, int64(app.Cpus*mesosSharesPerCPU))
	}
	k.checkTaskSized(n, cg, "memory.limit_in_bytes", "cpu.cfs_quota_us", memory, milliCPU)
	before := k.size(cg)
	if before.kubepodsMemory > memory {
		t.Errorf("the kubepods cgroup's memory limit %d is above the task's %d", before.kubepodsMemory, memory)
	}
	t.Logf("the task's cgroup %s: memory.limit_in_bytes %d, cpu.shares %d, cpu.cfs_quota_us %d; the Node: %v", cg, memory,
		int64(app.Cpus*mesosSharesPerCPU), readInt(t, cgroupFile(t, "cpu", cg, "cpu.cfs_quota_us")), before)

	// A pod to drain at the stop; it starts while the limits change.
	k.create("/api/v1/namespaces/default/pods", "drain", fmt.Sprintf(drainPod, dir))
	k.checkLimitChanges(d, task.name, cg, before)
	k.waitPods("metadata.name=drain", 1, 60*time.Second)
	k.waitLog(30*time.Second, 0, `"Took a shutdown delay inhibitor"`, `who="kubelet"`)

	// The agent's kill: docker stop -t <grace>.
	k.stopAndCheckDrained()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if code, done := exited(); done {
			if code != 0 {
				t.Errorf("the agent's docker run exited %d, want 0", code)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent's docker run did not end within 30s of its container")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkTaskSized checks that nodeinit sized the Node n to a task's memory
// and CPU, which it read from memoryFile and cpuFile of the task's cgroup
// cg: the Node's allocatable is the task's memory less the eviction
// threshold, and its CPUs.
func (k *kubeNode) checkTaskSized(n node, cg, memoryFile, cpuFile string, memory, milliCPU int64) {
	t := k.t
	t.Helper()
	for _, r := range []struct{ resource, file string }{{"memory", memoryFile}, {"cpu", cpuFile}} {
		k.waitLog(0, 0, `"Sizing the node to its container's limit"`, fmt.Sprintf("resource=%q", r.resource),
			fmt.Sprintf(`limitFrom="%s of cgroup %s"`, r.file, cg))
	}
	allocMemory, allocCPU := quantity(t, n.Status.Allocatable["memory"]), quantity(t, n.Status.Allocatable["cpu"])
	if want := big.NewRat(memory-evictionHard, 1); allocMemory.Cmp(want) != 0 {
		t.Errorf("the Node's allocatable memory is %s, want the task's %d less the eviction threshold %d", n.Status.Allocatable["memory"], memory, int64(evictionHard))
	}
	if want := big.NewRat(milliCPU, 1000); allocCPU.Cmp(want) != 0 {
		t.Errorf("the Node's allocatable cpu is %s, want the task's %s", n.Status.Allocatable["cpu"], want.FloatString(3))
	}
}

// checkLimitChanges changes the task's limits after the start, twice, and
// measures what the kubelet reports after each, a node status period
// later: first as the Mesos agent does on a resource update of a task it
// runs in Docker (DockerContainerizerProcess::__update writes the cgroup
// files itself: cpu.shares, cpu.cfs_quota_us, memory.soft_limit_in_bytes,
// memory.limit_in_bytes), down to half the CPU and 1.5 GiB; then with
// docker update, up to 1.5 CPUs and 3 GiB. The kubelet reads its capacity
// once, at its start, and nodeinit sizes it once: neither adapts, which is
// what the test checks and logs.
func (k *kubeNode) checkLimitChanges(d *dockerEngine, name, cg string, before nodeSize) {
	t := k.t
	t.Helper()
	sizing := strings.Count(k.log(), `"Sizing the node to its container's limit"`)
	// The kubelet computes the Node's status every 10s
	// (nodeStatusUpdateFrequency) and sends it when it changed.
	const statusPeriod = 12 * time.Second
	check := func(how string, memory int64) {
		t.Helper()
		time.Sleep(statusPeriod)
		after := k.size(cg)
		t.Logf("after %s, %v later: %v (before: %v)", how, statusPeriod, after, before)
		if after != before {
			t.Errorf("after %s the kubelet reports %v, before %v: it adapts, and the docs say it does not", how, after, before)
		}
		if got := readInt(t, cgroupFile(t, "memory", cg, "memory.limit_in_bytes")); got != memory {
			t.Errorf("after %s the container's memory.limit_in_bytes is %d, want %d", how, got, memory)
		}
		if n := strings.Count(k.log(), `"Sizing the node to its container's limit"`); n != sizing {
			t.Errorf("after %s nodeinit logged %d sizing lines, %d before", how, n, sizing)
		}
	}

	const shrunk = 1536 << 20
	for _, w := range []struct{ controller, file, value string }{
		{"cpu", "cpu.shares", "512"},
		{"cpu", "cpu.cfs_period_us", "100000"},
		{"cpu", "cpu.cfs_quota_us", "50000"},
		{"memory", "memory.soft_limit_in_bytes", strconv.Itoa(shrunk)},
		{"memory", "memory.limit_in_bytes", strconv.Itoa(shrunk)},
	} {
		must(t, os.WriteFile(cgroupFile(t, w.controller, cg, w.file), []byte(w.value), 0o644))
	}
	check("the agent's update to cpus 0.5, mem 1536", shrunk)
	if out, err := d.run(time.Minute, "inspect", "--type=container", "--format", "{{.HostConfig.Memory}} {{.HostConfig.CpuShares}} {{.HostConfig.CpuQuota}}", name); err == nil {
		t.Logf("docker inspect after the agent's update: HostConfig Memory CpuShares CpuQuota = %s", strings.TrimSpace(out))
	}

	const grown = 3 << 30
	if _, err := d.run(time.Minute, "update", "--memory", strconv.Itoa(grown), "--memory-swap", "-1", "--cpu-shares", "1536", "--cpu-quota", "150000", name); err != nil {
		t.Fatal(err)
	}
	check("docker update to 1.5 CPUs, 3 GiB", grown)
}

// checkDockerNames runs nodeinit --write-flags in the task's container
// under each name the agent gives one: mesos-<container id> (Mesos up to
// 0.22 and from 1.4), mesos-<agent id>.<container id> (0.23 to 1.3), and
// that with .executor, the container of a custom executor run in Docker,
// which gets the executor's environment (MESOS_DIRECTORY with the sandbox
// on the host, the framework, executor and agent ids). Each time nodeinit
// hands the kubelet the container's own cgroup, /docker/<its id>, and
// sizes the Node to it. Once more without the CFS quota, as an agent
// without --cgroups_enable_cfs runs a task: nodeinit reserves no CPU.
func checkDockerNames(t *testing.T, d *dockerEngine, task mesosDockerTask, agentID, frameworkID string) {
	t.Helper()
	containerID := strings.TrimPrefix(task.name, "mesos-")
	names := []string{task.name, "mesos-" + agentID + "." + containerID, "mesos-" + agentID + "." + containerID + ".executor", task.name}
	for i, name := range names {
		m := task
		m.name = name
		// The last run is the agent's default, --cgroups_enable_cfs=false:
		// cpu.shares alone, which limit nothing.
		m.cfs = task.cfs && i < len(names)-1
		m.env = map[string]string{}
		for k, v := range task.env {
			m.env[k] = v
		}
		if i > 0 {
			m.env["MESOS_DIRECTORY"] = task.sandbox
			m.env["MESOS_FRAMEWORK_ID"], m.env["MESOS_SLAVE_ID"], m.env["MESOS_EXECUTOR_ID"] = frameworkID, agentID, m.env["MESOS_TASK_ID"]
		}
		cidfile := filepath.Join(t.TempDir(), "cid")
		m.more = append(slices.Clone(task.more), "--rm", "--cidfile="+cidfile)
		// --write-flags first: after the "--" the kubelet's line begins.
		m.args = []string{"--write-flags"}
		out, err := d.run(time.Minute, m.runArgs(nodeImage)...)
		if err != nil {
			t.Fatalf("--write-flags in a container named %s: %v", name, err)
		}
		id, err := os.ReadFile(cidfile)
		must(t, err)
		// The engine removes a --rm container after the client returns;
		// the task's own run takes the first name again.
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if _, err := d.run(10*time.Second, "inspect", "--type=container", name); err != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the container %s is still there 30s after docker run --rm", name)
			}
		}
		want := "--cgroup-root=/docker/" + strings.TrimSpace(string(id))
		reserved := regexp.MustCompile(`--system-reserved=(\S+)`).FindStringSubmatch(out)
		switch {
		case !strings.Contains(out, want):
			t.Errorf("in a container named %s, nodeinit --write-flags does not give the kubelet %s:\n%s", name, want, out)
		case reserved == nil:
			t.Errorf("in a container named %s, nodeinit --write-flags gives the kubelet no --system-reserved:\n%s", name, out)
		case strings.Contains(reserved[1], "cpu=") != m.cfs:
			t.Errorf("in a container named %s with a CFS quota %v, the kubelet would get --system-reserved=%s", name, m.cfs, reserved[1])
		default:
			t.Logf("named %s, CFS quota %v: the kubelet would get %s --system-reserved=%s", name, m.cfs, want, reserved[1])
		}
	}
}

// must1 returns f's value, failing the test on its error.
func must1[T any](t *testing.T, f func() (T, error)) T {
	t.Helper()
	v, err := f()
	must(t, err)
	return v
}
