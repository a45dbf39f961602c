package cgroups

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	occgroups "github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// Helper processes: the test binary started again with helperEnv set runs
// one of these instead of the tests.
const helperEnv = "NODEINIT_CGROUPS_TEST_HELPER"

// Options of the setup helper, passed through its environment.
const (
	envParent   = "NODEINIT_TEST_CGROUP_PARENT"
	envRequire  = "NODEINIT_TEST_REQUIRE_CGROUP"
	envEvacuate = "NODEINIT_TEST_EVACUATE"
	envReadOnly = "NODEINIT_TEST_CGROUP2_READONLY"
	envChildren = "NODEINIT_TEST_CHILDREN"
	// envHostCgroupNS guards the evacuation helper against running in the
	// test's own cgroup namespace, where it would empty the host's root.
	envHostCgroupNS = "NODEINIT_TEST_HOST_CGROUPNS"
)

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "setup":
		os.Exit(setupHelper())
	case "v2-namespace-root":
		os.Exit(namespaceRootHelper())
	default:
		fmt.Fprintf(os.Stderr, "unknown helper %q\n", os.Getenv(helperEnv))
		os.Exit(3)
	}
}

// report is what a helper prints as its last line of stdout.
type report struct {
	Pid                    int
	Result                 Result
	Err                    string
	Cgroup                 string            // the text of /proc/self/cgroup after Setup
	Children               map[string]string // pid -> text of /proc/<pid>/cgroup
	RootProcs, RootControl string            // of the cgroup namespace root (evacuation)
}

func helperOptions() Options {
	opts := Options{Parent: os.Getenv(envParent), Require: os.Getenv(envRequire) == "true"}
	if v, ok := os.LookupEnv(envEvacuate); ok {
		b := v == "true"
		opts.Evacuate = &b
	}
	return opts
}

// setupHelper calls Setup with the options of its environment and reports.
func setupHelper() int {
	res, err := Setup(helperOptions())
	r := report{Pid: os.Getpid(), Result: res}
	if err != nil {
		r.Err = err.Error()
	}
	b, _ := os.ReadFile("/proc/self/cgroup")
	r.Cgroup = string(b)
	return printReport(r)
}

func printReport(r report) int {
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if r.Err != "" {
		return 1
	}
	return 0
}

// namespaceRootHelper runs as PID 1 of new pid, mount and cgroup namespaces
// (started by unshare). It replaces the host's cgroup mounts by a fresh
// cgroup2 mount, which shows the namespace root, as a container runtime
// does for --cgroupns=private; starts children that sit in the root beside
// it; waits for the test's "go" on stdin (the test first moves unshare's
// own process, which stays in the root, out of it); then calls Setup.
func namespaceRootHelper() int {
	fail := func(err error) int { return printReport(report{Pid: os.Getpid(), Err: "helper: " + err.Error()}) }
	if own, _ := os.ReadFile("/proc/self/cgroup"); !strings.Contains(string(own), "\n0::/\n") && !strings.HasPrefix(string(own), "0::/\n") {
		return fail(fmt.Errorf("not at the root of its cgroup namespace: %q", own))
	}
	if ns, _ := os.Readlink("/proc/self/ns/cgroup"); ns == os.Getenv(envHostCgroupNS) {
		return fail(fmt.Errorf("still in the host's cgroup namespace %s", ns))
	}
	if err := unix.Unmount("/sys/fs/cgroup", unix.MNT_DETACH); err != nil {
		return fail(fmt.Errorf("unmount the host's cgroup mounts: %w", err))
	}
	var flags uintptr
	if os.Getenv(envReadOnly) == "true" {
		flags = unix.MS_RDONLY
	}
	if err := unix.Mount("cgroup2", "/sys/fs/cgroup", "cgroup2", flags, ""); err != nil {
		return fail(fmt.Errorf("mount cgroup2: %w", err))
	}
	n, _ := strconv.Atoi(os.Getenv(envChildren))
	var children []*exec.Cmd
	for range n {
		c := exec.Command("sleep", "60")
		if err := c.Start(); err != nil {
			return fail(err)
		}
		children = append(children, c)
	}
	defer func() {
		for _, c := range children {
			c.Process.Kill()
			c.Wait()
		}
	}()
	fmt.Println("ready")
	if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil || line != "go\n" {
		return fail(fmt.Errorf("no go from the test: %q %v", line, err))
	}

	res, err := Setup(helperOptions())
	r := report{Pid: os.Getpid(), Result: res, Children: map[string]string{}}
	if err != nil {
		r.Err = err.Error()
	}
	b, _ := os.ReadFile("/proc/self/cgroup")
	r.Cgroup = string(b)
	for _, c := range children {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", c.Process.Pid))
		r.Children[strconv.Itoa(c.Process.Pid)] = string(b)
	}
	b, _ = os.ReadFile("/sys/fs/cgroup/cgroup.procs")
	r.RootProcs = string(b)
	b, _ = os.ReadFile("/sys/fs/cgroup/cgroup.subtree_control")
	r.RootControl = strings.TrimSpace(string(b))
	return printReport(r)
}

