package cgroups

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestReadLimits(t *testing.T) {
	const unlimitedV1 = "9223372036854771712\n"
	tests := []struct {
		name    string
		host    string
		root    string            // the kubelet's cgroup root
		files   map[string]string // by path below the fake root
		want    Limits
		wantErr string
	}{
		{name: "v1: the cgroup's own limits", host: "v1", root: "/node",
			files: map[string]string{
				"sys/fs/cgroup/memory/node/memory.limit_in_bytes":  "3221225472\n",
				"sys/fs/cgroup/memory/memory.limit_in_bytes":       unlimitedV1,
				"sys/fs/cgroup/cpu,cpuacct/node/cpu.cfs_quota_us":  "150000\n",
				"sys/fs/cgroup/cpu,cpuacct/node/cpu.cfs_period_us": "100000\n",
				"sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us":       "-1\n",
				"sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us":      "100000\n",
				"sys/fs/cgroup/pids/node/pids.max":                 "4096\n",
			},
			want: Limits{
				Memory: Limit{3221225472, "memory.limit_in_bytes of cgroup /node"},
				CPU:    Limit{1500, "cpu.cfs_quota_us of cgroup /node"},
				Pids:   Limit{4096, "pids.max of cgroup /node"},
			}},
		{name: "v1: an ancestor's smaller limit holds", host: "v1", root: "/mesos/abc",
			files: map[string]string{
				"sys/fs/cgroup/memory/mesos/abc/memory.limit_in_bytes":  "3221225472\n",
				"sys/fs/cgroup/memory/mesos/memory.limit_in_bytes":      "2147483648\n",
				"sys/fs/cgroup/pids/mesos/abc/pids.max":                 "max\n",
				"sys/fs/cgroup/pids/mesos/pids.max":                     "100\n",
				"sys/fs/cgroup/cpu,cpuacct/mesos/abc/cpu.cfs_quota_us":  "-1\n",
				"sys/fs/cgroup/cpu,cpuacct/mesos/abc/cpu.cfs_period_us": "100000\n",
				"sys/fs/cgroup/cpu,cpuacct/mesos/cpu.cfs_quota_us":      "50000\n",
				"sys/fs/cgroup/cpu,cpuacct/mesos/cpu.cfs_period_us":     "200000\n",
			},
			want: Limits{
				Memory: Limit{2147483648, "memory.limit_in_bytes of cgroup /mesos"},
				CPU:    Limit{250, "cpu.cfs_quota_us of cgroup /mesos"},
				Pids:   Limit{100, "pids.max of cgroup /mesos"},
			}},
		{name: "v1: no limits", host: "v1", root: "/node",
			files: map[string]string{
				"sys/fs/cgroup/memory/node/memory.limit_in_bytes":  unlimitedV1,
				"sys/fs/cgroup/cpu,cpuacct/node/cpu.cfs_quota_us":  "-1\n",
				"sys/fs/cgroup/cpu,cpuacct/node/cpu.cfs_period_us": "100000\n",
				"sys/fs/cgroup/pids/node/pids.max":                 "max\n",
			}},
		{name: "v1: the kubelet's default root, nothing above", host: "v1", root: "/",
			files: map[string]string{"sys/fs/cgroup/memory/memory.limit_in_bytes": unlimitedV1}},
		{name: "v2: memory.max, cpu.max and pids.max up the tree", host: "v2", root: "/mesos/abc",
			files: map[string]string{
				"sys/fs/cgroup/mesos/abc/memory.max":            "max\n",
				"sys/fs/cgroup/mesos/memory.max":                "1073741824\n",
				"sys/fs/cgroup/mesos/abc/cpu.max":               "50000 100000\n",
				"sys/fs/cgroup/mesos/cpu.max":                   "max 100000\n",
				"sys/fs/cgroup/mesos/abc/pids.max":              "512\n",
				"sys/fs/cgroup/mesos/abc/cpuset.cpus.effective": "0-3\n",
			},
			want: Limits{
				Memory: Limit{1073741824, "memory.max of cgroup /mesos"},
				CPU:    Limit{500, "cpu.max of cgroup /mesos/abc"},
				Pids:   Limit{512, "pids.max of cgroup /mesos/abc"},
			}},
		{name: "v2: a cpuset narrower than the quota", host: "v2", root: "/node",
			files: map[string]string{
				"sys/fs/cgroup/node/cpu.max":               "250000 100000\n",
				"sys/fs/cgroup/node/cpuset.cpus.effective": "2,5\n",
			},
			want: Limits{CPU: Limit{2000, "cpuset.cpus.effective of cgroup /node (2,5)"}}},
		{name: "v2: a cpuset on an ancestor binds a cgroup without the cpuset controller", host: "v2", root: "/node/kubelet",
			files: map[string]string{
				// cpuset is not enabled for /node/kubelet: it has no cpuset
				// files, and its processes run on /node's CPUs.
				"sys/fs/cgroup/node/kubelet/cpu.max":       "max 100000\n",
				"sys/fs/cgroup/node/cpuset.cpus.effective": "3\n",
				"sys/fs/cgroup/cpuset.cpus.effective":      "0-7\n",
			},
			want: Limits{CPU: Limit{1000, "cpuset.cpus.effective of cgroup /node (3)"}}},
		{name: "v2: the nearest cpuset is the effective one", host: "v2", root: "/node/kubelet",
			files: map[string]string{
				"sys/fs/cgroup/node/kubelet/cpuset.cpus.effective": "2-3\n",
				"sys/fs/cgroup/node/cpuset.cpus.effective":         "0-3\n",
				"sys/fs/cgroup/cpuset.cpus.effective":              "0-7\n",
			},
			want: Limits{CPU: Limit{2000, "cpuset.cpus.effective of cgroup /node/kubelet (2-3)"}}},
		{name: "v2: a private cgroup namespace, its root the container", host: "v2", root: "/",
			files: map[string]string{"sys/fs/cgroup/memory.max": "536870912\n"},
			want:  Limits{Memory: Limit{536870912, "memory.max of cgroup /"}}},
		{name: "hybrid: the unified hierarchy's files are not the kubelet's", host: "hybrid", root: "/node",
			files: map[string]string{
				"sys/fs/cgroup/unified/node/memory.max":           "1024\n",
				"sys/fs/cgroup/memory/node/memory.limit_in_bytes": "4096000\n",
			},
			want: Limits{Memory: Limit{4096000, "memory.limit_in_bytes of cgroup /node"}}},
		{name: "malformed", host: "v2", root: "/node",
			files:   map[string]string{"sys/fs/cgroup/node/memory.max": "lots\n", "sys/fs/cgroup/node/pids.max": "7\n"},
			want:    Limits{Pids: Limit{7, "pids.max of cgroup /node"}},
			wantErr: `read the limit memory.max of cgroup /node: not a number or max: "lots"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := fakeRoot(t, tt.host, nil, nil)
			for f, text := range tt.files {
				must(t, os.MkdirAll(filepath.Dir(filepath.Join(root, f)), 0o755))
				must(t, os.WriteFile(filepath.Join(root, f), []byte(text), 0o644))
			}
			l, err := ReadLayout(root)
			must(t, err)
			got, err := ReadLimits(l, root, tt.root)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("error %v, want %q", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestParseCPUList(t *testing.T) {
	for list, want := range map[string][]int{"": nil, "0": {0}, "0-3": {0, 1, 2, 3}, "0-1,4,6-7": {0, 1, 4, 6, 7}} {
		got, err := ParseCPUList(list)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseCPUList(%q) = %v, %v; want %v", list, got, err, want)
		}
	}
	for _, bad := range []string{"a", "3-1", "-1", "0-", "1,,2"} {
		if _, err := ParseCPUList(bad); err == nil {
			t.Errorf("ParseCPUList(%q): no error", bad)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
