//go:build k8s

package k8s

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/cgroups"
)

// mesosTask is the environment the Mesos containerizer gives a task of
// container id: its sandbox, .../runs/<id>.
func mesosTask(id string) []string {
	return []string{"MESOS_DIRECTORY=/var/lib/mesos/slaves/S0/frameworks/F0/executors/E0/runs/" + id}
}

// A Mesos containerizer task whose container cgroup /<root>/<id> exists in
// every hierarchy: nodeinit joins it and hands it to the real kubelet as its
// cgroup root, which the kubelet accepts; the pods run below it.
func TestNodeInAMesosContainerCgroup(t *testing.T) {
	c := getCluster(t)
	root, id := fmt.Sprintf("mesos-k8s-%d", os.Getpid()), "3f1e2d0c-node"
	cg := "/" + root + "/" + id
	l, err := cgroups.ReadLayout("/")
	must(t, err)
	makeCgroup(t, "/"+root)
	if l.Mode() == cgroups.V2 {
		// As the agent's cgroups2 isolator does: the container's cgroup
		// gets the controllers, and hands them on to its children.
		enableKubeletControllers(t, l, "/")
		enableKubeletControllers(t, l, "/"+root)
		makeCgroup(t, cg)
		enableKubeletControllers(t, l, cg)
	} else {
		makeCgroup(t, cg)
	}
	k := c.startNode(t, nodeSpec{flags: []string{"--mesos-cgroup-prefix=" + root, "--require-cgroup"}, env: mesosTask(id)})
	k.waitReady(90 * time.Second)
	kubelet := k.children()["kubelet"]
	if line := cmdline(kubelet); !slices.Contains(line, "--cgroup-root="+cg) {
		t.Errorf("the kubelet runs as %q, without --cgroup-root=%s", line, cg)
	}
	for name, pid := range map[string]int{"nodeinit": k.pid(), "kubelet": kubelet} {
		checkMesosCgroup(t, l, name, pid, cg, false)
	}
	static := k.waitPods("metadata.name=static-sleeper-"+nodeName, 1, 60*time.Second)
	checkMesosCgroup(t, l, "the static pod's container", containerPid(t, c, static[0]), cg+"/kubepods/", true)
	t.Logf("TERM: %v", k.stopAndCheck(90*time.Second))
}

// checkMesosCgroup checks that pid is in cgroup prefix (exactly, or below it
// with below) in every hierarchy of l the kubelet manages, and on a host
// with the unified hierarchy in that one too: on cgroup v2 it is the only
// one, and a process that has joined cgroup lives in cgroup itself or, when
// cgroup hands controllers on, in a leaf below it (nodeinit's
// --cgroup-v2-leaf).
func checkMesosCgroup(t *testing.T, l cgroups.Layout, name string, pid int, prefix string, below bool) {
	t.Helper()
	if l.Mode() != cgroups.V2 {
		checkCgroups(t, name, pid, prefix, below)
	}
	if _, ok := l.Unified(); !ok || l.Mode() != cgroups.V2 && below {
		// A hybrid host's kubelet runs its v1 manager: pods have no
		// place of their own in the unified hierarchy there.
		return
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	must(t, err)
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		if cg, ok := strings.CutPrefix(line, "0::"); ok {
			if cg != prefix && !strings.HasPrefix(cg, strings.TrimSuffix(prefix, "/")+"/") {
				t.Errorf("%s (pid %d) is in %s of the unified hierarchy; want %s or below", name, pid, cg, prefix)
			}
			return
		}
	}
	t.Errorf("%s (pid %d) is in no cgroup of the unified hierarchy: %q", name, pid, b)
}

// enableKubeletControllers enables for the children of cgroup, in the
// unified hierarchy of a cgroup v2 host, each controller the kubelet needs
// that the cgroup has.
func enableKubeletControllers(t *testing.T, l cgroups.Layout, cgroup string) {
	t.Helper()
	h, _ := l.Unified()
	dir, ok := h.Dir("/", cgroup)
	if !ok {
		t.Fatalf("cgroup %s is outside the unified hierarchy's mount", cgroup)
	}
	have, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	must(t, err)
	var enable []string
	for _, c := range []string{"cpu", "cpuset", "memory", "hugetlb", "pids"} {
		if slices.Contains(strings.Fields(string(have)), c) {
			enable = append(enable, "+"+c)
		}
	}
	must(t, os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(strings.Join(enable, " ")), 0o644))
}

// With the agent's default isolation (posix/cpu,posix/mem) the container's
// cgroup exists in the freezer and name=systemd hierarchies only: nodeinit
// joins it there, says which hierarchies the kubelet would miss, and hands
// it no cgroup root; the real kubelet starts with its own default.
func TestNodeInAMesosContainerWithTheDefaultIsolation(t *testing.T) {
	c := getCluster(t)
	root, id := fmt.Sprintf("mesos-k8s-%d", os.Getpid()), "5a6b7c8d-node"
	cg := "/" + root + "/" + id
	l, err := cgroups.ReadLayout("/")
	must(t, err)
	// The default isolation is a v1 matter: on a host without these
	// hierarchies (cgroup v2 alone) the case does not arise, and no package
	// could add them. TestNodeInAMesosContainerCgroup covers the unified
	// hierarchy.
	var lacking []string
	for _, ctrl := range []string{"freezer", "name=systemd"} {
		if !slices.ContainsFunc(l.Hierarchies, func(h cgroups.Hierarchy) bool { return slices.Contains(h.Controllers, ctrl) }) {
			lacking = append(lacking, ctrl)
		}
	}
	if len(lacking) > 0 {
		t.Skipf("the Mesos agent's default isolation puts a container's cgroup in the v1 freezer and name=systemd hierarchies; this host (%s) mounts no %s hierarchy",
			l.Mode(), strings.Join(lacking, " or "))
	}
	trackCgroup(root) // removed and checked with the node's
	var made []string
	for _, h := range l.Hierarchies {
		if !slices.Contains(h.Controllers, "freezer") && !slices.Contains(h.Controllers, "name=systemd") {
			continue
		}
		if dir, ok := h.Dir("/", cg); ok {
			must(t, os.MkdirAll(dir, 0o755))
			made = append(made, h.Name())
		}
	}
	if len(made) != 2 {
		t.Fatalf("made %s in %v, want the freezer and name=systemd hierarchies", cg, made)
	}
	k := c.startNode(t, nodeSpec{flags: []string{"--mesos-cgroup-prefix=" + root}, env: mesosTask(id)})
	k.waitReady(90 * time.Second)
	kubelet := k.children()["kubelet"]
	if line := strings.Join(cmdline(kubelet), " "); strings.Contains(line, "--cgroup-root") {
		t.Errorf("the kubelet got a cgroup root it cannot use: %s", line)
	}
	warning := k.waitLog(0, 0, cg, "cannot be the kubelet's cgroup root")
	for _, missing := range []string{"cpu", "memory", "pids"} {
		if !strings.Contains(warning.text, missing) {
			t.Errorf("the log does not name the missing %s hierarchy: %s", missing, warning.text)
		}
	}
	own, err := os.ReadFile(filepath.Join("/proc", fmt.Sprint(kubelet), "cgroup"))
	must(t, err)
	if !strings.Contains(string(own), ":freezer:"+cg) {
		t.Errorf("the kubelet is not in %s in the freezer hierarchy:\n%s", cg, own)
	}
	t.Logf("TERM: %v", k.stopAndCheck(90*time.Second))
}