// runHelper runs the test binary as helper mode with env, behind the
// command prefix wrap, and returns its report and its log (stderr).
func runHelper(t *testing.T, mode string, env []string) (report, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), helperEnv+"="+mode), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("helper %s: %v", mode, err)
	}
	return parseReport(t, out, stderr.String()), stderr.String()
}

func parseReport(t *testing.T, out []byte, log string) report {
	t.Helper()
	var r report
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("helper report %q: %v\nlog:\n%s", out, err, log)
	}
	if strings.HasPrefix(r.Err, "helper: ") {
		t.Fatalf("%s\nlog:\n%s", r.Err, log)
	}
	return r
}

// cgroupLines maps each hierarchy's controller list ("" for unified) to the
// cgroup in a /proc/<pid>/cgroup text.
func cgroupLines(text string) map[string]string {
	out := map[string]string{}
	for l := range strings.SplitSeq(strings.TrimSpace(text), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) == 3 {
			out[parts[1]] = parts[2]
		}
	}
	return out
}

func randomID(t *testing.T) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "test-" + hex.EncodeToString(b)
}

func liveLayout(t *testing.T) Layout {
	t.Helper()
	l, err := ReadLayout("/")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Require(t, l.Mode() != NoCgroups, "a mounted cgroup filesystem")
	return l
}

// makeCgroup creates cgroup (and its missing parents) in hierarchy h, and
// removes what it created when the test ends, after the test's processes
// have left. cpuset cgroups get their parent's cpus and mems, without which
// no process may join them.
func makeCgroup(t *testing.T, h Hierarchy, cgroup string) string {
	t.Helper()
	dir, ok := h.Dir("/", cgroup)
	if !ok {
		t.Fatalf("hierarchy %s does not reach %s", h.Name(), cgroup)
	}
	var created []string
	elems := strings.Split(strings.Trim(cgroup, "/"), "/")
	for i := range elems {
		d, _ := h.Dir("/", "/"+strings.Join(elems[:i+1], "/"))
		err := os.Mkdir(d, 0o755)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			t.Fatalf("create cgroup %s in %s: %v", cgroup, h.Name(), err)
		}
		created = append(created, d)
		if cpuset := slices.Contains(h.Controllers, "cpuset"); cpuset {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(filepath.Dir(d), f))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
					t.Fatalf("copy %s into %s: %v", f, d, err)
				}
			}
		}
	}
	t.Cleanup(func() {
		for i := len(created) - 1; i >= 0; i-- {
			removeCgroup(t, created[i], created[i] != dir)
		}
	})
	return dir
}

// removeCgroup removes a cgroup directory made by the test, with the leaf
// children its processes made (the v2 leaf, /init). A parent such as /mesos
// that others may share is only removed when empty.
func removeCgroup(t *testing.T, dir string, parent bool) {
	t.Helper()
	if parent {
		err := unix.Rmdir(dir)
		if err != nil && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.ENOTEMPTY) {
			t.Errorf("remove cgroup %s: %v", dir, err)
		}
		return
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			if err := unix.Rmdir(filepath.Join(dir, e.Name())); err != nil {
				t.Errorf("remove cgroup %s/%s: %v", dir, e.Name(), err)
			}
		}
	}
	if err := unix.Rmdir(dir); err != nil {
		t.Errorf("remove cgroup %s: %v", dir, err)
	}
}

