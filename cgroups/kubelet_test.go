package cgroups

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestKubeletHierarchies(t *testing.T) {
	for host, want := range map[string][]string{
		"v1":     {"name=systemd", "cpu,cpuacct", "memory", "pids"},
		"hybrid": {"cpu", "cpuacct", "memory", "name=systemd"}, // not the unified one: the kubelet runs v1 there
		"v2":     {"unified"},
	} {
		l, err := ReadLayout(fakeRoot(t, host, nil, nil))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, h := range KubeletHierarchies(l) {
			got = append(got, h.Name())
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: %q, want %q", host, got, want)
		}
	}
}

func TestKubeletRoot(t *testing.T) {
	all := func(Hierarchy) bool { return true }
	tests := []struct {
		name     string
		host     string
		cgroup   string
		dirs     []string
		files    map[string]string // cgroup.controllers and the like, by path below the root
		in       func(Hierarchy) bool
		want     string
		wantErrs []string
	}{
		{name: "v1: in every hierarchy", host: "v1", cgroup: "/mesos/abc",
			dirs: []string{"sys/fs/cgroup/systemd/mesos/abc", "sys/fs/cgroup/cpu,cpuacct/mesos/abc", "sys/fs/cgroup/memory/mesos/abc", "sys/fs/cgroup/pids/mesos/abc"},
			in:   all, want: "/mesos/abc"},
		{name: "v1: in name=systemd only, as with the agent's default isolation", host: "v1", cgroup: "/mesos/abc",
			dirs: []string{"sys/fs/cgroup/systemd/mesos/abc"}, in: all,
			wantErrs: []string{"cgroup /mesos/abc cannot be the kubelet's cgroup root: it does not exist in the cpu,cpuacct memory pids hierarchies;",
				"the kubelet needs it in every mounted one of the cpu cpuacct cpuset memory pids hugetlb name=systemd hierarchies"}},
		{name: "v1: a hierarchy nodeinit is not in", host: "v1", cgroup: "/mesos/abc",
			dirs:     []string{"sys/fs/cgroup/systemd/mesos/abc", "sys/fs/cgroup/cpu,cpuacct/mesos/abc", "sys/fs/cgroup/memory/mesos/abc", "sys/fs/cgroup/pids/mesos/abc"},
			in:       func(h Hierarchy) bool { return h.Name() != "memory" },
			wantErrs: []string{"nodeinit is not in it in the memory hierarchy"}},
		{name: "hybrid: the unified hierarchy is not the kubelet's", host: "hybrid", cgroup: "/mesos/p/mesos/c",
			dirs: []string{"sys/fs/cgroup/cpu/mesos/p/mesos/c", "sys/fs/cgroup/cpuacct/mesos/p/mesos/c", "sys/fs/cgroup/memory/mesos/p/mesos/c", "sys/fs/cgroup/systemd/mesos/p/mesos/c"},
			in:   all, want: "/mesos/p/mesos/c"},
		{name: "Docker on v1: the mounts show the container's cgroup as their root", host: "docker-v1", cgroup: "/docker/4f1e",
			dirs: []string{"sys/fs/cgroup/systemd", "sys/fs/cgroup/cpu,cpuacct", "sys/fs/cgroup/memory", "sys/fs/cgroup/pids"},
			in:   all, want: "/"},
		{name: "mounts of different subtrees", host: "nested-mount", cgroup: "/mesos/c1",
			dirs: []string{"sys/fs/cgroup/memory/c1"}, in: all,
			wantErrs: []string{"it does not exist in the cpu hierarchy"}},
		{name: "v2: every controller the kubelet needs", host: "v2", cgroup: "/mesos/abc",
			dirs:  []string{"sys/fs/cgroup/mesos/abc"},
			files: map[string]string{"sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory pids\n", "sys/fs/cgroup/mesos/abc/cgroup.controllers": "cpuset cpu memory pids\n"},
			in:    all, want: "/mesos/abc"},
		{name: "v2: controllers not enabled for it", host: "v2", cgroup: "/mesos/abc",
			dirs:     []string{"sys/fs/cgroup/mesos/abc"},
			files:    map[string]string{"sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory hugetlb pids\n", "sys/fs/cgroup/mesos/abc/cgroup.controllers": "memory\n"},
			in:       all,
			wantErrs: []string{"the controllers cpu cpuset hugetlb pids are not available in it", "unified hierarchy, with the controllers"}},
		{name: "v2: missing", host: "v2", cgroup: "/mesos/abc", in: all,
			wantErrs: []string{"it does not exist in the unified hierarchy"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := fakeRoot(t, tt.host, tt.dirs, nil)
			for f, text := range tt.files {
				if err := os.WriteFile(filepath.Join(root, f), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			l, err := ReadLayout(root)
			if err != nil {
				t.Fatal(err)
			}
			got, err := kubeletRoot(l, root, tt.cgroup, tt.in)
			if len(tt.wantErrs) == 0 {
				if err != nil || got != tt.want {
					t.Errorf("got %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("got %q, want an error", got)
			}
			for _, w := range tt.wantErrs {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error of more than one line: %q", err)
			}
		})
	}
}

func TestKubeletRootWithoutCgroups(t *testing.T) {
	if _, err := kubeletRoot(Layout{}, "/", "/x", nil); err == nil || !strings.Contains(err.Error(), "no hierarchy the kubelet uses is mounted") {
		t.Errorf("error %v", err)
	}
}

func TestOwnCgroup(t *testing.T) {
	tests := []struct {
		host      string
		evacuated bool
		want      string
		wantErr   string
	}{
		{host: "docker-v1", want: "/docker/4f1e"},
		{host: "v1", want: "/system.slice/mesos-agent.service"},
		{host: "v2", want: "/"},
		{host: "v2", evacuated: true, want: "/"},
		{host: "hybrid", wantErr: "the container is in different cgroups of the hierarchies the kubelet uses (cpu:/ cpuacct:/ memory:/process_api/7c2e52c8940bbfe6b6af35d25c3bef79 name=systemd:/)"},
	}
	for _, tt := range tests {
		l, err := ReadLayout(fakeRoot(t, tt.host, nil, nil))
		if err != nil {
			t.Fatal(err)
		}
		got, err := ownCgroup(l, tt.evacuated)
		switch {
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s: got %q, %v; want an error with %q", tt.host, got, err, tt.wantErr)
		case tt.wantErr == "" && (err != nil || got != tt.want):
			t.Errorf("%s: got %q, %v; want %q", tt.host, got, err, tt.want)
		}
	}
}

// The kubelet's systemd driver turns a cgroupfs-form root into nested
// slices (its own example: {kubepods, burstable, pod1234-abcd-5678-efgh}
// is /kubepods.slice/kubepods-burstable.slice/
// kubepods-burstable-pod1234_abcd_5678_efgh.slice); systemdRoot goes back.
func TestSystemdRoot(t *testing.T) {
	tests := []struct {
		cgroup, root string
		ok           bool
	}{
		{"/", "/", true},
		{"/node1.slice", "/node1", true},
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd_5678_efgh.slice", "/kubepods/burstable/pod1234-abcd-5678-efgh", true},
		{"/system.slice/docker-4f1e.scope", "", false},
		{"/machine.slice/libpod-5d1c.scope/container", "", false},
		{"/mesos/abc", "", false},
		{"/a.slice/b.slice", "", false},     // b.slice is no child of a.slice
		{"/a.slice/a-.slice", "", false},    // an empty element
		{"/a-b.slice", "", false},           // systemd puts a-b.slice below a.slice
		{"/a.slice/a-b-c.slice", "", false}, // below a-b.slice
		{"/.slice", "", false},
	}
	for _, tt := range tests {
		root, ok := systemdRoot(tt.cgroup)
		if root != tt.root || ok != tt.ok {
			t.Errorf("systemdRoot(%q) = %q, %v; want %q, %v", tt.cgroup, root, ok, tt.root, tt.ok)
		}
		if ok {
			if back := systemdPath(root); back != tt.cgroup {
				t.Errorf("systemdPath(%q) = %q, want %q", root, back, tt.cgroup)
			}
		}
	}
}
