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
	makeCgroup(t, "/"+root)
	makeCgroup(t, cg)
	k := c.startNode(t, nodeSpec{flags: []string{"--mesos-cgroup-prefix=" + root, "--require-cgroup"}, env: mesosTask(id)})
	k.waitReady(90 * time.Second)
	kubelet := k.children()["kubelet"]
	if line := cmdline(kubelet); !slices.Contains(line, "--cgroup-root="+cg) {
		t.Errorf("the kubelet runs as %q, without --cgroup-root=%s", line, cg)
	}
	for name, pid := range map[string]int{"nodeinit": k.pid(), "kubelet": kubelet} {
		checkCgroups(t, name, pid, cg, false)
	}
	static := k.waitPods("metadata.name=static-sleeper-"+nodeName, 1, 60*time.Second)
	checkCgroups(t, "the static pod's container", containerPid(t, c, static[0]), cg+"/kubepods/", true)
	t.Logf("TERM: %v", k.stopAndCheck(90*time.Second))
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