// controllerLine is the key of a hierarchy's line in /proc/<pid>/cgroup.
func controllerLine(own map[string]string, h Hierarchy) (string, bool) {
	if h.Unified {
		v, ok := own[""]
		return v, ok
	}
	for k, v := range own {
		if slices.Contains(strings.Split(k, ","), h.Controllers[0]) {
			return v, true
		}
	}
	return "", false
}

func TestSetupJoinsTheMesosCgroupInEveryHierarchy(t *testing.T) {
	testenv.RequireRoot(t)
	l := liveLayout(t)
	id := randomID(t)
	cgroup := "/mesos/" + id
	for _, h := range l.Hierarchies {
		makeCgroup(t, h, cgroup)
	}
	for name, env := range map[string]string{
		"MESOS_DIRECTORY":      EnvMesosDirectory + "=/x/runs/" + id,
		"MESOS_CONTAINER_NAME": EnvMesosContainerName + "=mesos-" + id,
	} {
		t.Run(name, func(t *testing.T) {
			r, log := runHelper(t, "setup", []string{env})
			if r.Err != "" {
				t.Fatalf("Setup: %s\nlog:\n%s", r.Err, log)
			}
			if r.Result.Cgroup != cgroup || r.Result.ContainerID != id {
				t.Errorf("result cgroup %q id %q, want %q %q", r.Result.Cgroup, r.Result.ContainerID, cgroup, id)
			}
			own := cgroupLines(r.Cgroup)
			for _, h := range l.Hierarchies {
				got, ok := controllerLine(own, h)
				if !ok || got != cgroup {
					t.Errorf("hierarchy %s: helper in %q, want %s\n%s", h.Name(), got, cgroup, r.Cgroup)
				}
				if r.Result.Joined[h.Name()] != cgroup {
					t.Errorf("result says %s joined %q", h.Name(), r.Result.Joined[h.Name()])
				}
			}
			if !strings.Contains(log, "joined cgroup "+cgroup) {
				t.Errorf("log does not tell the join:\n%s", log)
			}
		})
	}
}

func TestSetupWarnsNamingAHierarchyWithoutTheCgroup(t *testing.T) {
	testenv.RequireRoot(t)
	l := liveLayout(t)
	testenv.Require(t, len(l.Hierarchies) >= 2, "two cgroup hierarchies")
	id := randomID(t)
	cgroup := "/mesos/" + id
	skipped := l.Hierarchies[len(l.Hierarchies)/2]
	for _, h := range l.Hierarchies {
		if h.Name() != skipped.Name() {
			makeCgroup(t, h, cgroup)
		}
	}
	r, log := runHelper(t, "setup", []string{EnvMesosDirectory + "=/x/runs/" + id})
	if r.Err != "" {
		t.Fatalf("Setup: %s\nlog:\n%s", r.Err, log)
	}
	want := fmt.Sprintf("cgroup %s does not exist in the %s hierarchy", cgroup, skipped.Name())
	if !strings.Contains(log, want) {
		t.Errorf("log does not say %q:\n%s", want, log)
	}
	own := cgroupLines(r.Cgroup)
	for _, h := range l.Hierarchies {
		got, _ := controllerLine(own, h)
		if h.Name() == skipped.Name() {
			if got != h.Current {
				t.Errorf("hierarchy %s without the cgroup: helper moved to %q from %q", h.Name(), got, h.Current)
			}
		} else if got != cgroup {
			t.Errorf("hierarchy %s: helper in %q, want %s", h.Name(), got, cgroup)
		}
	}
}

