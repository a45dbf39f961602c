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

	"github.com/nodeinit/nodeinit/config"
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
	envPrefix   = "NODEINIT_TEST_MESOS_PREFIX"
	// envForKubelet sets Options.ForKubelet.
	envForKubelet = "NODEINIT_TEST_FOR_KUBELET"
	// envHostCgroupNS guards the evacuation helper against running in the
	// test's own cgroup namespace, where it would empty the host's root.
	envHostCgroupNS = "NODEINIT_TEST_HOST_CGROUPNS"
	// envKubeletEnables names a cgroup in which the namespace-root helper,
	// after Setup, enables every controller it offers for its children,
	// as a kubelet does in its cgroup root for its pods.
	envKubeletEnables = "NODEINIT_TEST_KUBELET_ENABLES"
	// envBelowRoot makes the namespace-root helper move itself into /init
	// before it starts its children, so that the namespace root can enable
	// controllers for its children before Setup.
	envBelowRoot = "NODEINIT_TEST_BELOW_ROOT"
	// envDriver sets Options.KubeletCgroupDriver.
	envDriver = "NODEINIT_TEST_KUBELET_CGROUP_DRIVER"
	// envOwnRoot sets Options.OwnRoot, with Limits.
	envOwnRoot = "NODEINIT_TEST_OWN_ROOT"
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
	// KubeletEnabled is what enabling the controllers of envKubeletEnables
	// for its children gave: "" when every one could be enabled.
	KubeletEnabled string
}

