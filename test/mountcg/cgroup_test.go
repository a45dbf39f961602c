package mountcg

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/cgroups"
	"github.com/nodeinit/nodeinit/test/testenv"
)

// mesosCgroup creates /mesos/<id> in every mounted hierarchy, as the Mesos
// agent would, and removes it (and /mesos when it made it and nothing else
// lives there) when the test ends, after nodeinit has exited.
func mesosCgroup(t *testing.T, id string) cgroups.Layout {
	t.Helper()
	l := layout(t)
	makeCgroups(t, l, "/mesos", "/mesos/"+id)
	return l
}

// layout reads the host's cgroup hierarchies; it needs at least one.
func layout(t *testing.T) cgroups.Layout {
	t.Helper()
	testenv.RequireRoot(t)
	l, err := cgroups.ReadLayout("/")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Require(t, l.Mode() != cgroups.NoCgroups, "a mounted cgroup filesystem")
	return l
}

// makeCgroups creates the cgroups paths, each the parent of the next, in
// every hierarchy of l, and returns the last one's directory per hierarchy.
// What it made is removed when the test ends; a parent that already existed
// (another test's /mesos) is left alone, and one that others still use when
// the test ends is too.
func makeCgroups(t *testing.T, l cgroups.Layout, paths ...string) map[string]string {
	t.Helper()
	dirs := map[string]string{}
	for _, h := range l.Hierarchies {
		var created []string
		for _, cg := range paths {
			dir, ok := h.Dir("/", cg)
			if !ok {
				t.Fatalf("the %s hierarchy does not reach %s", h.Name(), cg)
			}
			dirs[h.Name()] = dir
			if err := os.Mkdir(dir, 0o755); errors.Is(err, os.ErrExist) {
				continue
			} else if err != nil {
				t.Fatal(err)
			}
			created = append(created, dir)
			if slices.Contains(h.Controllers, "cpuset") { // no process may join a cpuset without cpus and mems
				for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
					v, err := os.ReadFile(filepath.Join(filepath.Dir(dir), f))
					if err == nil {
						err = os.WriteFile(filepath.Join(dir, f), v, 0o644)
					}
					if err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		last := dirs[h.Name()]
		t.Cleanup(func() {
			for i := len(created) - 1; i >= 0; i-- {
				removeCgroup(t, created[i], created[i] != last)
			}
		})
	}
	return dirs
}

// removeCgroup removes a cgroup directory the test made, with its children
// (the v2 leaf). The processes that were in it may take a moment to be gone
// after their nodeinit exited: EBUSY is retried for a while. A shared
// parent that other tests still use is not an error.
func removeCgroup(t *testing.T, dir string, shared bool) {
	t.Helper()
	if shared {
		if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.ENOENT) {
			t.Errorf("remove cgroup %s: %v", dir, err)
		}
		return
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			removeCgroup(t, filepath.Join(dir, e.Name()), false)
		}
	}
	var err error
	for range 100 {
		err = unix.Rmdir(dir)
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil && !errors.Is(err, unix.ENOENT) {
		t.Errorf("remove cgroup %s: %v", dir, err)
	}
}

// inHierarchy returns the cgroup of hierarchy h in a /proc/<pid>/cgroup text.
func inHierarchy(text string, h cgroups.Hierarchy) string {
	for ctrls, cg := range cgroupLines(text) {
		if h.Unified && ctrls == "" || !h.Unified && slices.Contains(strings.Split(ctrls, ","), h.Controllers[0]) {
			return cg
		}
	}
	return ""
}

// expectIn checks that nodeinit, the executor and the proxy are in cgroup
// in the hierarchies of l that in selects, and where the test was
// elsewhere.
func (n *node) expectIn(l cgroups.Layout, executor, proxy testenv.Report, cgroup string, in func(cgroups.Hierarchy) bool) {
	n.t.Helper()
	for who, text := range map[string]string{
		"nodeinit": readProc(n.t, n.Pid(), "cgroup"), "executor": executor.Cgroup, "proxy": proxy.Cgroup,
	} {
		for _, h := range l.Hierarchies {
			want := h.Current
			if in(h) {
				want = cgroup
			}
			if got := inHierarchy(text, h); got != want {
				n.t.Errorf("%s is in %q of the %s hierarchy, want %s", who, got, h.Name(), want)
			}
		}
	}
}

func everywhere(cgroups.Hierarchy) bool { return true }

// A Mesos containerizer's container whose cgroup the agent made in every
// hierarchy (its cgroups isolators): nodeinit joins it, the executor and
// the proxy are in it, and the executor gets it as --cgroup-root and the
// container id in MESOS_EXECUTOR_CONTAINER_UUID. A nested container has no
// MESOS_DIRECTORY: its MESOS_SANDBOX names it, and its cgroup is
// /<root>/<parent>/mesos/<child> whatever the root.
func TestMesosContainerizerCgroupInEveryHierarchy(t *testing.T) {
	for name, nested := range map[string]bool{"top-level from MESOS_DIRECTORY": false, "nested from MESOS_SANDBOX": true} {
		t.Run(name, func(t *testing.T) {
			l := layout(t)
			c := newContainer(t, l, nested)
			env := cgroups.EnvMesosDirectory + "=/var/lib/mesos/slaves/S0/frameworks/F/executors/E/runs/" + c.id
			if nested {
				env = cgroups.EnvMesosSandbox + "=/var/lib/mesos/slaves/S0/frameworks/F/executors/E/runs/" + c.parent + "/containers/" + c.id
			}
			n := startNode(t, []string{env}, c.prefixFlag(), "--require-cgroup")
			executor, proxy := n.waitReady()
			n.expectIn(l, executor, proxy, c.cgroup, everywhere)
			if !slices.Contains(executor.Args, "--cgroup-root="+c.cgroup) {
				t.Errorf("executor args %q lack --cgroup-root=%s", executor.Args, c.cgroup)
			}
			if !slices.Contains(executor.Env, "MESOS_EXECUTOR_CONTAINER_UUID="+c.id) {
				t.Errorf("executor environment lacks MESOS_EXECUTOR_CONTAINER_UUID=%s", c.id)
			}
			if w := n.cgroupWarnings(); len(w) > 0 {
				t.Errorf("warnings: %q", w)
			}
			if code := n.stop(); code != 0 {
				t.Errorf("nodeinit exited %d after TERM, want the executor's 0", code)
			}
		})
	}
}

// With the agent's default isolation (posix/cpu,posix/mem) the Linux
// launcher makes a container's cgroup in the freezer and name=systemd
// hierarchies only. nodeinit joins it there, stays where it is in the
// others, and gives the executor no --cgroup-root, which the kubelet would
// refuse: one warning names the hierarchies the kubelet needs it in. With
// --require-cgroup that is fatal.
func TestMesosContainerizerDefaultIsolation(t *testing.T) {
	l := layout(t)
	launcher := func(h cgroups.Hierarchy) bool {
		return slices.Contains(h.Controllers, "freezer") || slices.Contains(h.Controllers, "name=systemd")
	}
	var made cgroups.Layout
	var missing []string
	for _, h := range l.Hierarchies {
		if launcher(h) {
			made.Hierarchies = append(made.Hierarchies, h)
		}
	}
	for _, h := range cgroups.KubeletHierarchies(l) {
		if !launcher(h) {
			missing = append(missing, h.Name())
		}
	}
	requireLayout(t, l, len(made.Hierarchies) > 0 && len(missing) > 0, "a v1 freezer or name=systemd hierarchy, and a hierarchy the kubelet checks")
	c := newContainer(t, made, false)
	env := []string{cgroups.EnvMesosDirectory + "=/var/lib/mesos/slaves/S0/frameworks/F/executors/E/runs/" + c.id}
	warning := "cgroup " + c.cgroup + " cannot be the kubelet's cgroup root: it does not exist in the " + strings.Join(missing, " ") + " hierarch"

	t.Run("joined there, not handed to the kubelet", func(t *testing.T) {
		n := startNode(t, env, c.prefixFlag())
		executor, proxy := n.waitReady()
		n.expectIn(l, executor, proxy, c.cgroup, launcher)
		if slices.ContainsFunc(executor.Args, func(a string) bool { return strings.HasPrefix(a, "--cgroup-root") }) {
			t.Errorf("executor args %q have a --cgroup-root", executor.Args)
		}
		if !slices.Contains(executor.Env, "MESOS_EXECUTOR_CONTAINER_UUID="+c.id) {
			t.Errorf("executor environment lacks MESOS_EXECUTOR_CONTAINER_UUID=%s", c.id)
		}
		if w, named := n.cgroupWarnings(), n.Lines('W', warning, "the executor gets no --cgroup-root"); len(w) != 1 || len(named) != 1 {
			t.Errorf("want one warning saying %q; log:\n%s", warning, n.Log())
		}
		if code := n.stop(); code != 0 {
			t.Errorf("nodeinit exited %d after TERM, want 0", code)
		}
	})
	t.Run("fatal with --require-cgroup", func(t *testing.T) {
		n := startNode(t, env, c.prefixFlag(), "--require-cgroup")
		n.expectFatal("Cannot join", warning)
	})
}

// A Docker containerizer task lives in the cgroup its engine made for the
// container (/docker/<hash> with cgroupfs), where the agent writes its
// limits; the agent makes no /mesos/<id> for it, and one that exists is
// not the task's. nodeinit stays, the executor gets the engine's cgroup as
// --cgroup-root and the id from every form of the container name.
func TestDockerContainerizerTaskStaysInItsEngineCgroup(t *testing.T) {
	l := layout(t)
	c := newContainer(t, l, false)
	engine := "/" + randomID(t)
	dirs := makeCgroups(t, l, engine)
	var start []string
	for _, h := range l.Hierarchies {
		start = append(start, dirs[h.Name()])
	}
	for _, name := range []string{"mesos-" + c.id, "mesos-S0-agent." + c.id, "mesos-S0-agent." + c.id + ".executor", "mesos-" + c.id + ".executor"} {
		t.Run(name, func(t *testing.T) {
			env := []string{cgroups.EnvMesosContainerName + "=" + name,
				cgroups.EnvMesosDirectory + "=/var/lib/mesos/slaves/S0/frameworks/F/executors/E/runs/" + c.id,
				cgroups.EnvMesosSandbox + "=/mnt/mesos/sandbox"}
			n := startNodeWith(t, nodeOptions{cgroups: start}, env, c.prefixFlag(), "--require-cgroup")
			executor, proxy := n.waitReady()
			n.expectIn(l, executor, proxy, engine, everywhere)
			if !slices.Contains(executor.Args, "--cgroup-root="+engine) {
				t.Errorf("executor args %q lack --cgroup-root=%s", executor.Args, engine)
			}
			if !slices.Contains(executor.Env, "MESOS_EXECUTOR_CONTAINER_UUID="+c.id) {
				t.Errorf("executor environment lacks MESOS_EXECUTOR_CONTAINER_UUID=%s", c.id)
			}
			if i := n.Lines('I', name, "a Docker containerizer task", "staying in"); len(i) != 1 {
				t.Errorf("want one line saying nodeinit stays; log:\n%s", n.Log())
			}
			if code := n.stop(); code != 0 {
				t.Errorf("nodeinit exited %d after TERM, want 0", code)
			}
		})
	}
}

// An executor that sets its own cgroup root, in its arguments or in its
// kubelet configuration, gets none from nodeinit, which says which one the
// kubelet takes (a flag over the file); nodeinit still joins the cgroup.
func TestExecutorsOwnCgroupRootWins(t *testing.T) {
	l := layout(t)
	c := newContainer(t, l, false)
	file := filepath.Join(t.TempDir(), "kubelet.yaml")
	if err := os.WriteFile(file, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupRoot: /from-file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		args []string
		from string
	}{
		"configuration file": {[]string{"--config=" + file}, "cgroupRoot /from-file of the kubelet's configuration " + file},
		"flag over the file": {[]string{"--config=" + file, "--cgroup-root=/from-flag"},
			"the executor's --cgroup-root=/from-flag, which overrides cgroupRoot /from-file of the kubelet's configuration " + file},
	} {
		t.Run(name, func(t *testing.T) {
			n := startNodeWith(t, nodeOptions{executorArgs: tc.args},
				[]string{cgroups.EnvMesosDirectory + "=/x/runs/" + c.id}, c.prefixFlag(), "--require-cgroup")
			executor, proxy := n.waitReady()
			n.expectIn(l, executor, proxy, c.cgroup, everywhere)
			if slices.Contains(executor.Args, "--cgroup-root="+c.cgroup) {
				t.Errorf("executor args %q: nodeinit added its --cgroup-root", executor.Args)
			}
			if i := n.Lines('I', "The executor sets its own cgroup root, so nodeinit adds none", tc.from); len(i) != 1 {
				t.Errorf("want one line saying %q; log:\n%s", tc.from, n.Log())
			}
			if code := n.stop(); code != 0 {
				t.Errorf("nodeinit exited %d after TERM, want 0", code)
			}
		})
	}
}

func TestMissingCgroupWarnsAndRuns(t *testing.T) {
	id := randomID(t) // no cgroup made
	n := startNode(t, []string{cgroups.EnvMesosDirectory + "=/x/runs/" + id})
	executor, _ := n.waitReady()
	if !strings.Contains(n.Log(), "cgroup /mesos/"+id+" exists in none of the mounted hierarchies") {
		t.Errorf("no warning about the missing cgroup; log:\n%s", n.Log())
	}
	if strings.Contains(executor.Cgroup, id) {
		t.Errorf("executor in a cgroup that does not exist?\n%s", executor.Cgroup)
	}
	if slices.ContainsFunc(executor.Args, func(a string) bool { return strings.HasPrefix(a, "--cgroup-root") }) {
		t.Errorf("executor args %q have a --cgroup-root for a cgroup that does not exist", executor.Args)
	}
	if code := n.stop(); code != 0 {
		t.Errorf("nodeinit exited %d after TERM, want 0", code)
	}
}

func TestMissingCgroupWithRequireCgroupIsFatal(t *testing.T) {
	id := randomID(t)
	n := startNode(t, []string{cgroups.EnvMesosDirectory + "=/x/runs/" + id}, "--require-cgroup")
	if code := n.Wait(20 * time.Second); code != 1 {
		t.Errorf("nodeinit exited %d, want 1; log:\n%s", code, n.Log())
	}
	if exists(n.Path("executor.json")) || exists(n.Path("proxy.json")) {
		t.Error("a task started although the cgroup is required and missing")
	}
	if !strings.Contains(n.Log(), "exists in none of the mounted hierarchies") {
		t.Errorf("the failure does not say why; log:\n%s", n.Log())
	}
}

func TestCgroupParentWinsOverDiscovery(t *testing.T) {
	id := randomID(t)
	l := mesosCgroup(t, id)
	want := "/mesos/" + id
	n := startNode(t, []string{cgroups.EnvMesosDirectory + "=/x/runs/not-" + id}, "--cgroup-parent="+want)
	executor, proxy := n.waitReady()
	for who, text := range map[string]string{"executor": executor.Cgroup, "proxy": proxy.Cgroup} {
		for _, h := range l.Hierarchies {
			if got := inHierarchy(text, h); got != want {
				t.Errorf("%s is in %q of the %s hierarchy, want %s", who, got, h.Name(), want)
			}
		}
	}
	if !slices.Contains(executor.Args, "--cgroup-root="+want) {
		t.Errorf("executor args %q lack --cgroup-root=%s", executor.Args, want)
	}
	if code := n.stop(); code != 0 {
		t.Errorf("nodeinit exited %d after TERM, want 0", code)
	}
}
