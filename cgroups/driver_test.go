package cgroups

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestContainerdDriver(t *testing.T) {
	tests := []struct {
		name     string
		text     string
		driver   string
		version3 bool
	}{
		{"version 2, runc with systemd", `version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  BinaryName = ""
  SystemdCgroup = true
`, DriverSystemd, false},
		{"version 3, runc with cgroupfs", `version = 3
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
    SystemdCgroup = false   # as containerd config default writes it
`, DriverCgroupfs, true},
		{"version 4 (containerd 2.4's), runc with systemd", `version = 4
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  SystemdCgroup = true
`, DriverSystemd, true},
		{"a version that is no number", "version = \"3\"\n", "", false},
		{"two runtimes that agree", "[a]\nSystemdCgroup = true\n[b]\nSystemdCgroup=true\n", DriverSystemd, false},
		{"two runtimes that disagree", "[a]\nSystemdCgroup = true\n[b]\nSystemdCgroup = false\n", "", false},
		{"commented out", "version = 2\n[a]\n# SystemdCgroup = true\n", "", false},
		{"not set: containerd's default, which depends on its version", "version = 2\n[plugins]\n", "", false},
		{"a value that is no bare boolean", "[a]\nSystemdCgroup = \"true\"\n", "", false},
		{"version inside a table is another key", "[a]\nversion = 3\nSystemdCgroup = true\n", DriverSystemd, false},
		{"empty", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, v3 := containerdDriver([]byte(tt.text))
			if d != tt.driver || v3 != tt.version3 {
				t.Errorf("driver %q, version 3 %v; want %q, %v", d, v3, tt.driver, tt.version3)
			}
		})
	}
}