func helperOptions() Options {
	c := config.Default().Cgroup
	c.Parent, c.Require = os.Getenv(envParent), os.Getenv(envRequire) == "true"
	if v, ok := os.LookupEnv(envEvacuate); ok {
		b := v == "true"
		c.V2Evacuate = &b
	}
	if v, ok := os.LookupEnv(envPrefix); ok {
		c.MesosPrefix = v
	}
	own := os.Getenv(envOwnRoot)
	return Options{Cgroup: c, ForKubelet: os.Getenv(envForKubelet) == "true", KubeletCgroupDriver: os.Getenv(envDriver),
		Limits: own != "", OwnRoot: own}
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
	if os.Getenv(envBelowRoot) == "true" {
		if err := os.Mkdir("/sys/fs/cgroup/init", 0o755); err != nil {
			return fail(err)
		}
		if err := occgroups.WriteCgroupProc("/sys/fs/cgroup/init", os.Getpid()); err != nil {
			return fail(err)
		}
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
	if cg := os.Getenv(envKubeletEnables); cg != "" {
		dir := filepath.Join("/sys/fs/cgroup", cg)
		offered, err := occgroups.ReadFile(dir, "cgroup.controllers")
		if err != nil {
			return fail(err)
		}
		var failed []string
		for _, c := range strings.Fields(offered) {
			if err := occgroups.WriteFile(dir, "cgroup.subtree_control", "+"+c); err != nil {
				failed = append(failed, fmt.Sprintf("+%s: %v", c, errors.Unwrap(err)))
			}
		}
		r.KubeletEnabled = strings.Join(failed, "; ")
	}
	b, _ = os.ReadFile("/sys/fs/cgroup/cgroup.procs")
	r.RootProcs = string(b)
	b, _ = os.ReadFile("/sys/fs/cgroup/cgroup.subtree_control")
	r.RootControl = strings.TrimSpace(string(b))
	return printReport(r)
}

// runHelper runs the test binary as helper mode with env, and returns its
// report and its log (stderr).
func runHelper(t *testing.T, mode string, env []string) (report, string) {
	t.Helper()
	return runHelperIn(t, nil, mode, env)
}

// runHelperIn is runHelper with the helper started in the cgroups whose
// directories are dirs, as a container runtime starts a container's first
// process: a shell moves itself there and execs the helper.
func runHelperIn(t *testing.T, dirs []string, mode string, env []string) (report, string) {
	t.Helper()
	script := `while [ "$1" != -- ]; do echo 0 > "$1/cgroup.procs" || exit 99; shift; done; shift; exec "$@"`
	args := append(append([]string{"-c", script, "sh"}, dirs...), "--", os.Args[0], "-test.run=^$")
	cmd := exec.Command("/bin/sh", args...)
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

// A Mesos containerizer's container whose cgroup the agent made in every
// hierarchy (cgroups isolation): nodeinit joins it everywhere, and the
// kubelet can take it as its cgroup root.
func TestSetupJoinsTheMesosCgroupInEveryHierarchy(t *testing.T) {
	testenv.RequireRoot(t)
	l := liveLayout(t)
	id := randomID(t)
	for name, tc := range map[string]struct {
		env    string
		cgroup string
	}{
		"top-level from MESOS_DIRECTORY": {EnvMesosDirectory + "=/x/runs/" + id, "/mesos/" + id},
		"nested from MESOS_SANDBOX":      {EnvMesosSandbox + "=/x/runs/" + id + "/containers/c-" + id, "/mesos/" + id + "/mesos/c-" + id},
	} {
		t.Run(name, func(t *testing.T) {
			for _, h := range l.Hierarchies {
				makeCgroup(t, h, tc.cgroup)
			}
			r, log := runHelper(t, "setup", []string{tc.env, envForKubelet + "=true"})
			if r.Err != "" {
				t.Fatalf("Setup: %s\nlog:\n%s", r.Err, log)
			}
			if r.Result.Cgroup != tc.cgroup || r.Result.ContainerID != path.Base(tc.cgroup) || r.Result.KubeletRoot != tc.cgroup {
				t.Errorf("result %+v, want cgroup, id and kubelet root of %s", r.Result, tc.cgroup)
			}
			own := cgroupLines(r.Cgroup)
			for _, h := range l.Hierarchies {
				got, ok := controllerLine(own, h)
				if !ok || got != tc.cgroup {
					t.Errorf("hierarchy %s: helper in %q, want %s\n%s", h.Name(), got, tc.cgroup, r.Cgroup)
				}
				if r.Result.Joined[h.Name()] != tc.cgroup {
					t.Errorf("result says %s joined %q", h.Name(), r.Result.Joined[h.Name()])
				}
			}
			if !strings.Contains(log, "joined cgroup "+tc.cgroup) || !strings.Contains(log, "the kubelet can take cgroup "+tc.cgroup+" as its cgroup root") {
				t.Errorf("log does not tell the join and the kubelet's root:\n%s", log)
			}
			if strings.Contains(log, "\nW") || strings.HasPrefix(log, "W") {
				t.Errorf("warnings:\n%s", log)
			}
		})
	}
}

// The Mesos agent's default isolation (posix/cpu,posix/mem) with the Linux
// launcher makes a container's cgroup in the freezer and name=systemd
// hierarchies only: nodeinit joins it there and stays elsewhere, and the
// kubelet cannot take it as its cgroup root: one warning names the
// hierarchies it lacks; with Require that is fatal.
func TestSetupJoinsWhereTheCgroupExists(t *testing.T) {
	testenv.RequireRoot(t)
	l := liveLayout(t)
	var launcher, kubelet []string
	for _, h := range l.Hierarchies {
		if slices.Contains(h.Controllers, "freezer") || slices.Contains(h.Controllers, "name=systemd") {
			launcher = append(launcher, h.Name())
		}
	}
	for _, h := range KubeletHierarchies(l) {
		if !slices.Contains(launcher, h.Name()) {
			kubelet = append(kubelet, h.Name())
		}
	}
	testenv.Require(t, len(launcher) > 0 && len(kubelet) > 0, "a freezer or name=systemd hierarchy, and a hierarchy the kubelet checks")
	id := randomID(t)
	cgroup := "/mesos/" + id
	for _, h := range l.Hierarchies {
		if slices.Contains(launcher, h.Name()) {
			makeCgroup(t, h, cgroup)
		}
	}
	env := []string{EnvMesosDirectory + "=/x/runs/" + id, envForKubelet + "=true"}

	r, log := runHelper(t, "setup", env)
	if r.Err != "" {
		t.Fatalf("Setup: %s\nlog:\n%s", r.Err, log)
	}
	own := cgroupLines(r.Cgroup)
	for _, h := range l.Hierarchies {
		got, _ := controllerLine(own, h)
		want := h.Current
		if slices.Contains(launcher, h.Name()) {
			want = cgroup
		}
		if got != want {
			t.Errorf("hierarchy %s: helper in %q, want %s", h.Name(), got, want)
		}
	}
	if r.Result.KubeletRoot != "" || len(r.Result.Joined) != len(launcher) {
		t.Errorf("result %+v, want %s joined in %q and no kubelet root", r.Result, cgroup, launcher)
	}
	if i := fmt.Sprintf("cgroup %s exists only in the %s", cgroup, strings.Join(launcher, " ")); !strings.Contains(log, i) {
		t.Errorf("log does not say %q:\n%s", i, log)
	}
	warnings := 0
	for line := range strings.Lines(log) {
		if strings.HasPrefix(line, "W") {
			warnings++
		}
	}
	want := fmt.Sprintf("cgroup %s cannot be the kubelet's cgroup root: it does not exist in the %s", cgroup, strings.Join(kubelet, " "))
	if warnings != 1 || !strings.Contains(log, want) || !strings.Contains(log, "the executor gets no --cgroup-root") {
		t.Errorf("want one warning saying %q; log:\n%s", want, log)
	}

	r, _ = runHelper(t, "setup", append(env, envRequire+"=true"))
	if !strings.HasPrefix(r.Err, "cgroup: "+want) {
		t.Errorf("with Require: error %q, want %q...", r.Err, "cgroup: "+want)
	}
	// Without a cgroup root to hand over, the partial cgroup is normal.
	r, log = runHelper(t, "setup", env[:1])
	if r.Err != "" || strings.Contains(log, "\nW") || strings.HasPrefix(log, "W") {
		t.Errorf("without ForKubelet: error %q; log:\n%s", r.Err, log)
	}
}

// A Docker containerizer task lives in the cgroup its engine made: nodeinit
// stays there, even where a /mesos/<id> exists, and the kubelet can take
// that cgroup as its root. The engine's cgroup is /docker/<container> with
// its cgroupfs driver (as a real Docker engine makes it, in every
// hierarchy: test/k8s runs one) and system.slice/docker-<container>.scope
// with its systemd driver, which these cases make for real.
func TestSetupOfADockerContainerizerTaskStays(t *testing.T) {
	testenv.RequireRoot(t)
	l := liveLayout(t)
	id := randomID(t)
	for _, engine := range []string{"/docker/" + id + "-engine", "/system.slice/docker-" + id + "-engine.scope"} {
		t.Run(strings.Split(engine, "/")[1], func(t *testing.T) {
			var dirs []string
			for _, h := range l.Hierarchies {
				dirs = append(dirs, makeCgroup(t, h, engine))
				makeCgroup(t, h, "/mesos/"+id)
			}
			for _, name := range []string{"mesos-" + id, "mesos-S0.agent." + id + ".executor"} {
				r, log := runHelperIn(t, dirs, "setup", []string{EnvMesosContainerName + "=" + name,
					EnvMesosDirectory + "=/var/lib/mesos/slaves/S0/frameworks/F/executors/E/runs/" + id, EnvMesosSandbox + "=/mnt/mesos/sandbox",
					envForKubelet + "=true", envRequire + "=true"})
				if r.Err != "" {
					t.Fatalf("%s: Setup: %s\nlog:\n%s", name, r.Err, log)
				}
				own := cgroupLines(r.Cgroup)
				for _, h := range l.Hierarchies {
					if got, _ := controllerLine(own, h); got != engine {
						t.Errorf("%s: hierarchy %s: helper in %q, want it left in %s", name, h.Name(), got, engine)
					}
				}
				if r.Result.ContainerID != id || r.Result.Cgroup != "" || len(r.Result.Joined) != 0 || r.Result.KubeletRoot != engine {
					t.Errorf("%s: result %+v, want id %s, nothing joined, kubelet root %s", name, r.Result, id, engine)
				}
				if !strings.Contains(log, "a Docker containerizer task, whose cgroup is its engine's: staying in") {
					t.Errorf("%s: log does not say it stays:\n%s", name, log)
				}
			}
		})
	}
	// Without a cgroup root to hand over, where the task is needs no check.
	r, log := runHelper(t, "setup", []string{EnvMesosContainerName + "=mesos-" + id, envRequire + "=true"})
	if r.Err != "" || r.Result.KubeletRoot != "" || strings.Contains(log, "\nW") || strings.HasPrefix(log, "W") {
		t.Errorf("without ForKubelet: result %+v, error %q; log:\n%s", r.Result, r.Err, log)
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
		if r.Result.Cgroup != "/mesos/"+id || len(r.Result.Joined) != 0 || r.Result.KubeletRoot != "" {
			t.Errorf("result %+v, want the discovered cgroup, nothing joined, no kubelet root", r.Result)
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
		r, log := runHelper(t, "setup", []string{EnvMesosDirectory + "=", EnvMesosSandbox + "=", EnvMesosContainerName + "=", envForKubelet + "=true"})
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
	leaf := path.Join(cgroup, config.Default().Cgroup.V2Leaf)
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
	return startInV2NamespaceThen(t, prepare, nil, env...)
}

// startInV2NamespaceThen is startInV2Namespace with ready, when not nil,
// called once the helper runs and unshare has left the namespace root,
// before the helper calls Setup.
func startInV2NamespaceThen(t *testing.T, prepare, ready func(h Hierarchy, nsRoot string), env ...string) (report, string, string) {
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
	if ready != nil {
		ready(h, nsRootCgroup)
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
	if got := cgroupLines(r.Cgroup)[""]; got != evacuationCgroup {
		t.Errorf("PID 1 in %q, want %s", got, evacuationCgroup)
	}
	if !strings.Contains(log, "moved 3 processes of the root cgroup into /init") || !strings.Contains(log, "staying in unified:/init") {
		t.Errorf("the log does not tell the evacuation:\n%s", log)
	}
	if len(r.Children) != 2 {
		t.Fatalf("%d children reported, want 2", len(r.Children))
	}
	for pid, text := range r.Children {
		if got := cgroupLines(text)[""]; got != evacuationCgroup {
			t.Errorf("child %s in %q, want %s", pid, got, evacuationCgroup)
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
	}, envChildren+"=1", EnvMesosDirectory+"=/x/runs/"+id, envRequire+"=true")
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
		if got := cgroupLines(text)[""]; got != evacuationCgroup {
			t.Errorf("child %s in %q, want %s", pid, got, evacuationCgroup)
		}
	}
}

// A Docker containerizer task of an engine that gives containers a private
// cgroup namespace (the default on v2): nodeinit, PID 1 at the namespace
// root, moves the root's processes into /init; the container's own cgroup
// is the namespace root, which the kubelet takes as its root by default.
func TestSetupOfADockerTaskInAPrivateV2Namespace(t *testing.T) {
	testenv.RequireRoot(t)
	id := randomID(t)
	r, log, _ := startInV2Namespace(t, nil, envChildren+"=1", EnvMesosContainerName+"=mesos-"+id,
		envForKubelet+"=true", envRequire+"=true")
	if r.Err != "" {
		t.Fatalf("Setup: %s\nlog:\n%s", r.Err, log)
	}
	if !r.Result.Evacuated || r.Result.KubeletRoot != "/" || r.Result.ContainerID != id || len(r.Result.Joined) != 0 {
		t.Errorf("result %+v, want evacuated, nothing joined, id %s, kubelet root /", r.Result, id)
	}
	if got := cgroupLines(r.Cgroup)[""]; got != evacuationCgroup {
		t.Errorf("PID 1 in %q, want %s", got, evacuationCgroup)
	}
	if !strings.Contains(log, "the container's cgroup / is the root of the cgroup mounts, which is the kubelet's default cgroup root") {
		t.Errorf("the log does not say what the kubelet gets:\n%s", log)
	}
}

// On v2 the kubelet needs the controllers it uses, of those the hierarchy
// offers, available in its cgroup root: a /mesos/<id> whose parent enables
// none for it cannot be the root when the kubelet uses one of them.
func TestSetupOnAPureV2HostChecksTheKubeletsControllers(t *testing.T) {
	testenv.RequireRoot(t)
	id := randomID(t)
	cgroup := "/mesos/" + id
	r, log, ctrl := startInV2Namespace(t, func(h Hierarchy, nsRoot string) {
		makeCgroup(t, h, nsRoot+cgroup)
	}, envChildren+"=1", EnvMesosDirectory+"=/x/runs/"+id, envForKubelet+"=true")
	if r.Err != "" {
		t.Fatalf("Setup: %s\nlog:\n%s", r.Err, log)
	}
	if r.Result.Joined["unified"] != cgroup {
		t.Errorf("result %+v, want unified joined at %s", r.Result, cgroup)
	}
	if !slices.Contains(kubeletV2, ctrl) {
		// The only controller this host offers is one the kubelet does
		// not use: nothing is lacking.
		if r.Result.KubeletRoot != cgroup {
			t.Errorf("kubelet root %q, want %s (the hierarchy offers only %s)\nlog:\n%s", r.Result.KubeletRoot, cgroup, ctrl, log)
		}
		return
	}
	want := "the controllers " + ctrl + " are not available in it"
	if r.Result.KubeletRoot != "" || !strings.Contains(log, want) || !strings.Contains(log, "the executor gets no --cgroup-root") {
		t.Errorf("kubelet root %q, want none and a warning saying %q; log:\n%s", r.Result.KubeletRoot, want, log)
	}
}

// On a pure v2 host a cgroup that offers controllers but enables none yet:
// nodeinit joins its leaf, so that the kubelet, given the cgroup as its
// root, can enable them for its pods' cgroups, which the kernel refuses
// while a process lives in the cgroup itself.
func TestSetupOnAPureV2HostLeavesTheKubeletsRootToItsPods(t *testing.T) {
	testenv.RequireRoot(t)
	id := randomID(t)
	cgroup := "/mesos/" + id
	// The helper and its child leave the namespace root for /init, so the
	// root can hand the controller on to /mesos, and /mesos to the cgroup.
	r, log, ctrl := startInV2NamespaceThen(t, func(h Hierarchy, nsRoot string) {
		makeCgroup(t, h, nsRoot+cgroup)
	}, func(h Hierarchy, nsRoot string) {
		_, ctrl := availableController(t, h)
		for _, parent := range []string{nsRoot, nsRoot + "/mesos"} {
			dir, _ := h.Dir("/", parent)
			enableController(t, dir, ctrl)
		}
	}, envBelowRoot+"=true", envChildren+"=1", EnvMesosDirectory+"=/x/runs/"+id, envForKubelet+"=true", envRequire+"=true",
		envKubeletEnables+"="+cgroup)
	if r.Err != "" {
		t.Fatalf("Setup: %s\nlog:\n%s", r.Err, log)
	}
	leaf := path.Join(cgroup, config.Default().Cgroup.V2Leaf)
	if r.Result.Joined["unified"] != leaf || r.Result.KubeletRoot != cgroup {
		t.Errorf("result %+v, want unified joined at %s and the kubelet's root %s\nlog:\n%s", r.Result, leaf, cgroup, log)
	}
	if got := cgroupLines(r.Cgroup)[""]; got != leaf {
		t.Errorf("PID 1 in %q, want %s", got, leaf)
	}
	if r.KubeletEnabled != "" {
		t.Errorf("the kubelet could not enable %s in its root %s for its pods: %s", ctrl, cgroup, r.KubeletEnabled)
	}
}

// A kubelet on the systemd cgroup driver takes its cgroup root in cgroupfs
// form and looks for the nested slices it names (/a/b is
// /a.slice/a-b.slice): a container in a slice gets the root that names it;
// one in a scope, as a Docker engine on systemd makes, or in /mesos/<id>,
// gets none and one warning (an error with Require), since the kubelet would
// exit with "invalid configuration" on the cgroupfs path.
func TestSetupForAKubeletOnTheSystemdCgroupDriver(t *testing.T) {
	testenv.RequireRoot(t)
	l := liveLayout(t)
	id := strings.TrimPrefix(randomID(t), "test-")
	inEvery := func(cgroup string) []string {
		var dirs []string
		for _, h := range l.Hierarchies {
			dirs = append(dirs, makeCgroup(t, h, cgroup))
		}
		return dirs
	}
	t.Run("a slice: named as the driver names it", func(t *testing.T) {
		slice := "/nodeinittest" + id + ".slice"
		inEvery(slice)
		r, log := runHelper(t, "setup", []string{envParent + "=" + slice, envForKubelet + "=true", envRequire + "=true", envDriver + "=systemd"})
		if r.Err != "" || r.Result.KubeletRoot != "/nodeinittest"+id {
			t.Errorf("result %+v, error %q; want the kubelet's root /nodeinittest%s\nlog:\n%s", r.Result, r.Err, id, log)
		}
		if want := "which its systemd cgroup driver names /nodeinittest" + id; !strings.Contains(log, want) {
			t.Errorf("log does not say %q:\n%s", want, log)
		}
	})
	t.Run("its own root: limits read where the driver puts it", func(t *testing.T) {
		slice := "/nodeinittest" + id + "own.slice"
		inEvery(slice)
		var pids Hierarchy
		for _, h := range l.Hierarchies {
			if slices.Contains(h.Controllers, "pids") {
				pids = h
			}
		}
		testenv.Require(t, pids.Mountpoint != "", "a v1 pids hierarchy")
		dir, _ := pids.Dir("/", slice)
		if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte("77"), 0o644); err != nil {
			t.Fatal(err)
		}
		r, log := runHelper(t, "setup", []string{envOwnRoot + "=/nodeinittest" + id + "own", envDriver + "=systemd"})
		if r.Result.LimitsRoot != slice || r.Result.Limits.Pids.Value != 77 {
			t.Errorf("limits %+v of %q, want pids 77 of %s\nlog:\n%s", r.Result.Limits, r.Result.LimitsRoot, slice, log)
		}
	})
	t.Run("a Docker engine's scope: none", func(t *testing.T) {
		engine := "/system.slice/docker-" + id + ".scope"
		dirs := inEvery(engine)
		env := []string{EnvMesosContainerName + "=mesos-" + id, envForKubelet + "=true", envDriver + "=systemd"}
		want := "cgroup " + engine + " cannot be the kubelet's cgroup root: its cgroup driver is systemd"
		r, log := runHelperIn(t, dirs, "setup", env)
		if r.Err != "" || r.Result.KubeletRoot != "" || !strings.Contains(log, want) || !strings.Contains(log, "the executor gets no --cgroup-root") {
			t.Errorf("result %+v, error %q; want no kubelet root and a warning saying %q\nlog:\n%s", r.Result, r.Err, want, log)
		}
		r, _ = runHelperIn(t, dirs, "setup", append(env, envRequire+"=true"))
		if !strings.HasPrefix(r.Err, "cgroup: "+want) {
			t.Errorf("with Require: error %q, want %q...", r.Err, "cgroup: "+want)
		}
		// The cgroupfs driver takes the scope as it is.
		r, log = runHelperIn(t, dirs, "setup", env[:2])
		if r.Err != "" || r.Result.KubeletRoot != engine {
			t.Errorf("cgroupfs: result %+v, error %q; want the kubelet's root %s\nlog:\n%s", r.Result, r.Err, engine, log)
		}
	})
}

// A Docker containerizer task on a pure v2 host, in the host's cgroup
// namespace (--cgroupns=host, as the Marathon app runs it), whose engine
// cgroup offers controllers: nodeinit moves into that cgroup's leaf, so the
// kubelet, given the cgroup as its root, can enable them for its pods.
func TestSetupOfADockerTaskOnAPureV2HostLeavesItsCgroupToThePods(t *testing.T) {
	testenv.RequireRoot(t)
	id := strings.TrimPrefix(randomID(t), "test-")
	// The helper, alone, leaves the namespace root for /init, which the
	// root then hands its controller: /init is the task's engine cgroup.
	r, log, ctrl := startInV2NamespaceThen(t, nil, func(h Hierarchy, nsRoot string) {
		_, ctrl := availableController(t, h)
		dir, _ := h.Dir("/", nsRoot)
		enableController(t, dir, ctrl)
		// Two levels below the namespace root, which its own cleanup
		// does not reach: removed first.
		t.Cleanup(func() { _ = unix.Rmdir(filepath.Join(dir, "init", config.Default().Cgroup.V2Leaf)) })
	}, envBelowRoot+"=true", EnvMesosContainerName+"=mesos-"+id, envForKubelet+"=true", envRequire+"=true", envKubeletEnables+"=/init")
	if r.Err != "" {
		t.Fatalf("Setup: %s\nlog:\n%s", r.Err, log)
	}
	leaf := path.Join("/init", config.Default().Cgroup.V2Leaf)
	if r.Result.Joined["unified"] != leaf || r.Result.KubeletRoot != "/init" || r.Result.Evacuated {
		t.Errorf("result %+v, want unified joined at %s, the kubelet's root /init, no evacuation\nlog:\n%s", r.Result, leaf, log)
	}
	if got := cgroupLines(r.Cgroup)[""]; got != leaf {
		t.Errorf("PID 1 in %q, want %s", got, leaf)
	}
	if r.KubeletEnabled != "" {
		t.Errorf("the kubelet could not enable %s in its root /init for its pods: %s", ctrl, r.KubeletEnabled)
	}
}
