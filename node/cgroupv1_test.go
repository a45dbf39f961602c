package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCgroupV1Refusal(t *testing.T) {
	v := func(minor int) KubeletVersion {
		return KubeletVersion{Major: 1, Minor: minor, Patch: 2, From: "its dependency k8s.io/kubernetes"}
	}
	no, yes := false, true
	file := KubeletConfig{File: "/etc/kubernetes/kubelet.yaml", Files: []string{"/etc/kubernetes/kubelet.yaml"}}
	with := func(b *bool) KubeletConfig { k := file; k.FailCgroupV1 = b; return k }
	tests := []struct {
		name string
		args []string
		kc   KubeletConfig
		v    KubeletVersion
		want []string // words of the line; none: no line
	}{
		{name: "unknown release", kc: file},
		{name: "1.34 defaults to false", kc: file, v: v(34)},
		{name: "1.35 defaults to true", kc: file, v: v(35),
			want: []string{"The kubelet (v1.35.2, read from its dependency k8s.io/kubernetes) will exit at start on this cgroup v1 host",
				"failCgroupV1 is unset, and a kubelet from v1.35 on defaults it to true",
				"set failCgroupV1: false in /etc/kubernetes/kubelet.yaml", "or move the host to cgroup v2"}},
		{name: "1.37 without a --config file", v: v(37), want: []string{"set failCgroupV1: false in its configuration (a --config file)"}},
		{name: "1.37, false in the file", kc: with(&no), v: v(37)},
		{name: "1.37, true in the file", kc: with(&yes), v: v(37),
			want: []string{"failCgroupV1 is true in /etc/kubernetes/kubelet.yaml", "set failCgroupV1: false there"}},
		{name: "1.34, true in the file", kc: with(&yes), v: v(34), want: []string{"failCgroupV1 is true"}},
		{name: "1.37, the flag false", args: []string{"--fail-cgroupv1=false"}, kc: file, v: v(37)},
		{name: "1.37, the last flag false", args: []string{"--fail-cgroupv1", "--fail-cgroupv1=f"}, kc: file, v: v(37)},
		{name: "1.37, a bare flag is true", args: []string{"--fail-cgroupv1", "false"}, kc: with(&no), v: v(37),
			want: []string{"its --fail-cgroupv1=true overrides failCgroupV1: false in /etc/kubernetes/kubelet.yaml", "drop --fail-cgroupv1"}},
		{name: "1.37, the flag true", args: []string{"-fail-cgroupv1=true"}, v: v(37), want: []string{"pass --fail-cgroupv1=false"}},
		{name: "1.37, the flag after -- is not the kubelet's", args: []string{"--", "--fail-cgroupv1=false"}, kc: file, v: v(37),
			want: []string{"failCgroupV1 is unset"}},
		{name: "a value the kubelet refuses", args: []string{"--fail-cgroupv1=maybe"}, kc: file, v: v(37)},
		{name: "1.37, false in a drop-in", kc: KubeletConfig{Files: []string{"/d/10.conf"}, FailCgroupV1: &no}, v: v(37)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := CgroupV1Refusal(tt.args, tt.kc, tt.v)
			if len(tt.want) == 0 {
				if got != "" {
					t.Errorf("line %q, want none", got)
				}
				return
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("line %q lacks %q", got, w)
				}
			}
			if strings.Contains(got, "\n") {
				t.Errorf("more than one line: %q", got)
			}
		})
	}
}

func TestReadKubeletConfigReadsFailCgroupV1FromTheDropIns(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "kubelet.yaml", "failCgroupV1: true\n")
	writeFile(t, dir, "d/10.conf", "failCgroupV1: false\n")
	k, err := ReadKubeletConfig([]string{"--config=" + file, "--config-dir=" + dir + "/d"})
	if err != nil {
		t.Fatal(err)
	}
	if k.FailCgroupV1 == nil || *k.FailCgroupV1 {
		t.Errorf("failCgroupV1 = %v, want false from the drop-in", k.FailCgroupV1)
	}
}

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
