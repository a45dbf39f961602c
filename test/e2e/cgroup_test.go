package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nodeinit/nodeinit/cgroups"
	"github.com/nodeinit/nodeinit/test/testenv"
)

// hostLayout reads the host's cgroup hierarchies, as seen by the test.
func hostLayout(t *testing.T) cgroups.Layout {
	t.Helper()
	l, err := cgroups.ReadLayout("/")
	if err != nil {
		t.Fatal(err)
	}
	if l.Mode() == cgroups.NoCgroups {
		t.Fatal("the host has no cgroup filesystem mounted")
	}
	return l
}

// makeMesosCgroup creates /mesos/<id> the way a Mesos containerizer agent
// would, in every hierarchy of l, and returns the directories made, removed
// (with /mesos, if this test made it) when the test ends.
func makeMesosCgroup(t *testing.T, l cgroups.Layout, id string) []string {
	t.Helper()
	var made []string
	for _, h := range l.Hierarchies {
		root, ok := h.Dir("/", "/")
		if !ok {
			t.Fatalf("the %s hierarchy's mount does not show its root", h.Name())
		}
		parent := filepath.Join(root, "mesos")
		madeParent := false
		if _, err := os.Stat(parent); os.IsNotExist(err) {
			if err := os.Mkdir(parent, 0o755); err != nil {
				t.Fatalf("create %s: %v", parent, err)
			}
			madeParent = true
		}
		dir := filepath.Join(parent, id)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatalf("create %s: %v", dir, err)
		}
		made = append(made, dir)
		t.Cleanup(func() {
			if err := os.Remove(dir); err != nil {
				t.Errorf("remove cgroup %s: %v", dir, err)
			}
			if madeParent {
				_ = os.Remove(parent)
			}
		})
	}
	return made
}

// procsUnder returns the pids in dir's cgroup.procs and in those of its children (a v2 leaf).
func procsUnder(t *testing.T, dir string) []int {
	t.Helper()
	var pids []int
	files, _ := filepath.Glob(filepath.Join(dir, "*", "cgroup.procs"))
	for _, f := range append(files, filepath.Join(dir, "cgroup.procs")) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, field := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(field); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// A Mesos Docker-containerizer task as the agent runs it (the Marathon app
// in images/node): a container of its own in the engine's cgroup, named
// mesos-<id> and told so in MESOS_CONTAINER_NAME, with the agent's
// MESOS_DIRECTORY naming the same container id. The agent makes no
// /mesos/<id> for it: one made here is a decoy nodeinit must not join.
// nodeinit stays in the cgroup podman made, and hands exactly that cgroup
// to the executor as --cgroup-root.
func TestMesosDockerContainerizerTaskStaysInItsEngineCgroup(t *testing.T) {
	e := start(t)
	l := hostLayout(t)
	id := "e2e" + randomID()
	decoys := makeMesosCgroup(t, l, id)

	c := e.runDetached(t, []string{
		"--privileged",
		"--cgroupns=host",
		"-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
		"-e", "MESOS_CONTAINER_NAME=mesos-" + id,
		"-e", "MESOS_DIRECTORY=/var/lib/mesos/slaves/S0/frameworks/F/executors/E/runs/" + id,
		"-e", "MESOS_SANDBOX=/mnt/mesos/sandbox",
	}, taskNode([]string{"--require-cgroup"})...)
	c.waitFile(t, "executor.ready")
	c.waitFile(t, "proxy.ready")

	// The container's cgroup, as podman made it: where its first process,
	// nodeinit, is in the hierarchies the kubelet checks.
	pid := c.hostPID(t)
	own := map[string]string{}
	for _, h := range cgroups.KubeletHierarchies(l) {
		own[h.Name()] = hierarchyLine(readProc(t, pid, "cgroup"), h)
	}
	engine := own[cgroups.KubeletHierarchies(l)[0].Name()]
	if engine == "" || engine == "/" || strings.Contains(engine, "mesos") {
		t.Fatalf("nodeinit is in %q, not in a cgroup of the engine's", own)
	}
	t.Logf("the engine's cgroup of the container: %s", engine)
	members := pidNamespaceMembers(t, pid)
	if len(members) < 3 {
		t.Fatalf("the container has %d processes, want nodeinit, executor and proxy", len(members))
	}
	for p := range members {
		for _, h := range cgroups.KubeletHierarchies(l) {
			if got := hierarchyLine(readProc(t, p, "cgroup"), h); got != engine {
				t.Errorf("process %d (pid %d in the container) is in %q of the %s hierarchy, want the engine's %s",
					p, nsPID(t, p), got, h.Name(), engine)
			}
		}
		for _, dir := range decoys {
			if slices.Contains(procsUnder(t, dir), p) {
				t.Errorf("process %d joined %s, which the agent never makes for a Docker containerizer task", p, dir)
			}
		}
	}

	r := testenv.ReadReport(t, c.path("executor.json"))
	if want := "--cgroup-root=" + engine; !slices.Contains(r.Args, want) {
		t.Errorf("executor args %q lack %s", r.Args, want)
	}
	if want := "MESOS_EXECUTOR_CONTAINER_UUID=" + id; !slices.Contains(r.Env, want) {
		t.Errorf("executor environment lacks %s", want)
	}
}

// hierarchyLine is the cgroup of hierarchy h in a /proc/PID/cgroup text.
func hierarchyLine(procCgroup string, h cgroups.Hierarchy) string {
	for line := range strings.Lines(procCgroup) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if h.Unified && parts[1] == "" || !h.Unified && slices.Contains(strings.Split(parts[1], ","), h.Controllers[0]) {
			return parts[2]
		}
	}
	return ""
}

