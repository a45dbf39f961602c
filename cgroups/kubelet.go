package cgroups

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// The kubelet validates its cgroup root at start-up (its cgroup managers'
// Validate) and exits with "invalid configuration" when the check fails.
var (
	// kubeletV1 are the v1 controllers in whose mounted hierarchies the
	// cgroup root must exist ("systemd" is the name=systemd hierarchy).
	kubeletV1 = []string{"cpu", "cpuacct", "cpuset", "memory", "pids", "hugetlb", "name=systemd"}
	// kubeletV2 are the controllers that must be available in the cgroup
	// root on v2, of those the root of the hierarchy has.
	kubeletV2 = []string{"cpu", "cpuset", "memory", "hugetlb", "pids"}
)

// KubeletHierarchies are the hierarchies of l in which the kubelet looks
// for its cgroup root: on v2 the unified one; otherwise every mounted v1
// hierarchy with a controller the kubelet uses (a hybrid host's unified
// hierarchy is not one: the kubelet runs its v1 manager there).
func KubeletHierarchies(l Layout) []Hierarchy {
	var out []Hierarchy
	for _, h := range l.Hierarchies {
		if h.Unified && l.Mode() == V2 ||
			!h.Unified && slices.ContainsFunc(h.Controllers, func(c string) bool { return slices.Contains(kubeletV1, c) }) {
			out = append(out, h)
		}
	}
	return out
}

// kubeletRoot checks that the kubelet can take cgroup (an absolute path as
// /proc/self/cgroup shows it) as its cgroup root, and returns the value for
// its --cgroup-root: cgroup as the kubelet finds it below its mount points,
// which ignore what part of the hierarchy a mount shows ("/" when the
// mounts show the container's cgroup as their root). in says whether this
// process is in cgroup in a hierarchy (or in its v2 leaf). The error is one
// line naming every hierarchy that fails.
func kubeletRoot(l Layout, fsRoot, cgroup string, in func(Hierarchy) bool) (string, error) {
	hs := KubeletHierarchies(l)
	if len(hs) == 0 {
		return "", fmt.Errorf("no hierarchy the kubelet uses is mounted (%s)", names(l))
	}
	var missing, out, elsewhere []string
	roots := map[string][]string{}
	for _, h := range hs {
		rel, reaches := relCgroup(h.Root, cgroup)
		dir, _ := h.Dir(fsRoot, cgroup)
		switch {
		case !reaches || !isDir(dir):
			missing = append(missing, h.Name())
		case !in(h):
			out = append(out, h.Name())
		default:
			roots[rel] = append(roots[rel], h.Name())
		}
		if reaches && h.Root != "/" {
			elsewhere = append(elsewhere, h.Name()+" at "+h.Root)
		}
	}
	var problems []string
	if len(missing) > 0 {
		problems = append(problems, "it does not exist in the "+plural(missing, "hierarchy", "hierarchies"))
	}
	if len(out) > 0 {
		problems = append(problems, "nodeinit is not in it in the "+plural(out, "hierarchy", "hierarchies"))
	}
	if len(roots) > 1 {
		problems = append(problems, "the cgroup mounts show different parts of the hierarchies ("+strings.Join(elsewhere, ", ")+")")
	}
	if len(problems) == 0 && l.Mode() == V2 {
		if lacking, err := lackingControllers(fsRoot, hs[0], cgroup); err != nil {
			problems = append(problems, err.Error())
		} else if len(lacking) > 0 {
			problems = append(problems, "the controllers "+strings.Join(lacking, " ")+
				" are not available in it (its parent's cgroup.subtree_control does not enable them)")
		}
	}
	if len(problems) > 0 {
		return "", fmt.Errorf("cgroup %s cannot be the kubelet's cgroup root: %s; the kubelet needs it in every mounted one of the %s",
			cgroup, strings.Join(problems, "; "), kubeletNeeds(l))
	}
	// Every hierarchy passed, with one path: roots has exactly one key.
	var root string
	for rel := range roots {
		root = rel
	}
	return root, nil
}

// lackingControllers returns the controllers the kubelet needs that the
// root of the unified hierarchy h offers but cgroup does not.
func lackingControllers(fsRoot string, h Hierarchy, cgroup string) ([]string, error) {
	root := filepath.Join(fsRoot, h.Mountpoint)
	dir, _ := h.Dir(fsRoot, cgroup)
	offered, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("read the controllers of the unified hierarchy: %w", err)
	}
	available, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("read its controllers: %w", err)
	}
	var lacking []string
	for _, c := range kubeletV2 {
		if slices.Contains(strings.Fields(string(offered)), c) && !slices.Contains(strings.Fields(string(available)), c) {
			lacking = append(lacking, c)
		}
	}
	return lacking, nil
}

// kubeletNeeds says, for a message, where the kubelet looks on l.
func kubeletNeeds(l Layout) string {
	if l.Mode() == V2 {
		return "unified hierarchy, with the controllers " + strings.Join(kubeletV2, " ") + " where the hierarchy has them"
	}
	return strings.Join(kubeletV1, " ") + " hierarchies"
}

// systemdRoot returns the --cgroup-root under which a kubelet with the
// systemd cgroup driver finds cgroup (a path below its cgroup mounts). That
// driver takes the root in cgroupfs form and turns it into nested slices,
// each named after all the elements up to it, with "-" in an element
// written "_" (the kubelet's CgroupName.ToSystemd): "/a/b" is
// /a.slice/a-b.slice. A cgroup of another shape (a .scope, /mesos/<id>) is
// no root such a kubelet can be given: false.
func systemdRoot(cgroup string) (string, bool) {
	cgroup = path.Clean("/" + cgroup)
	if cgroup == "/" {
		return "/", true
	}
	var elems []string
	prefix := ""
	for e := range strings.SplitSeq(strings.TrimPrefix(cgroup, "/"), "/") {
		name, ok := strings.CutSuffix(e, ".slice")
		if !ok {
			return "", false
		}
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok || rest == "" || strings.Contains(rest, "-") {
			return "", false
		}
		elems = append(elems, strings.ReplaceAll(rest, "_", "-"))
		prefix = name + "-"
	}
	return "/" + strings.Join(elems, "/"), true
}

// systemdPath is the cgroup a kubelet with the systemd cgroup driver takes
// for its --cgroup-root root: systemdRoot's inverse.
func systemdPath(root string) string {
	root = path.Clean("/" + root)
	if root == "/" {
		return "/"
	}
	var out strings.Builder
	prefix := ""
	for e := range strings.SplitSeq(strings.TrimPrefix(root, "/"), "/") {
		prefix += strings.ReplaceAll(e, "-", "_")
		out.WriteString("/" + prefix + ".slice")
		prefix += "-"
	}
	return out.String()
}
