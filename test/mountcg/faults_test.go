package mountcg

import (
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	occgroups "github.com/opencontainers/cgroups"

	"github.com/nodeinit/nodeinit/cgroups"
	"github.com/nodeinit/nodeinit/test/testenv"
)

// A cgroupfs mounted read-only: nodeinit cannot write its pid into the
// cgroup. It warns, naming the cgroup and the read-only hierarchies and
// saying it carries on, and runs the node (in the cgroup wherever it could
// join it); with --require-cgroup it exits 1 with one line saying why.
func TestReadOnlyCgroupfs(t *testing.T) {
	tests := []struct {
		name    string
		one     bool // only the first v1 hierarchy read-only, not all
		require bool
	}{
		{name: "all hierarchies: warns and runs"},
		{name: "all hierarchies: fatal with --require-cgroup", require: true},
		{name: "one hierarchy: warns and joins the others", one: true},
		{name: "one hierarchy: fatal with --require-cgroup", one: true, require: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := layout(t)
			c := newContainer(t, l, false)
			var readOnly, names []string
			for _, h := range l.Hierarchies {
				if tt.one && (h.Unified || len(readOnly) > 0) {
					continue
				}
				readOnly = append(readOnly, h.Mountpoint)
				names = append(names, h.Name())
			}
			requireLayout(t, l, len(readOnly) > 0, "a v1 cgroup hierarchy")
			what := strings.Join(names, " ") + " hierarch"
			env := []string{cgroups.EnvMesosDirectory + "=/x/runs/" + c.id}
			if tt.require {
				n := startNodeWith(t, nodeOptions{readOnly: readOnly}, env, c.prefixFlag(), "--require-cgroup")
				n.expectFatal("Cannot join", c.cgroup, what, "mounted read-only")
				return
			}
			n := startNodeWith(t, nodeOptions{readOnly: readOnly}, env, c.prefixFlag())
			r, _ := n.waitReady()
			if w := n.Lines('W', c.cgroup, what, "mounted read-only", "carrying on"); len(w) != 1 {
				t.Errorf("want one warning naming %s, the %sies mounted read-only and that nodeinit carries on; log:\n%s",
					c.cgroup, what, n.Log())
			}
			for _, h := range l.Hierarchies {
				got, want := inHierarchy(r.Cgroup, h), c.cgroup
				if slices.Contains(readOnly, h.Mountpoint) {
					want = h.Current
				}
				if got != want {
					t.Errorf("executor in %q of the %s hierarchy, want %s", got, h.Name(), want)
				}
			}
			if code := n.stop(); code != 0 {
				t.Errorf("nodeinit exited %d after TERM, want 0", code)
			}
		})
	}
}

// The container's cgroup existed and was removed before nodeinit joins it
// (a Mesos agent that cleaned up, a race with the runtime): a warning naming
// it and nodeinit carries on; fatal with --require-cgroup.
func TestCgroupRemovedBeforeJoin(t *testing.T) {
	for _, require := range []bool{false, true} {
		name := map[bool]string{false: "warns and runs", true: "fatal with --require-cgroup"}[require]
		t.Run(name, func(t *testing.T) {
			c := newContainer(t, layout(t), false)
			for _, dir := range c.dirs {
				removeCgroup(t, dir, false)
			}
			target := c.cgroup
			env := []string{cgroups.EnvMesosDirectory + "=/var/lib/mesos/slaves/S0/frameworks/F/executors/E/runs/" + c.id}
			if !require {
				n := startNode(t, env, c.prefixFlag())
				n.expectRunning(target)
				if w := n.Lines('W', target, "exists in none", "carrying on"); len(w) == 0 {
					t.Errorf("no warning naming %s, that it exists nowhere and that nodeinit carries on; log:\n%s", target, n.Log())
				}
				return
			}
			n := startNode(t, env, c.prefixFlag(), "--require-cgroup")
			n.expectFatal("Cannot join", target, "exists in none")
		})
	}
}