func TestSetupWithAMissingCgroup(t *testing.T) {
	testenv.RequireRoot(t)
	l := liveLayout(t)
	id := randomID(t)
	env := []string{EnvMesosDirectory + "=/x/runs/" + id}

	t.Run("warns and stays", func(t *testing.T) {
		r, log := runHelper(t, "setup", env)
		if r.Err != "" {
			t.Fatalf("Setup failed without --require-cgroup: %s", r.Err)
		}
		if !strings.Contains(log, "exists in none of the mounted hierarchies") || !strings.Contains(log, "carrying on in the current cgroups") {
			t.Errorf("no warning about the missing cgroup:\n%s", log)
		}
		own := cgroupLines(r.Cgroup)
		for _, h := range l.Hierarchies {
			if got, _ := controllerLine(own, h); got != h.Current {
				t.Errorf("hierarchy %s: helper moved to %q from %q", h.Name(), got, h.Current)
			}
		}
		if r.Result.Cgroup != "/mesos/"+id || len(r.Result.Joined) != 0 {
			t.Errorf("result %+v, want the discovered cgroup and nothing joined", r.Result)
		}
	})
	t.Run("fails with Require", func(t *testing.T) {
		r, _ := runHelper(t, "setup", append(env, envRequire+"=true"))
		want := "cgroup: cgroup /mesos/" + id + " exists in none of the mounted hierarchies"
		if !strings.HasPrefix(r.Err, want) {
			t.Errorf("error %q, want %q...", r.Err, want)
		}
	})
	t.Run("no cgroup named: stays without a warning", func(t *testing.T) {
		r, log := runHelper(t, "setup", []string{EnvMesosDirectory + "=", EnvMesosContainerName + "="})
		if r.Err != "" || r.Result.Cgroup != "" || !strings.Contains(log, "no cgroup to join") || strings.Contains(log, "\nW") || strings.HasPrefix(log, "W") {
			t.Errorf("result %+v err %q log:\n%s", r.Result, r.Err, log)
		}
	})
}

// enableController makes ctrl available to the children of the cgroup at
// dir, undoing it at the end when it was off (other users of the same
// hierarchy keep it while they use it: the kernel refuses to disable it).
func enableController(t *testing.T, dir, ctrl string) {
	t.Helper()
	before, err := occgroups.ReadFile(dir, "cgroup.subtree_control")
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(strings.Fields(before), ctrl) {
		return
	}
	if err := occgroups.WriteFile(dir, "cgroup.subtree_control", "+"+ctrl); err != nil {
		t.Fatalf("enable %s below %s: %v", ctrl, dir, err)
	}
	t.Cleanup(func() { _ = occgroups.WriteFile(dir, "cgroup.subtree_control", "-"+ctrl) })
}

// availableController returns a controller the unified hierarchy's root can
// hand to its children: on a hybrid host only those no v1 hierarchy holds.
func availableController(t *testing.T, h Hierarchy) (string, string) {
	t.Helper()
	root, ok := h.Dir("/", "/")
	if !ok {
		t.Fatalf("the unified mount %s does not show the root cgroup", h.Mountpoint)
	}
	ctrls, err := occgroups.ReadFile(root, "cgroup.controllers")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(ctrls)
	testenv.Require(t, len(f) > 0, "a controller available in the unified hierarchy (all are bound to v1 hierarchies)")
	return root, f[0]
}

func TestSetupUsesTheLeafBelowAV2CgroupThatEnablesControllers(t *testing.T) {
	testenv.RequireRoot(t)
	l := liveLayout(t)
	h, ok := l.Unified()
	testenv.Require(t, ok, "the cgroup v2 unified hierarchy mounted")
	root, ctrl := availableController(t, h)
	id := randomID(t)
	cgroup := "/mesos/" + id
	dir := makeCgroup(t, h, cgroup)
	enableController(t, root, ctrl)
	enableController(t, filepath.Dir(dir), ctrl)
	enableController(t, dir, ctrl)

	r, log := runHelper(t, "setup", []string{EnvMesosDirectory + "=/x/runs/" + id})
	if r.Err != "" {
		t.Fatalf("Setup: %s\nlog:\n%s", r.Err, log)
	}
	leaf := path.Join(cgroup, DefaultLeaf)
	if got := cgroupLines(r.Cgroup)[""]; got != leaf {
		t.Errorf("helper in unified %q, want the leaf %s\n%s", got, leaf, log)
	}
	if r.Result.Cgroup != cgroup || r.Result.Joined["unified"] != leaf {
		t.Errorf("result %+v, want cgroup %s (not the leaf) and unified joined at %s", r.Result, cgroup, leaf)
	}
}

