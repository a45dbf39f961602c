package e2e

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// cgroupMounts lists the host's cgroup hierarchies from /proc/self/mountinfo:
// the mount point of each v1 hierarchy, and of the v2 one (or "").
func cgroupMounts(t *testing.T) (v1 []string, v2 string) {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "36 25 0:31 / /sys/fs/cgroup/cpu rw,relatime shared:9 - cgroup cgroup rw,cpu"
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 0 || sep+1 >= len(fields) || len(fields) < 5 {
			continue
		}
		switch fields[sep+1] {
		case "cgroup":
			v1 = append(v1, fields[4])
		case "cgroup2":
			if v2 == "" {
				v2 = fields[4]
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return v1, v2
}

// makeMesosCgroup creates /mesos/<id> the way a Mesos agent would before
// starting a Docker-containerizer task: in every v1 hierarchy, or in the v2
// hierarchy on a host without v1. It returns the directories made, removed
// (with /mesos, if this test made it) when the test ends.
func makeMesosCgroup(t *testing.T, id string) []string {
	t.Helper()
	v1, v2 := cgroupMounts(t)
	roots := v1
	if len(v1) == 0 {
		if v2 == "" {
			t.Fatal("the host has no cgroup filesystem mounted")
		}
		roots = []string{v2}
	}
	var made []string
	for _, root := range roots {
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
			// Children first (a v2 leaf made by nodeinit), then the cgroup, then /mesos if it was ours.
			if subs, _ := filepath.Glob(filepath.Join(dir, "*", "cgroup.procs")); len(subs) > 0 {
				for _, s := range subs {
					_ = os.Remove(filepath.Dir(s))
				}
			}
			if err := os.Remove(dir); err != nil {
				t.Errorf("remove cgroup %s: %v", dir, err)
			}
			if madeParent {
				_ = os.Remove(parent)
			}
		})
		// A new v1 cpuset is empty and refuses tasks until it has cpus and mems.
		for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
			for _, d := range []string{parent, dir} {
				if _, err := os.Stat(filepath.Join(d, file)); err != nil {
					continue
				}
				if value, _ := os.ReadFile(filepath.Join(filepath.Dir(d), file)); len(value) > 0 {
					if cur, _ := os.ReadFile(filepath.Join(d, file)); strings.TrimSpace(string(cur)) == "" {
						if err := os.WriteFile(filepath.Join(d, file), value, 0o644); err != nil {
							t.Fatalf("set %s/%s: %v", d, file, err)
						}
					}
				}
			}
		}
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

func TestMesosDockerContainerizerTaskJoinsItsCgroup(t *testing.T) {
	e := start(t)
	id := "e2e" + randomID()
	cgroups := makeMesosCgroup(t, id)

	// What the Marathon app in images/node runs: the Docker containerizer
	// names the container mesos-<id>, the host's cgroup namespace and
	// hierarchy are shared, and nodeinit takes a private mount namespace.
	c := e.runDetached(t, []string{
		"--privileged",
		"--cgroupns=host",
		"-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
		"-e", "MESOS_CONTAINER_NAME=mesos-" + id,
	}, taskNode([]string{"--private-mountns"})...)
	c.waitFile(t, "executor.ready")
	c.waitFile(t, "proxy.ready")

	pid := c.hostPID(t)
	members := pidNamespaceMembers(t, pid)
	if len(members) < 3 {
		t.Fatalf("the container has %d processes, want nodeinit, executor and proxy", len(members))
	}
	for _, dir := range cgroups {
		in := procsUnder(t, dir)
		for p := range members {
			if !slices.Contains(in, p) {
				t.Errorf("process %d (pid %d in the container) is not in %s; /proc/%d/cgroup:\n%s",
					p, nsPID(t, p), dir, p, readProc(t, p, "cgroup"))
			}
		}
	}

	r := testenv.ReadReport(t, c.path("executor.json"))
	if want := "--cgroup-root=/mesos/" + id; !slices.Contains(r.Args, want) {
		t.Errorf("executor args %q lack %s", r.Args, want)
	}
	if want := "MESOS_EXECUTOR_CONTAINER_UUID=" + id; !slices.Contains(r.Env, want) {
		t.Errorf("executor environment lacks %s", want)
	}
	e.must(t, "stop", c.name) // the cgroups can only be removed once empty
}

func TestPrivateCgroupNamespaceV2Evacuation(t *testing.T) {
	e := start(t)
	// A node container with its own v2 cgroup namespace: nodeinit is PID 1 at
	// the namespace root, where the kubelet could not create pod cgroups, so
	// it moves every process to /init and enables the controllers below the root.
	_, v2mount := cgroupMounts(t)
	if version := strings.TrimSpace(e.must(t, "info", "--format", "{{.Host.CgroupsVersion}}")); version != "v2" {
		// A hybrid host has the v2 hierarchy beside the v1 ones: show it to
		// podman as /sys/fs/cgroup. Only a host without cgroup2 at all cannot
		// offer v2, the one case where this test skips.
		if v2mount == "" {
			t.Skipf("skipped: the host offers podman cgroup %s and has no cgroup2 hierarchy, so no v2 cgroup namespace can be made", version)
		}
		e = e.onCgroup2()
		t.Logf("hybrid host: podman runs on the cgroup2 hierarchy at %s", v2mount)
	}
	// --pids-limit=0: podman's default limit needs the pids controller, which
	// a hybrid host keeps in its v1 hierarchy.
	c := e.runDetached(t, []string{"--privileged", "--cgroupns=private", "--pids-limit=0"}, taskNode(nil)...)
	c.waitFile(t, "executor.ready")
	c.waitFile(t, "proxy.ready")

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