// The cgroup was removed from one v1 hierarchy only: nodeinit joins it in
// the others and says where it stays in that one. A hierarchy the kubelet
// does not check (devices, blkio, freezer) leaves the cgroup usable as its
// root, also with --require-cgroup; one it checks makes the cgroup
// unusable: a warning naming it, no --cgroup-root, and with
// --require-cgroup exit 1.
func TestCgroupRemovedFromOneHierarchy(t *testing.T) {
	l := layout(t)
	kubelet := cgroups.KubeletHierarchies(l)
	var others, checked *cgroups.Hierarchy
	for i, h := range l.Hierarchies {
		switch isKubelet := slices.ContainsFunc(kubelet, func(k cgroups.Hierarchy) bool { return k.Name() == h.Name() }); {
		case h.Unified:
		case isKubelet && checked == nil:
			checked = &l.Hierarchies[i]
		case !isKubelet && others == nil:
			others = &l.Hierarchies[i]
		}
	}
	for name, gone := range map[string]*cgroups.Hierarchy{"a hierarchy the kubelet ignores": others, "a hierarchy the kubelet checks": checked} {
		t.Run(name, func(t *testing.T) {
			requireLayout(t, l, gone != nil && len(l.Hierarchies) > 1, name+" and another one")
			c := newContainer(t, l, false)
			target := c.cgroup
			removeCgroup(t, c.dirs[gone.Name()], false)
			env := []string{cgroups.EnvMesosDirectory + "=/x/runs/" + c.id}
			usable := gone == others

			n := startNode(t, env, c.prefixFlag())
			r, _ := n.waitReady()
			for _, h := range l.Hierarchies {
				got, want := inHierarchy(r.Cgroup, h), target
				if h.Name() == gone.Name() {
					want = gone.Current
				}
				if got != want {
					t.Errorf("executor in %q of the %s hierarchy, want %s", got, h.Name(), want)
				}
			}
			if i := n.Lines('I', target, "exists only in the", "staying in "+gone.Name()+":"+gone.Current+" there"); len(i) != 1 {
				t.Errorf("want one line naming %s, where nodeinit stays in the %s hierarchy; log:\n%s", target, gone.Name(), n.Log())
			}
			if i := n.Lines('I', "joined cgroup "+target); len(i) != 1 {
				t.Errorf("want one line saying nodeinit joined %s; log:\n%s", target, n.Log())
			}
			rooted := slices.Contains(r.Args, "--cgroup-root="+target)
			w := n.Lines('W', target, "cannot be the kubelet's cgroup root", "it does not exist in the "+gone.Name()+" hierarchy")
			if rooted != usable || len(w) != map[bool]int{true: 0, false: 1}[usable] || len(n.cgroupWarnings()) != len(w) {
				t.Errorf("--cgroup-root passed: %v, warnings %q; want it passed %v and a warning only if not; log:\n%s", rooted, n.cgroupWarnings(), usable, n.Log())
			}
			if code := n.stop(); code != 0 {
				t.Errorf("nodeinit exited %d after TERM, want 0", code)
			}

			n = startNode(t, env, c.prefixFlag(), "--require-cgroup")
			if usable {
				r, _ := n.waitReady()
				if !slices.Contains(r.Args, "--cgroup-root="+target) {
					t.Errorf("with --require-cgroup: executor args %q lack --cgroup-root=%s", r.Args, target)
				}
				n.stop()
				return
			}
			n.expectFatal("Cannot join", target, "cannot be the kubelet's cgroup root", gone.Name())
		})
	}
}

