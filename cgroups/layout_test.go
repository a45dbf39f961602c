package cgroups

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// fakeRoot makes a file system root holding the proc/self/mountinfo and
// proc/self/cgroup of the fixture host, and the cgroup directories dirs
// (with the cgroup.subtree_control text control, when given) below it.
func fakeRoot(t *testing.T, host string, dirs []string, control map[string]string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "proc/self"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"mountinfo", "cgroup"} {
		b, err := os.ReadFile(filepath.Join("testdata", host, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "proc/self", f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for d, text := range control {
		if err := os.WriteFile(filepath.Join(root, d, "cgroup.subtree_control"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestReadLayoutOfFixtureHosts(t *testing.T) {
	tests := []struct {
		host string
		mode Mode
		want []Hierarchy
	}{
		{"v1", V1, []Hierarchy{
			{Controllers: []string{"name=systemd"}, Mountpoint: "/sys/fs/cgroup/systemd", Root: "/", Current: "/system.slice/mesos-agent.service"},
			{Controllers: []string{"cpu", "cpuacct"}, Mountpoint: "/sys/fs/cgroup/cpu,cpuacct", Root: "/", Current: "/system.slice/mesos-agent.service"},
			{Controllers: []string{"memory"}, Mountpoint: "/sys/fs/cgroup/memory", Root: "/", Current: "/system.slice/mesos-agent.service"},
			{Controllers: []string{"pids"}, Mountpoint: "/sys/fs/cgroup/pids", Root: "/", Current: "/system.slice/mesos-agent.service"},
		}},
		{"hybrid", Hybrid, []Hierarchy{
			{Controllers: []string{"cpu"}, Mountpoint: "/sys/fs/cgroup/cpu", Root: "/", Current: "/"},
			{Controllers: []string{"cpuacct"}, Mountpoint: "/sys/fs/cgroup/cpuacct", Root: "/", Current: "/"},
			{Controllers: []string{"memory"}, Mountpoint: "/sys/fs/cgroup/memory", Root: "/", Current: "/process_api/7c2e52c8940bbfe6b6af35d25c3bef79"},
			{Controllers: []string{"name=systemd"}, Mountpoint: "/sys/fs/cgroup/systemd", Root: "/", Current: "/"},
			{Unified: true, Mountpoint: "/sys/fs/cgroup/unified", Root: "/", Current: "/"},
		}},
		{"v2", V2, []Hierarchy{
			{Unified: true, Mountpoint: "/sys/fs/cgroup", Root: "/", Current: "/"},
		}},
		{"nested-mount", V1, []Hierarchy{
			{Controllers: []string{"cpu"}, Mountpoint: "/sys/fs/cgroup/cpu", Root: "/docker/abc", Current: "/docker/abc"},
			{Controllers: []string{"memory"}, Mountpoint: "/sys/fs/cgroup/memory", Root: "/mesos", Current: "/mesos/c1"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			l, err := ReadLayout(fakeRoot(t, tt.host, nil, nil))
			if err != nil {
				t.Fatal(err)
			}
			if l.Mode() != tt.mode {
				t.Errorf("mode %v, want %v", l.Mode(), tt.mode)
			}
			if !reflect.DeepEqual(l.Hierarchies, tt.want) {
				t.Errorf("hierarchies:\n got %+v\nwant %+v", l.Hierarchies, tt.want)
			}
		})
	}
}

func TestReadLayoutFailsWithoutProc(t *testing.T) {
	if _, err := ReadLayout(t.TempDir()); err == nil {
		t.Fatal("no error for a root without proc/self/mountinfo")
	}
}

func TestPlanJoin(t *testing.T) {
	type want struct {
		hierarchy, cgroup, dir, missing string
		createLeaf                      bool
	}
	tests := []struct {
		name    string
		host    string
		cgroup  string
		dirs    []string
		control map[string]string
		offered map[string]string // cgroup.controllers by directory
		// kubeletRoot: the cgroup is to be the kubelet's cgroup root.
		kubeletRoot bool
		want        []want
	}{
		{name: "v1: joins where the cgroup exists, names the others",
			host: "v1", cgroup: "/mesos/abc",
			dirs: []string{"sys/fs/cgroup/cpu,cpuacct/mesos/abc", "sys/fs/cgroup/memory/mesos/abc", "sys/fs/cgroup/pids/mesos/abc"},
			want: []want{
				{hierarchy: "name=systemd", cgroup: "/mesos/abc", missing: "cgroup /mesos/abc does not exist in the name=systemd hierarchy"},
				{hierarchy: "cpu,cpuacct", cgroup: "/mesos/abc", dir: "sys/fs/cgroup/cpu,cpuacct/mesos/abc"},
				{hierarchy: "memory", cgroup: "/mesos/abc", dir: "sys/fs/cgroup/memory/mesos/abc"},
				{hierarchy: "pids", cgroup: "/mesos/abc", dir: "sys/fs/cgroup/pids/mesos/abc"},
			}},
		{name: "hybrid: v1 and unified, no controllers in unified",
			host: "hybrid", cgroup: "/mesos/p/mesos/c",
			dirs: []string{"sys/fs/cgroup/cpu/mesos/p/mesos/c", "sys/fs/cgroup/cpuacct/mesos/p/mesos/c", "sys/fs/cgroup/memory/mesos/p/mesos/c",
				"sys/fs/cgroup/systemd/mesos/p/mesos/c", "sys/fs/cgroup/unified/mesos/p/mesos/c"},
			control: map[string]string{"sys/fs/cgroup/unified/mesos/p/mesos/c": "\n"},
			want: []want{
				{hierarchy: "cpu", cgroup: "/mesos/p/mesos/c", dir: "sys/fs/cgroup/cpu/mesos/p/mesos/c"},
				{hierarchy: "cpuacct", cgroup: "/mesos/p/mesos/c", dir: "sys/fs/cgroup/cpuacct/mesos/p/mesos/c"},
				{hierarchy: "memory", cgroup: "/mesos/p/mesos/c", dir: "sys/fs/cgroup/memory/mesos/p/mesos/c"},
				{hierarchy: "name=systemd", cgroup: "/mesos/p/mesos/c", dir: "sys/fs/cgroup/systemd/mesos/p/mesos/c"},
				{hierarchy: "unified", cgroup: "/mesos/p/mesos/c", dir: "sys/fs/cgroup/unified/mesos/p/mesos/c"},
			}},
		{name: "v2: controllers enabled below the cgroup: a new leaf",
			host: "v2", cgroup: "/mesos/abc", dirs: []string{"sys/fs/cgroup/mesos/abc"},
			control: map[string]string{"sys/fs/cgroup/mesos/abc": "cpu memory pids\n"},
			want:    []want{{hierarchy: "unified", cgroup: "/mesos/abc/leaf", dir: "sys/fs/cgroup/mesos/abc/leaf", createLeaf: true}},
		},
		{name: "v2: an existing leaf is reused",
			host: "v2", cgroup: "/mesos/abc", dirs: []string{"sys/fs/cgroup/mesos/abc/leaf"},
			control: map[string]string{"sys/fs/cgroup/mesos/abc": "memory\n"},
			want:    []want{{hierarchy: "unified", cgroup: "/mesos/abc/leaf", dir: "sys/fs/cgroup/mesos/abc/leaf"}},
		},
		{name: "v2: no controllers enabled: the cgroup itself",
			host: "v2", cgroup: "/mesos/abc", dirs: []string{"sys/fs/cgroup/mesos/abc"},
			control: map[string]string{"sys/fs/cgroup/mesos/abc": ""},
			want:    []want{{hierarchy: "unified", cgroup: "/mesos/abc", dir: "sys/fs/cgroup/mesos/abc"}},
		},
		{name: "v2: controllers offered, none enabled yet, the kubelet's root: a new leaf, so that the kubelet can enable them for its pods",
			host: "v2", cgroup: "/mesos/abc", dirs: []string{"sys/fs/cgroup/mesos/abc"},
			control: map[string]string{"sys/fs/cgroup/mesos/abc": ""},
			offered: map[string]string{"sys/fs/cgroup/mesos/abc": "cpu memory pids\n"}, kubeletRoot: true,
			want: []want{{hierarchy: "unified", cgroup: "/mesos/abc/leaf", dir: "sys/fs/cgroup/mesos/abc/leaf", createLeaf: true}},
		},
		{name: "v2: controllers offered, none enabled yet, no kubelet's root (a --cgroup-parent join): the cgroup itself, no new cgroup",
			host: "v2", cgroup: "/nodes.slice/nodes-node1.slice", dirs: []string{"sys/fs/cgroup/nodes.slice/nodes-node1.slice"},
			control: map[string]string{"sys/fs/cgroup/nodes.slice/nodes-node1.slice": ""},
			offered: map[string]string{"sys/fs/cgroup/nodes.slice/nodes-node1.slice": "cpu memory pids\n"},
			want:    []want{{hierarchy: "unified", cgroup: "/nodes.slice/nodes-node1.slice", dir: "sys/fs/cgroup/nodes.slice/nodes-node1.slice"}},
		},
		{name: "v2: controllers enabled, no kubelet's root: the leaf all the same, which v2 requires",
			host: "v2", cgroup: "/mesos/abc", dirs: []string{"sys/fs/cgroup/mesos/abc"},
			control: map[string]string{"sys/fs/cgroup/mesos/abc": "memory\n"},
			offered: map[string]string{"sys/fs/cgroup/mesos/abc": "cpu memory pids\n"},
			want:    []want{{hierarchy: "unified", cgroup: "/mesos/abc/leaf", dir: "sys/fs/cgroup/mesos/abc/leaf", createLeaf: true}},
		},
		{name: "v2: nothing offered, the kubelet's root: the cgroup itself",
			host: "v2", cgroup: "/mesos/abc", dirs: []string{"sys/fs/cgroup/mesos/abc"},
			control: map[string]string{"sys/fs/cgroup/mesos/abc": ""},
			offered: map[string]string{"sys/fs/cgroup/mesos/abc": "\n"}, kubeletRoot: true,
			want: []want{{hierarchy: "unified", cgroup: "/mesos/abc", dir: "sys/fs/cgroup/mesos/abc"}},
		},
		{name: "hybrid: a controller offered in the unified hierarchy, whose cgroups the kubelet does not make: the cgroup itself",
			host: "hybrid", cgroup: "/mesos/abc", kubeletRoot: true,
			dirs: []string{"sys/fs/cgroup/cpu/mesos/abc", "sys/fs/cgroup/cpuacct/mesos/abc", "sys/fs/cgroup/memory/mesos/abc",
				"sys/fs/cgroup/systemd/mesos/abc", "sys/fs/cgroup/unified/mesos/abc"},
			control: map[string]string{"sys/fs/cgroup/unified/mesos/abc": ""},
			offered: map[string]string{"sys/fs/cgroup/unified/mesos/abc": "hugetlb\n"},
			want: []want{
				{hierarchy: "cpu", cgroup: "/mesos/abc", dir: "sys/fs/cgroup/cpu/mesos/abc"},
				{hierarchy: "cpuacct", cgroup: "/mesos/abc", dir: "sys/fs/cgroup/cpuacct/mesos/abc"},
				{hierarchy: "memory", cgroup: "/mesos/abc", dir: "sys/fs/cgroup/memory/mesos/abc"},
				{hierarchy: "name=systemd", cgroup: "/mesos/abc", dir: "sys/fs/cgroup/systemd/mesos/abc"},
				{hierarchy: "unified", cgroup: "/mesos/abc", dir: "sys/fs/cgroup/unified/mesos/abc"},
			}},
		{name: "v2: missing",
			host: "v2", cgroup: "/mesos/abc",
			want: []want{{hierarchy: "unified", cgroup: "/mesos/abc", missing: "cgroup /mesos/abc does not exist in the unified hierarchy"}},
		},
		{name: "bind-mounted subtrees: reachable only below their root",
			host: "nested-mount", cgroup: "/mesos/c1", dirs: []string{"sys/fs/cgroup/memory/c1"},
			want: []want{
				{hierarchy: "cpu", cgroup: "/mesos/c1", missing: "shows only cgroup /docker/abc, which does not contain /mesos/c1"},
				{hierarchy: "memory", cgroup: "/mesos/c1", dir: "sys/fs/cgroup/memory/c1"},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := fakeRoot(t, tt.host, tt.dirs, tt.control)
			for d, text := range tt.offered {
				if err := os.WriteFile(filepath.Join(root, d, "cgroup.controllers"), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			l, err := ReadLayout(root)
			if err != nil {
				t.Fatal(err)
			}
			steps := planJoin(l, root, tt.cgroup, "leaf", tt.kubeletRoot)
			if len(steps) != len(tt.want) {
				t.Fatalf("%d steps, want %d: %+v", len(steps), len(tt.want), steps)
			}
			for i, s := range steps {
				w := tt.want[i]
				dir := ""
				if s.Dir != "" {
					rel, err := filepath.Rel(root, s.Dir)
					if err != nil {
						t.Fatal(err)
					}
					dir = rel
				}
				if s.Hierarchy.Name() != w.hierarchy || s.Cgroup != w.cgroup || dir != w.dir || s.CreateLeaf != w.createLeaf {
					t.Errorf("step %d: got %s %s dir %q leaf %v, want %s %s dir %q leaf %v",
						i, s.Hierarchy.Name(), s.Cgroup, dir, s.CreateLeaf, w.hierarchy, w.cgroup, w.dir, w.createLeaf)
				}
				if (s.Missing == "") != (w.missing == "") || !strings.Contains(s.Missing, w.missing) {
					t.Errorf("step %d: missing %q, want %q", i, s.Missing, w.missing)
				}
			}
		})
	}
}

func TestEvacuateByDefault(t *testing.T) {
	v2root := Layout{Hierarchies: []Hierarchy{{Unified: true, Mountpoint: "/sys/fs/cgroup", Root: "/", Current: "/"}}}
	v2child := Layout{Hierarchies: []Hierarchy{{Unified: true, Mountpoint: "/sys/fs/cgroup", Root: "/", Current: "/init"}}}
	hybrid := Layout{Hierarchies: []Hierarchy{
		{Controllers: []string{"cpu"}, Mountpoint: "/sys/fs/cgroup/cpu", Root: "/", Current: "/"},
		{Unified: true, Mountpoint: "/sys/fs/cgroup/unified", Root: "/", Current: "/"},
	}}
	tests := []struct {
		name   string
		pid    int
		layout Layout
		want   bool
	}{
		{"PID 1 at the v2 namespace root", 1, v2root, true},
		{"not PID 1", 42, v2root, false},
		{"PID 1 below the root", 1, v2child, false},
		{"PID 1 on a hybrid host", 1, hybrid, false},
		{"PID 1 without cgroups", 1, Layout{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := evacuateByDefault(tt.pid, tt.layout); got != tt.want {
				t.Errorf("EvacuateByDefault = %v, want %v", got, tt.want)
			}
		})
	}
}