// startInV2Namespace starts the namespace-root helper as PID 1 of new pid,
// mount and cgroup namespaces whose cgroup root is a new cgroup of the
// unified hierarchy, and returns its report and log.
func startInV2Namespace(t *testing.T, prepare func(h Hierarchy, nsRoot string), env ...string) (report, string, string) {
	t.Helper()
	unshare := testenv.RequireTool(t, "unshare")
	l := liveLayout(t)
	h, ok := l.Unified()
	testenv.Require(t, ok, "the cgroup v2 unified hierarchy mounted")
	root, ctrl := availableController(t, h)
	enableController(t, root, ctrl)
	nsRootCgroup := "/" + randomID(t)
	nsRoot := makeCgroup(t, h, nsRootCgroup)
	if prepare != nil {
		prepare(h, nsRootCgroup)
	}
	back, ok := h.Dir("/", h.Current)
	if !ok {
		t.Fatal("the unified mount does not show this test's own cgroup")
	}

	// The shell puts itself into the new cgroup and becomes unshare, so the
	// cgroup namespace is rooted there.
	script := `echo $$ > "$1/cgroup.procs" && shift && exec "$@"`
	cmd := exec.Command("sh", "-c", script, "sh", nsRoot, unshare, "--pid", "--fork", "--mount-proc",
		"--mount", "--propagation=private", "--cgroup", "--", os.Args[0], "-test.run=^$")
	hostNS, err := os.Readlink("/proc/self/ns/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(append(os.Environ(), helperEnv+"=v2-namespace-root", envHostCgroupNS+"="+hostNS), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()

	// unshare itself stays outside the pid namespace but inside the
	// cgroup: once the helper runs (so the cgroup namespace exists), move
	// unshare back before the helper empties the root.
	lines := bufio.NewReader(stdout)
	if ready, err := lines.ReadString('\n'); ready != "ready\n" {
		t.Fatalf("the helper did not start: %q %v\n%s", ready, err, stderr.String())
	}
	if err := occgroups.WriteCgroupProc(back, cmd.Process.Pid); err != nil {
		t.Fatalf("move unshare out of the namespace root: %v", err)
	}
	fmt.Fprintln(stdin, "go")
	out, err := io.ReadAll(lines)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	return parseReport(t, out, stderr.String()), stderr.String(), ctrl
}

func TestEvacuationOfAV2NamespaceRoot(t *testing.T) {
	testenv.RequireRoot(t)
	r, log, ctrl := startInV2Namespace(t, nil, envChildren+"=2")
	if r.Err != "" {
		t.Fatalf("Setup: %s\nlog:\n%s", r.Err, log)
	}
	if r.Pid != 1 || !r.Result.Evacuated {
		t.Fatalf("pid %d evacuated %v, want PID 1 evacuating by default\nlog:\n%s", r.Pid, r.Result.Evacuated, log)
	}
	if got := cgroupLines(r.Cgroup)[""]; got != EvacuationCgroup {
		t.Errorf("PID 1 in %q, want %s", got, EvacuationCgroup)
	}
	if !strings.Contains(log, "moved 3 processes of the root cgroup into /init") || !strings.Contains(log, "staying in unified:/init") {
		t.Errorf("the log does not tell the evacuation:\n%s", log)
	}
	if len(r.Children) != 2 {
		t.Fatalf("%d children reported, want 2", len(r.Children))
	}
	for pid, text := range r.Children {
		if got := cgroupLines(text)[""]; got != EvacuationCgroup {
			t.Errorf("child %s in %q, want %s", pid, got, EvacuationCgroup)
		}
	}
	if strings.TrimSpace(r.RootProcs) != "" {
		t.Errorf("the namespace root still holds %q", r.RootProcs)
	}
	if !slices.Contains(strings.Fields(r.RootControl), ctrl) {
		t.Errorf("root cgroup.subtree_control %q, want %s enabled", r.RootControl, ctrl)
	}
}

func TestEvacuationOfAReadOnlyCgroupfsWarns(t *testing.T) {
	testenv.RequireRoot(t)
	r, log, _ := startInV2Namespace(t, nil, envChildren+"=1", envReadOnly+"=true")
	if r.Err != "" {
		t.Fatalf("Setup failed on a read-only cgroupfs: %s", r.Err)
	}
	if r.Result.Evacuated {
		t.Error("evacuated a read-only cgroupfs")
	}
	if !strings.Contains(log, "read-only") || !strings.Contains(log, "cgroup v2 root evacuation") {
		t.Errorf("no clear warning:\n%s", log)
	}
	if got := cgroupLines(r.Cgroup)[""]; got != "/" {
		t.Errorf("PID 1 in %q, want it still at the root", got)
	}
}

func TestSetupReportsAHierarchyItCouldNotJoin(t *testing.T) {
	testenv.RequireRoot(t)
	l := liveLayout(t)
	var cpuset Hierarchy
	for _, h := range l.Hierarchies {
		if slices.Contains(h.Controllers, "cpuset") {
			cpuset = h
		}
	}
	testenv.Require(t, cpuset.Mountpoint != "", "a v1 cpuset hierarchy (only there can joining fail for want of cpus and mems)")
	id := randomID(t)
	cgroup := "/mesos/" + id
	for _, h := range l.Hierarchies {
		if h.Name() != cpuset.Name() {
			makeCgroup(t, h, cgroup)
		}
	}
	// A cpuset cgroup without cpus: the kernel refuses every process.
	dir := makeCgroup(t, cpuset, cgroup)
	if err := os.WriteFile(filepath.Join(dir, "cpuset.cpus"), []byte("\n"), 0o644); err != nil {
		t.Fatalf("empty the cpus of %s: %v", dir, err)
	}
	env := []string{EnvMesosDirectory + "=/x/runs/" + id}

	r, log := runHelper(t, "setup", env)
	want := "join cgroup " + cgroup + " in the cpuset hierarchy: write " + dir + "/cgroup.procs: no space left on device (its cpuset.cpus or cpuset.mems is empty)"
	if r.Err != "" || !strings.Contains(log, want) {
		t.Errorf("error %q; log does not say %q:\n%s", r.Err, want, log)
	}
	own := cgroupLines(r.Cgroup)
	for _, h := range l.Hierarchies {
		got, _ := controllerLine(own, h)
		switch {
		case h.Name() == cpuset.Name() && got != h.Current:
			t.Errorf("cpuset: helper in %q, want it left in %q", got, h.Current)
		case h.Name() != cpuset.Name() && got != cgroup:
			t.Errorf("%s: helper in %q, want %s", h.Name(), got, cgroup)
		}
	}
	if _, ok := r.Result.Joined[cpuset.Name()]; ok || len(r.Result.Joined) != len(l.Hierarchies)-1 {
		t.Errorf("result joined %v", r.Result.Joined)
	}

	r, _ = runHelper(t, "setup", append(env, envRequire+"=true"))
	if !strings.HasPrefix(r.Err, "cgroup: "+want) {
		t.Errorf("with Require: error %q, want it to start with %q", r.Err, "cgroup: "+want)
	}
}

// On a pure v2 host (here: a fresh cgroup2 mount in a cgroup namespace),
// PID 1 empties the namespace root and then joins the Mesos cgroup.
func TestSetupEvacuatesThenJoinsOnAPureV2Host(t *testing.T) {
	testenv.RequireRoot(t)
	id := randomID(t)
	r, log, _ := startInV2Namespace(t, func(h Hierarchy, nsRoot string) {
		makeCgroup(t, h, nsRoot+"/mesos/"+id)
	}, envChildren+"=1", EnvMesosContainerName+"=mesos-"+id, envRequire+"=true")
	if r.Err != "" {
		t.Fatalf("Setup: %s\nlog:\n%s", r.Err, log)
	}
	if !strings.Contains(log, "on cgroup v2") {
		t.Errorf("the helper did not see a pure v2 host:\n%s", log)
	}
	if !r.Result.Evacuated || r.Result.Joined["unified"] != "/mesos/"+id {
		t.Errorf("result %+v, want evacuated and unified joined at /mesos/%s", r.Result, id)
	}
	if got := cgroupLines(r.Cgroup)[""]; got != "/mesos/"+id {
		t.Errorf("PID 1 in %q, want /mesos/%s", got, id)
	}
	for pid, text := range r.Children {
		if got := cgroupLines(text)[""]; got != EvacuationCgroup {
			t.Errorf("child %s in %q, want %s", pid, got, EvacuationCgroup)
		}
	}
}