// A v2 cgroup that enables controllers for its children may hold no process
// itself: nodeinit, the executor and the proxy go into its leaf child
// (--cgroup-v2-leaf, default nodeinit) in the unified hierarchy and into the
// cgroup itself in the v1 ones; the log says where.
func TestV2CgroupWithControllersUsesTheLeaf(t *testing.T) {
	l := layout(t)
	h, ok := l.Unified()
	// An empty cgroup2 hierarchy can be mounted beside v1 ones: that is a
	// prerequisite, which CI must have.
	testenv.Require(t, ok, "the cgroup v2 unified hierarchy mounted")
	root, _ := h.Dir("/", "/")
	avail, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		t.Fatal(err)
	}
	ctrls := strings.Fields(string(avail))
	// On a hybrid host every controller may be bound to v1.
	requireLayout(t, l, len(ctrls) > 0, "a controller available in the unified hierarchy")
	c := newContainer(t, l, false)
	target := c.cgroup
	dir := c.dirs[h.Name()]
	enableController(t, root, ctrls[0])
	enableController(t, filepath.Dir(dir), ctrls[0])
	enableController(t, dir, ctrls[0])

	n := startNode(t, []string{cgroups.EnvMesosDirectory + "=/x/runs/" + c.id}, c.prefixFlag(), "--require-cgroup")
	r, _ := n.waitReady()
	leaf := path.Join(target, "nodeinit") // --cgroup-v2-leaf's default
	for _, hh := range l.Hierarchies {
		want := target
		if hh.Unified {
			want = leaf
		}
		if got := inHierarchy(r.Cgroup, hh); got != want {
			t.Errorf("executor in %q of the %s hierarchy, want %s", got, hh.Name(), want)
		}
	}
	if i := n.Lines('I', "joined cgroup "+target, "unified:"+leaf); len(i) != 1 {
		t.Errorf("want one line saying nodeinit joined %s, in %s on the unified hierarchy; log:\n%s", target, leaf, n.Log())
	}
	if w := n.cgroupWarnings(); len(w) != 0 {
		t.Errorf("warnings while joining a v2 cgroup with controllers: %q", w)
	}
	if code := n.stop(); code != 0 {
		t.Errorf("nodeinit exited %d after TERM, want 0", code)
	}
}

// expectRunning checks that nodeinit carried on: executor and proxy run,
// the executor in no hierarchy's target, and TERM ends nodeinit with the
// executor's 0.
func (n *node) expectRunning(target string) {
	n.t.Helper()
	r, _ := n.waitReady()
	for ctrl, cg := range cgroupLines(r.Cgroup) {
		if cg == target {
			n.t.Errorf("executor in %s in hierarchy %q, although joining it failed", cg, ctrl)
		}
	}
	if code := n.stop(); code != 0 {
		n.t.Errorf("nodeinit exited %d after TERM, want the executor's 0; log:\n%s", code, n.Log())
	}
}

// expectFatal checks that nodeinit exited 1 before starting anything, with
// exactly one error line, which holds every one of words.
func (n *node) expectFatal(words ...string) {
	n.t.Helper()
	if code := n.Wait(20 * time.Second); code != 1 {
		n.t.Errorf("nodeinit exited %d, want 1; log:\n%s", code, n.Log())
	}
	if exists(n.Path("executor.json")) || exists(n.Path("proxy.json")) {
		n.t.Error("a task started although the cgroup is required")
	}
	all, named := n.Lines('E'), n.Lines('E', words...)
	if len(all) != 1 || len(named) != 1 {
		n.t.Errorf("want one error line naming %q, got %d error lines; log:\n%s", words, len(all), n.Log())
	}
}

// container is the cgroup of a Mesos container made for one test,
// /<prefix>/<id> or, nested, /<prefix>/<parent>/mesos/<id>, under a prefix
// of its own (nodeinit gets it as --mesos-cgroup-prefix): tests that run at
// the same time, in this package or another, never share a parent that
// one of them removes.
type container struct {
	prefix, parent, id string
	cgroup             string            // /<prefix>/<id> or /<prefix>/<parent>/mesos/<id>
	dirs               map[string]string // its directory in each hierarchy, by name
}

// prefixFlag is nodeinit's flag for the container's prefix.
func (c container) prefixFlag() string { return "--mesos-cgroup-prefix=" + c.prefix }

// newContainer creates a container's cgroup in every hierarchy of l, as the
// Mesos agent would, and removes it when the test ends (after nodeinit,
// whose cleanup the test registers later and so runs first), with the v2
// leaf nodeinit may have made in it.
func newContainer(t *testing.T, l cgroups.Layout, nested bool) container {
	t.Helper()
	id := randomID(t)
	c := container{prefix: "mesos-" + id, id: id}
	paths := []string{"/" + c.prefix}
	if nested {
		c.parent = "p-" + id
		paths = append(paths, "/"+c.prefix+"/"+c.parent, "/"+c.prefix+"/"+c.parent+"/mesos")
		c.cgroup = "/" + c.prefix + "/" + c.parent + "/mesos/" + id
	} else {
		c.cgroup = "/" + c.prefix + "/" + id
	}
	c.dirs = makeCgroups(t, l, append(paths, c.cgroup)...)
	return c
}

// enableController makes ctrl available to the children of the v2 cgroup
// at dir, and takes it back at the end when it was off (the kernel refuses
// while another user's children still use it, which is fine).
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
