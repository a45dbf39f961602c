package cgroups

import (
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodeinit/nodeinit/config"
)

// FuzzDiscover feeds arbitrary Mesos variables and the --cgroup-parent and
// --mesos-cgroup-prefix that config accepts to Discover: it never panics, a
// cgroup it returns is an absolute clean path without "..", below the
// prefix and ending in the container id unless a parent names it; an id it
// returns is one path element; a Docker containerizer task joins nothing;
// and an error is one line.
func FuzzDiscover(f *testing.F) {
	f.Add("/var/lib/mesos/slaves/S1/frameworks/F/executors/E/runs/1f2e3d", "", "", "", "mesos")
	f.Add("", "/x/runs/p1/containers/c2/containers/c3", "", "", "mesos")
	f.Add("/x/runs/p1", "/mnt/mesos/sandbox", "mesos-20160204-S3.7a1b.executor", "", "mesos")
	f.Add("/x/runs/abc", "", "mesos-name", "/kubepods/node/", "mesos")
	f.Add("/x/runs/abc", "", "", "", "system.slice/mesos")
	f.Add("/x/runs/..", "", "", "", "mesos")
	f.Add("", "", "mesos-agent.", "", "mesos")
	f.Add("///", "", "", "/a/../..", "")
	f.Fuzz(func(t *testing.T, dir, sandbox, name, parent, prefix string) {
		c := config.Default()
		c.Cgroup.Parent, c.Cgroup.MesosPrefix = parent, prefix
		if len(c.Validate()) > 0 {
			return // config rejects these settings before Discover sees them
		}
		env := map[string]string{EnvMesosDirectory: dir, EnvMesosSandbox: sandbox, EnvMesosContainerName: name}
		got, err := discover(parent, prefix, func(k string) string { return env[k] })
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error of more than one line: %q", err)
			}
			return
		}
		if got.Cgroup != "" {
			if !strings.HasPrefix(got.Cgroup, "/") || path.Clean(got.Cgroup) != got.Cgroup {
				t.Errorf("cgroup %q is not an absolute clean path", got.Cgroup)
			}
			if slices.Contains(strings.Split(got.Cgroup, "/"), "..") {
				t.Errorf("cgroup %q has a .. element", got.Cgroup)
			}
			if got.Source == "" {
				t.Errorf("cgroup %q without a source", got.Cgroup)
			}
			if parent == "" && !strings.HasPrefix(got.Cgroup, "/"+strings.Trim(prefix, "/")+"/") {
				t.Errorf("cgroup %q is not below the prefix %q", got.Cgroup, prefix)
			}
		}
		if id := got.ContainerID; id != "" {
			if strings.Contains(id, "/") || id == "." || id == ".." {
				t.Errorf("container id %q is not one path element", id)
			}
			if parent == "" && !got.InOwn && !strings.HasSuffix(got.Cgroup, "/"+id) {
				t.Errorf("cgroup %q does not end in the container id %q", got.Cgroup, id)
			}
		}
		if got.InOwn && (got.Cgroup != "" || name == "") {
			t.Errorf("in its own cgroup with cgroup %q and container name %q", got.Cgroup, name)
		}
		if got.Cgroup == "" && (parent != "" || got.ContainerID != "" && !got.InOwn) {
			t.Errorf("no cgroup for parent %q and container id %q", parent, got.ContainerID)
		}
	})
}

