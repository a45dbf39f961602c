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

func TestNodeinitExecutorAndProxyJoinTheMesosCgroup(t *testing.T) {
	for name, envOf := range map[string]func(id string) string{
		"MESOS_DIRECTORY": func(id string) string {
			return cgroups.EnvMesosDirectory + "=/var/lib/mesos/slaves/S0/frameworks/F/executors/E/runs/" + id
		},
		"MESOS_CONTAINER_NAME": func(id string) string { return cgroups.EnvMesosContainerName + "=mesos-" + id },
	} {
		t.Run(name, func(t *testing.T) {
			id := randomID(t)
			l := mesosCgroup(t, id)
			n := startNode(t, []string{envOf(id)})
			executor, proxy := n.waitReady()
			pid := n.Pid()
			want := "/mesos/" + id
			for who, text := range map[string]string{
				"nodeinit": readProc(t, pid, "cgroup"), "executor": executor.Cgroup, "proxy": proxy.Cgroup,
			} {
				for _, h := range l.Hierarchies {
					if got := inHierarchy(text, h); got != want {
						t.Errorf("%s is in %q of the %s hierarchy, want %s", who, got, h.Name(), want)
					}
				}
			}
			if !slices.Contains(executor.Args, "--cgroup-root="+want) {
				t.Errorf("executor args %q lack --cgroup-root=%s", executor.Args, want)
			}
			if !slices.Contains(executor.Env, "MESOS_EXECUTOR_CONTAINER_UUID="+id) {
				t.Errorf("executor environment lacks MESOS_EXECUTOR_CONTAINER_UUID=%s", id)
			}
			if code := n.stop(); code != 0 {
				t.Errorf("nodeinit exited %d after TERM, want the executor's 0", code)
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
