package cgroups

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/moby/sys/mountinfo"
	occgroups "github.com/opencontainers/cgroups"
)

// Mode is how the cgroup hierarchies of a host are mounted.
type Mode int

const (
	// NoCgroups: no cgroup filesystem is mounted.
	NoCgroups Mode = iota
	// V1: only cgroup v1 hierarchies.
	V1
	// Hybrid: v1 hierarchies hold the controllers, plus the v2 unified
	// hierarchy (usually at /sys/fs/cgroup/unified) for process tracking.
	Hybrid
	// V2: the unified hierarchy alone.
	V2
)

func (m Mode) String() string {
	return [...]string{"no cgroups", "cgroup v1", "cgroup v1 with the v2 unified hierarchy (hybrid)", "cgroup v2"}[m]
}

// Hierarchy is one mounted cgroup hierarchy.
type Hierarchy struct {
	// Controllers of a v1 hierarchy as /proc/self/cgroup names them
	// ("cpu", "cpuacct", "name=systemd"); empty for the unified hierarchy.
	Controllers []string
	Unified     bool
	// Mountpoint is where the hierarchy is mounted; Root is the cgroup the
	// mount shows there ("/" unless a container runtime bind-mounted a
	// subtree).
	Mountpoint string
	Root       string
	// Current is this process's cgroup in the hierarchy.
	Current string
}

// Name names the hierarchy for messages: its controllers, or "unified".
func (h Hierarchy) Name() string {
	if h.Unified {
		return "unified"
	}
	return strings.Join(h.Controllers, ",")
}

// Dir returns the directory of cgroup in this hierarchy below the file
// system root fsRoot ("/" on a live system), or false when the mount does
// not reach that cgroup.
func (h Hierarchy) Dir(fsRoot, cgroup string) (string, bool) {
	rel, ok := relCgroup(h.Root, cgroup)
	if !ok {
		return "", false
	}
	return filepath.Join(fsRoot, h.Mountpoint, rel), true
}

// relCgroup returns cgroup relative to root, when it lies at or below it.
// A path outside nodeinit's cgroup namespace (outsideNamespace) lies below
// nothing nodeinit can name: Clean would turn "/../.." into "/", the
// namespace's root, which it is not.
func relCgroup(root, cgroup string) (string, bool) {
	if outsideNamespace(root) || outsideNamespace(cgroup) {
		return "", false
	}
	root, cgroup = path.Clean("/"+root), path.Clean("/"+cgroup)
	if root == "/" {
		return cgroup, true
	}
	if cgroup == root {
		return "/", true
	}
	rest, ok := strings.CutPrefix(cgroup, root+"/")
	return "/" + rest, ok
}

// outsideNamespace reports whether p, a cgroup path as the kernel shows it
// to this process (a mount's root in /proc/self/mountinfo, a cgroup in
// /proc/self/cgroup), lies outside the root of this process's cgroup
// namespace. The kernel writes such a path relative to the namespace's
// root, with one "/.." for each level up to the closest common ancestor
// and then the names down from it (kernfs_path_from_node, which
// cgroup_show_path and /proc/<pid>/cgroup use): "/../.." is an ancestor of
// the root, "/../x" beside it. No other path has a ".." element.
func outsideNamespace(p string) bool {
	return slices.Contains(strings.Split(p, "/"), "..")
}

// Layout is the set of cgroup hierarchies this process can see.
type Layout struct {
	Hierarchies []Hierarchy
}

// Mode says how the hierarchies are arranged.
func (l Layout) Mode() Mode {
	var v1, unified bool
	for _, h := range l.Hierarchies {
		if h.Unified {
			unified = true
		} else {
			v1 = true
		}
	}
	switch {
	case v1 && unified:
		return Hybrid
	case v1:
		return V1
	case unified:
		return V2
	}
	return NoCgroups
}

// Unified returns the v2 unified hierarchy, if it is mounted.
func (l Layout) Unified() (Hierarchy, bool) {
	for _, h := range l.Hierarchies {
		if h.Unified {
			return h, true
		}
	}
	return Hierarchy{}, false
}

// ReadLayout reads the mounted cgroup hierarchies and this process's place in
// each from proc/self/mountinfo and proc/self/cgroup below fsRoot ("/" on a
// live system, a fixture directory in tests).
func ReadLayout(fsRoot string) (Layout, error) {
	f, err := os.Open(filepath.Join(fsRoot, "proc/self/mountinfo"))
	if err != nil {
		return Layout{}, fmt.Errorf("find the cgroup mounts: %w", err)
	}
	defer f.Close()
	mounts, err := mountinfo.GetMountsFromReader(f, mountinfo.FSTypeFilter("cgroup", "cgroup2"))
	if err != nil {
		return Layout{}, fmt.Errorf("find the cgroup mounts in %s: %w", f.Name(), err)
	}
	own, err := occgroups.ParseCgroupFile(filepath.Join(fsRoot, "proc/self/cgroup"))
	if err != nil {
		return Layout{}, fmt.Errorf("find this process's cgroups: %w", err)
	}
	return layoutOf(mounts, own), nil
}

// layoutOf pairs every cgroup mount with this process's cgroup in it. own
// maps a controller ("" for the unified hierarchy) to a cgroup path, as
// ParseCgroupFile returns it. A hierarchy mounted twice counts once (the
// first mount); a mount of a hierarchy this process is not in (absent from
// own) is left out.
func layoutOf(mounts []*mountinfo.Info, own map[string]string) Layout {
	var l Layout
	seen := map[string]bool{}
	for _, m := range mounts {
		var h Hierarchy
		switch m.FSType {
		case "cgroup2":
			h.Unified = true
		case "cgroup":
			for o := range strings.SplitSeq(m.VFSOptions, ",") {
				// "" is the unified hierarchy's key in own, never a
				// v1 controller.
				if _, ok := own[o]; ok && o != "" && !slices.Contains(h.Controllers, o) {
					h.Controllers = append(h.Controllers, o)
				}
			}
			if len(h.Controllers) == 0 {
				continue
			}
			sort.Strings(h.Controllers)
		default:
			continue
		}
		key := h.Name()
		if seen[key] {
			continue
		}
		current, ok := own[""]
		if !h.Unified {
			current, ok = own[h.Controllers[0]]
		}
		if !ok {
			continue
		}
		seen[key] = true
		h.Mountpoint, h.Root, h.Current = m.Mountpoint, m.Root, current
		l.Hierarchies = append(l.Hierarchies, h)
	}
	return l
}

// cgroupsOf returns the cgroup of every hierarchy of l in a fresh reading of
// /proc/self/cgroup (own, as ParseCgroupFile returns it), by hierarchy name.
func cgroupsOf(l Layout, own map[string]string) map[string]string {
	out := map[string]string{}
	for _, h := range l.Hierarchies {
		key := ""
		if !h.Unified {
			key = h.Controllers[0]
		}
		if p, ok := own[key]; ok {
			out[h.Name()] = p
		}
	}
	return out
}

// hasController reports whether the space-separated list (the text of
// cgroup.subtree_control) names any controller.
func hasController(list string) bool {
	return len(strings.Fields(list)) > 0
}
