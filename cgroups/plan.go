package cgroups

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
)

// step is what joining a cgroup means in one hierarchy.
type step struct {
	Hierarchy Hierarchy
	// Cgroup is the cgroup to write the pid into: the target, or its leaf
	// on v2 when the target hands controllers to its children.
	Cgroup string
	// Dir is Cgroup's directory; empty when the cgroup is not there.
	Dir string
	// CreateLeaf says the leaf directory does not exist yet.
	CreateLeaf bool
	// Missing explains why the hierarchy is skipped, when it is.
	Missing string
}

// planJoin decides, for every hierarchy of l, where joining cgroup leads,
// looking at the cgroup directories below fsRoot ("/" on a live system).
// A v1 hierarchy joins the cgroup where it exists. The unified hierarchy
// does too, unless the cgroup's cgroup.subtree_control enables a controller:
// a process may not live in such a cgroup on v2 (docs/design.md, rule 5), so
// the plan uses the leaf child <cgroup>/<leaf> instead. With kubeletRoot
// (the cgroup is to be the kubelet's --cgroup-root) on a pure v2 host the
// leaf is used too where the cgroup offers a controller (its
// cgroup.controllers) that it does not enable yet: the kubelet takes a root
// that offers the controllers it needs and enables them there for its pods'
// cgroups, which the kernel refuses (EBUSY) while nodeinit, the kubelet and
// the proxy live in it. Without it the cgroup itself is joined: nodeinit
// makes no cgroup that nothing needs (a runtime's cgroup is joined as the
// runtime made it).
func planJoin(l Layout, fsRoot, cgroup, leaf string, kubeletRoot bool) []step {
	var steps []step
	for _, h := range l.Hierarchies {
		s := step{Hierarchy: h, Cgroup: cgroup}
		dir, ok := h.Dir(fsRoot, cgroup)
		switch {
		case !ok:
			s.Missing = fmt.Sprintf("the %s hierarchy at %s shows only cgroup %s, which does not contain %s", h.Name(), h.Mountpoint, h.Root, cgroup)
		case !isDir(dir):
			s.Missing = fmt.Sprintf("cgroup %s does not exist in the %s hierarchy (no directory %s)", cgroup, h.Name(), dir)
		default:
			s.Dir = dir
		}
		if s.Dir != "" && h.Unified {
			control, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
			enables := err == nil && hasController(string(control))
			offered, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
			offers := kubeletRoot && err == nil && hasController(string(offered)) && l.Mode() == V2
			if enables || offers {
				s.Cgroup = path.Join(cgroup, leaf)
				s.Dir = filepath.Join(dir, leaf)
				s.CreateLeaf = !isDir(s.Dir)
			}
		}
		steps = append(steps, s)
	}
	return steps
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