func TestPrivateCgroupNamespaceV2Evacuation(t *testing.T) {
	e := start(t)
	// A node container with its own v2 cgroup namespace: nodeinit is PID 1 at
	// the namespace root, where the kubelet could not create pod cgroups, so
	// it moves every process to /init and enables the controllers below the root.
	// It is a Docker containerizer task of an engine on v2, whose containers
	// get a private cgroup namespace: the container's own cgroup is the
	// namespace root, the kubelet's default root, so the executor gets no
	// --cgroup-root.
	v2, _ := hostLayout(t).Unified()
	v2mount := v2.Mountpoint
	if version := strings.TrimSpace(e.must(t, "info", "--format", "{{.Host.CgroupsVersion}}")); version != "v2" {
		// A hybrid host has the v2 hierarchy beside the v1 ones: show it to
		// podman as /sys/fs/cgroup. Only a host without cgroup2 at all cannot
		// offer v2, the one case where this test skips (and fails in CI).
		testenv.Require(t, v2mount != "", fmt.Sprintf("a cgroup2 hierarchy (podman offers cgroup %s, and no v2 cgroup namespace can be made without one)", version))
		e = e.onCgroup2()
		t.Logf("hybrid host: podman runs on the cgroup2 hierarchy at %s", v2mount)
	}
	// --pids-limit=0: podman's default limit needs the pids controller, which
	// a hybrid host keeps in its v1 hierarchy.
	id := "e2e" + randomID()
	c := e.runDetached(t, []string{"--privileged", "--cgroupns=private", "--pids-limit=0", "-e", "MESOS_CONTAINER_NAME=mesos-" + id},
		taskNode([]string{"--require-cgroup"})...)
	c.waitFile(t, "executor.ready")
	c.waitFile(t, "proxy.ready")
	r := testenv.ReadReport(t, c.path("executor.json"))
	if slices.ContainsFunc(r.Args, func(a string) bool { return strings.HasPrefix(a, "--cgroup-root") }) {
		t.Errorf("executor args %q have a --cgroup-root: the namespace root is the kubelet's default", r.Args)
	}
	if want := "MESOS_EXECUTOR_CONTAINER_UUID=" + id; !slices.Contains(r.Env, want) {
		t.Errorf("executor environment lacks %s", want)
	}
	if want := "the container's cgroup / is the root of the cgroup mounts"; !strings.Contains(c.logs(t), want) {
		t.Errorf("nodeinit's log does not say %q:\n%s", want, c.logs(t))
	}

	for _, task := range []string{"executor", "proxy"} {
		if got := v2Line(testenv.ReadReport(t, c.path(task+".json")).Cgroup); got != "/init" {
			t.Errorf("%s is in cgroup %q of the namespace, want /init (evacuated from the namespace root)", task, got)
		}
	}
	// The container's cgroup, seen from the host, is the parent of nodeinit's /init.
	inner := v2Line(readProc(t, c.hostPID(t), "cgroup"))
	if !strings.HasSuffix(inner, "/init") {
		t.Fatalf("nodeinit's v2 cgroup seen from the host is %q, want <container cgroup>/init", inner)
	}
	root := filepath.Join(v2mount, strings.TrimSuffix(inner, "/init"))
	available := strings.Fields(readFile(t, filepath.Join(root, "cgroup.controllers")))
	enabled := strings.Fields(readFile(t, filepath.Join(root, "cgroup.subtree_control")))
	slices.Sort(available)
	slices.Sort(enabled)
	if len(available) == 0 || !slices.Equal(available, enabled) {
		t.Errorf("the namespace root %s enables %q for its children, want every available controller %q", root, enabled, available)
	}
}

// v2Line is the path of the "0::" line of a /proc/PID/cgroup text, or "".
func v2Line(procCgroup string) string {
	for line := range strings.Lines(procCgroup) {
		if path, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
			return path
		}
	}
	return ""
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
