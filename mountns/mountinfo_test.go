package mountns

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestParseMountinfoReadsEveryField(t *testing.T) {
	f, err := os.Open("testdata/mountinfo-slave.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mounts, err := ParseMountinfo(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(mounts) != 7 {
		t.Fatalf("parsed %d mounts, want 7", len(mounts))
	}
	want := Mount{ID: 40, ParentID: 31, Major: 0, Minor: 37, Root: "/", Mountpoint: "/sys/fs/cgroup/systemd",
		Options: "rw,relatime", Optional: []string{"master:9", "shared:10"}, FSType: "cgroup", Source: "cgroup",
		SuperOptions: "rw,name=systemd"}
	if !reflect.DeepEqual(mounts[4], want) {
		t.Errorf("line 5:\n got %+v\nwant %+v", mounts[4], want)
	}
	esc := mounts[6]
	if esc.Root != "/dir with space" || esc.Mountpoint != "/mnt/a b\tc" || esc.Source != `none\x` {
		t.Errorf("escapes not undone: root %q mountpoint %q source %q", esc.Root, esc.Mountpoint, esc.Source)
	}
	if mounts[1].Optional != nil {
		t.Errorf("a line without optional fields got %q", mounts[1].Optional)
	}
}

func TestPropagationOfMounts(t *testing.T) {
	tests := []struct {
		name           string
		optional       []string
		shared, master int // 0: none
	}{
		{"private", nil, 0, 0},
		{"shared", []string{"shared:4"}, 4, 0},
		{"slave", []string{"master:1"}, 0, 1},
		{"shared slave", []string{"master:9", "shared:10"}, 10, 9},
		{"unbindable and propagate_from", []string{"unbindable", "propagate_from:3"}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := Mount{Optional: tt.optional}
			g, ok := m.Shared()
			if ok != (tt.shared != 0) || g != tt.shared {
				t.Errorf("Shared() = %d, %v; want %d", g, ok, tt.shared)
			}
			g, ok = m.Master()
			if ok != (tt.master != 0) || g != tt.master {
				t.Errorf("Master() = %d, %v; want %d", g, ok, tt.master)
			}
		})
	}
}

func TestParseMountinfoRejectsMalformedLines(t *testing.T) {
	tests := map[string]string{
		"too few fields":   "22 1 253:1 / /",
		"no separator":     "22 1 253:1 / / rw master:1 ext4 /dev/vda1 rw",
		"nothing after -":  "22 1 253:1 / / rw - ext4",
		"id not a number":  "x 1 253:1 / / rw - ext4 /dev/vda1 rw",
		"device not maj:m": "22 1 253 / / rw - ext4 /dev/vda1 rw",
	}
	for name, line := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := ParseMountinfo(strings.NewReader("23 22 0:21 / /proc rw - proc proc rw\n" + line + "\n"))
			if err == nil || !strings.Contains(err.Error(), "line 2") {
				t.Fatalf("error %v, want one naming line 2", err)
			}
		})
	}
}

func TestHasSuperOption(t *testing.T) {
	m := Mount{SuperOptions: "rw,cpu,cpuacct"}
	for opt, want := range map[string]bool{"cpu": true, "cpuacct": true, "cpuset": false, "rw": true, "": false} {
		if got := m.HasSuperOption(opt); got != want {
			t.Errorf("HasSuperOption(%q) = %v, want %v", opt, got, want)
		}
	}
}

func TestExplainEPERMNamesTheCause(t *testing.T) {
	tests := []struct {
		name   string
		status map[string]string
		want   string
	}{
		{"no capability", map[string]string{"CapEff": "00000000a80425fb", "Seccomp": "0"}, "needs root or CAP_SYS_ADMIN"},
		{"seccomp", map[string]string{"CapEff": "000001ffffffffff", "Seccomp": "2"}, "seccomp"},
		{"user namespace", map[string]string{"CapEff": "000001ffffffffff", "Seccomp": "0"}, "user namespace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := explainEPERM(tt.status); !strings.Contains(got, tt.want) {
				t.Errorf("explainEPERM = %q, want it to mention %q", got, tt.want)
			}
		})
	}
}