// FuzzReadLayout reads arbitrary /proc/self/mountinfo and /proc/self/cgroup
// text from a fixture root: ReadLayout never panics, and a layout it returns
// is consistent with its inputs (each hierarchy unified or named by the
// controllers this process is in, each named once, its cgroup the one
// /proc/self/cgroup gives, its directories below its mount point).
func FuzzReadLayout(f *testing.F) {
	for _, host := range []string{"v1", "hybrid", "v2", "nested-mount", "v2-private-host-tree", "v1-private-host-tree", "v2-outside-own-namespace"} {
		mi, err := os.ReadFile(filepath.Join("testdata", host, "mountinfo"))
		if err != nil {
			f.Fatal(err)
		}
		cg, err := os.ReadFile(filepath.Join("testdata", host, "cgroup"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(mi), string(cg), "/mesos/abc")
	}
	f.Add("32 31 0:29 /a /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu,,name=x\n", "1:cpu:/a/b\n0::/\n", "/a/../b")
	root := f.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "proc/self"), 0o755); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, mountinfo, cgroup, target string) {
		for name, text := range map[string]string{"mountinfo": mountinfo, "cgroup": cgroup} {
			if err := os.WriteFile(filepath.Join(root, "proc/self", name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		l, err := ReadLayout(root)
		if err != nil {
			return
		}
		own := map[string]string{}
		for line := range strings.Lines(cgroup) {
			parts := strings.SplitN(strings.TrimSuffix(line, "\n"), ":", 3)
			for c := range strings.SplitSeq(parts[1], ",") {
				own[c] = strings.TrimSuffix(parts[2], "\r")
			}
		}
		names := map[string]bool{}
		unified := 0
		for _, h := range l.Hierarchies {
			if names[h.Name()] {
				t.Errorf("hierarchy %q appears twice", h.Name())
			}
			names[h.Name()] = true
			key := ""
			if h.Unified {
				unified++
				if len(h.Controllers) > 0 {
					t.Errorf("unified hierarchy with controllers %q", h.Controllers)
				}
			} else {
				if len(h.Controllers) == 0 || !slices.IsSorted(h.Controllers) || len(slices.Compact(slices.Clone(h.Controllers))) != len(h.Controllers) {
					t.Errorf("v1 hierarchy with controllers %q: want a sorted list of distinct names", h.Controllers)
				}
				for _, c := range h.Controllers {
					if _, ok := own[c]; !ok || c == "" {
						t.Errorf("v1 hierarchy %q names controller %q, which /proc/self/cgroup does not", h.Name(), c)
					}
				}
				if len(h.Controllers) > 0 {
					key = h.Controllers[0]
				}
			}
			if want, ok := own[key]; !ok || h.Current != want {
				t.Errorf("hierarchy %q: current cgroup %q, /proc/self/cgroup gives %q", h.Name(), h.Current, want)
			}
			base := filepath.Join(root, h.Mountpoint)
			// A mount whose root lies outside this process's cgroup
			// namespace ("/.." forms) reaches nothing it can name.
			if dir, ok := h.Dir(root, h.Root); outsideNamespace(h.Root) && ok {
				t.Errorf("hierarchy %q: the mount shows %q, outside the cgroup namespace, yet resolves it at %q", h.Name(), h.Root, dir)
			} else if !outsideNamespace(h.Root) && (!ok || dir != base) {
				t.Errorf("hierarchy %q: the mount's own cgroup %q is at %q, %v; want %q", h.Name(), h.Root, dir, ok, base)
			}
			if dir, ok := h.Dir(root, target); ok && dir != base && !strings.HasPrefix(dir, base+"/") && base != "/" {
				t.Errorf("hierarchy %q: cgroup %q at %q, outside the mount point %q", h.Name(), target, dir, base)
			}
		}
		if unified > 1 {
			t.Errorf("%d unified hierarchies", unified)
		}
		switch m := l.Mode(); {
		case len(l.Hierarchies) == 0 && m != NoCgroups,
			unified == 1 && len(l.Hierarchies) == 1 && m != V2,
			unified == 1 && len(l.Hierarchies) > 1 && m != Hybrid,
			unified == 0 && len(l.Hierarchies) > 0 && m != V1:
			t.Errorf("mode %v for %d hierarchies, %d unified", m, len(l.Hierarchies), unified)
		}
		now := cgroupsOf(l, own)
		for _, h := range l.Hierarchies {
			if now[h.Name()] != h.Current {
				t.Errorf("cgroupsOf gives %q for %q, the layout %q", now[h.Name()], h.Name(), h.Current)
			}
		}
	})
}