func TestDriverWarnings(t *testing.T) {
	tests := []struct {
		name string
		d    drivers
		want [][]string // the words of each line
	}{
		{name: "nothing known", d: drivers{}},
		{name: "agree", d: drivers{Kubelet: DriverSystemd, Containerd: DriverSystemd, Systemd: true}},
		{name: "containerd unknown, cgroupfs", d: drivers{Kubelet: DriverCgroupfs, Systemd: true}},
		{name: "kubelet cgroupfs by default, containerd systemd",
			d: drivers{Kubelet: DriverCgroupfs, KubeletDefault: true, Containerd: DriverSystemd, Systemd: true},
			want: [][]string{{"the kubelet uses the cgroupfs cgroup driver (its default) and containerd the systemd one (SystemdCgroup = true in /etc/containerd/config.toml)",
				"set the same driver in both"}}},
		{name: "kubelet systemd, containerd cgroupfs",
			d:    drivers{Kubelet: DriverSystemd, Containerd: DriverCgroupfs, Systemd: true},
			want: [][]string{{"the kubelet uses the systemd cgroup driver and containerd the cgroupfs one (SystemdCgroup = false in"}}},
		{name: "containerd 2 tells the kubelet its driver",
			d: drivers{Kubelet: DriverCgroupfs, Containerd: DriverSystemd, ContainerdAsks: true, Systemd: true}},
		{name: "a kubelet that does not ask keeps its own driver: the mismatch shows",
			d:    drivers{Kubelet: DriverCgroupfs, Containerd: DriverSystemd, ContainerdAsks: true, KubeletKeepsOwn: true, Systemd: true},
			want: [][]string{{"the kubelet uses the cgroupfs cgroup driver and containerd the systemd one"}}},
		{name: "containerd 2's systemd without systemd",
			d:    drivers{Kubelet: DriverCgroupfs, Containerd: DriverSystemd, ContainerdAsks: true},
			want: [][]string{{"the kubelet uses the systemd cgroup driver, but /run/systemd/system does not exist"}}},
		{name: "systemd driver, no systemd",
			d: drivers{Kubelet: DriverSystemd},
			want: [][]string{{"the kubelet uses the systemd cgroup driver, but /run/systemd/system does not exist",
				"set the kubelet's cgroupDriver to cgroupfs, or mount the host's /run"}}},
		{name: "systemd driver at the root of a private cgroup namespace",
			d: drivers{Kubelet: DriverSystemd, Systemd: true, PrivateRoot: true},
			want: [][]string{{"the kubelet uses the systemd cgroup driver, but nodeinit is at the root of a private cgroup namespace",
				"run the container with --cgroupns=host and the host's /sys/fs/cgroup"}}},
		{name: "cgroupfs at the root of a private cgroup namespace", d: drivers{Kubelet: DriverCgroupfs, Systemd: true, PrivateRoot: true}},
		{name: "both wrong",
			d:    drivers{Kubelet: DriverSystemd, Containerd: DriverCgroupfs},
			want: [][]string{{"containerd the cgroupfs one"}, {"/run/systemd/system does not exist"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.d.warnings()
			if len(got) != len(tt.want) {
				t.Fatalf("%d lines %q, want %d", len(got), got, len(tt.want))
			}
			for i, words := range tt.want {
				for _, w := range words {
					if !strings.Contains(got[i], w) {
						t.Errorf("line %d %q does not say %q", i, got[i], w)
					}
				}
				if strings.Contains(got[i], "\n") {
					t.Errorf("line %d is more than one line: %q", i, got[i])
				}
			}
		})
	}
}

// readDrivers reads what the container shows, and nothing that can hold
// it: containerd's configuration through a FIFO or one too large is
// unknown, not a wait.
func TestReadDrivers(t *testing.T) {
	write := func(t *testing.T, root, name, text string) {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("configured kubelet, containerd systemd, systemd host", func(t *testing.T) {
		root := t.TempDir()
		write(t, root, "etc/containerd/config.toml", "version = 2\n[x]\nSystemdCgroup = true\n")
		if err := os.MkdirAll(filepath.Join(root, "run/systemd/system"), 0o755); err != nil {
			t.Fatal(err)
		}
		got := readDrivers(root, "", true)
		want := drivers{Kubelet: DriverCgroupfs, KubeletDefault: true, Containerd: DriverSystemd, Systemd: true}
		if got != want {
			t.Errorf("got %+v, want %+v", got, want)
		}
	})
	t.Run("no kubelet configuration: the executor may be no kubelet", func(t *testing.T) {
		if got := readDrivers(t.TempDir(), "", false); got != (drivers{}) || len(got.warnings()) > 0 {
			t.Errorf("got %+v, warnings %q", got, got.warnings())
		}
	})
	t.Run("a FIFO", func(t *testing.T) {
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, "etc/containerd"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mkfifo(filepath.Join(root, "etc/containerd/config.toml"), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := readDrivers(root, DriverSystemd, false); got.Containerd != "" || got.Kubelet != DriverSystemd {
			t.Errorf("got %+v", got)
		}
	})
	t.Run("too large", func(t *testing.T) {
		root := t.TempDir()
		write(t, root, "etc/containerd/config.toml", "SystemdCgroup = true\n"+strings.Repeat("#\n", maxContainerdConfig))
		if got := readDrivers(root, DriverCgroupfs, false); got.Containerd != "" {
			t.Errorf("got %+v from a file over the limit", got)
		}
	})
	t.Run("a link is followed", func(t *testing.T) {
		root := t.TempDir()
		write(t, root, "etc/containerd/real.toml", "SystemdCgroup = false\n")
		if err := os.Symlink("real.toml", filepath.Join(root, "etc/containerd/config.toml")); err != nil {
			t.Fatal(err)
		}
		got := readDrivers(root, DriverSystemd, false)
		if got.Containerd != DriverCgroupfs || !slices.ContainsFunc(got.warnings(), func(w string) bool { return strings.Contains(w, "containerd the cgroupfs one") }) {
			t.Errorf("got %+v, warnings %q", got, got.warnings())
		}
	})
}

// The driver the kubelet runs with is the one containerd reports where it
// reports one and the kubelet takes it (KubeletCgroupDriverFromCRI), else
// the kubelet's own: the cgroup root, the limits and the system-bus check
// follow it.
func TestKubeletDriverIsTheRuntimesWhereItTakesIt(t *testing.T) {
	tests := []struct {
		name string
		d    drivers
		want string
	}{
		{name: "nothing known", d: drivers{}, want: ""},
		{name: "the kubelet's own, containerd unknown", d: drivers{Kubelet: DriverSystemd}, want: DriverSystemd},
		{name: "containerd 1.x does not report", d: drivers{Kubelet: DriverSystemd, Containerd: DriverCgroupfs}, want: DriverSystemd},
		{name: "containerd 2 reports cgroupfs", d: drivers{Kubelet: DriverSystemd, Containerd: DriverCgroupfs, ContainerdAsks: true}, want: DriverCgroupfs},
		{name: "containerd 2 reports, the kubelet does not ask",
			d: drivers{Kubelet: DriverSystemd, Containerd: DriverCgroupfs, ContainerdAsks: true, KubeletKeepsOwn: true}, want: DriverSystemd},
		{name: "containerd 2, its driver unknown", d: drivers{Kubelet: DriverSystemd, ContainerdAsks: true}, want: DriverSystemd},
	}
	for _, tt := range tests {
		if got := tt.d.kubelet(); got != tt.want {
			t.Errorf("%s: driver %q, want %q", tt.name, got, tt.want)
		}
	}
}
