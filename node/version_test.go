package node

import (
	"debug/buildinfo"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

func TestKubeletVersionFromBuildInfo(t *testing.T) {
	dep := func(path, version string) *debug.Module { return &debug.Module{Path: path, Version: version} }
	tests := []struct {
		name string
		bi   buildinfo.BuildInfo
		want string
		from string
	}{
		{name: "a program of another module that links the kubelet",
			bi: buildinfo.BuildInfo{Main: debug.Module{Path: "example.com/kubelet-executor", Version: "v0.3.0"},
				Deps: []*debug.Module{dep("k8s.io/api", "v0.0.0"), dep("k8s.io/kubernetes", "v1.37.2")}},
			want: "v1.37.2", from: "its dependency k8s.io/kubernetes"},
		{name: "go build k8s.io/kubernetes/cmd/kubelet from a module that requires it (make k8s)",
			bi: buildinfo.BuildInfo{Path: "k8s.io/kubernetes/cmd/kubelet", Main: debug.Module{Path: "k8s.io/kubernetes", Version: "v1.37.2"},
				Deps: []*debug.Module{{Path: "k8s.io/api", Version: "v0.0.0", Replace: dep("k8s.io/api", "v0.37.2")}}},
			want: "v1.37.2", from: "its main module k8s.io/kubernetes"},
		{name: "a replaced k8s.io/kubernetes",
			bi:   buildinfo.BuildInfo{Deps: []*debug.Module{{Path: "k8s.io/kubernetes", Version: "v1.34.0", Replace: dep("k8s.io/kubernetes", "v1.35.4")}}},
			want: "v1.35.4"},
		{name: "in Kubernetes' tree at a release tag",
			bi:   buildinfo.BuildInfo{Main: debug.Module{Path: "k8s.io/kubernetes", Version: "v1.36.3"}},
			want: "v1.36.3", from: "its main module k8s.io/kubernetes"},
		{name: "a pre-release",
			bi:   buildinfo.BuildInfo{Main: debug.Module{Path: "k8s.io/kubernetes", Version: "v1.38.0-beta.0"}},
			want: "v1.38.0"},
		{name: "stamped by -ldflags, without -trimpath",
			bi: buildinfo.BuildInfo{Main: debug.Module{Path: "k8s.io/kubernetes", Version: "(devel)"},
				Settings: []debug.BuildSetting{{Key: "-ldflags", Value: "-s -w -X 'k8s.io/component-base/version.gitVersion=v1.35.4' -X k8s.io/component-base/version.gitMajor=1"}}},
			want: "v1.35.4"},
		{name: "staging modules published for the release",
			bi:   buildinfo.BuildInfo{Deps: []*debug.Module{{Path: "k8s.io/kubelet", Version: "v0.0.0", Replace: dep("k8s.io/kubelet", "v0.36.3")}}},
			want: "v1.36.3", from: "its dependency k8s.io/kubelet"},
		{name: "staging modules of the tree", bi: buildinfo.BuildInfo{Main: debug.Module{Path: "k8s.io/kubernetes", Version: "(devel)"},
			Deps: []*debug.Module{{Path: "k8s.io/kubelet", Version: "v0.0.0", Replace: &debug.Module{Path: "./staging/src/k8s.io/kubelet"}}}}},
		{name: "not a kubelet", bi: buildinfo.BuildInfo{Main: debug.Module{Path: "example.com/other", Version: "v1.2.3"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := kubeletVersionOf(&tt.bi)
			got := ""
			if v.Known() {
				got = v.String()
			}
			if got != tt.want {
				t.Errorf("version = %q, want %q", got, tt.want)
			}
			if tt.from != "" && v.From != tt.from {
				t.Errorf("from = %q, want %q", v.From, tt.from)
			}
		})
	}
}

func TestReadKubeletVersionWithoutOne(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "kubelet")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec /usr/bin/kubelet \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct{ path, pathEnv string }{
		"a script":                 {script, ""},
		"a script found in PATH":   {"kubelet", "PATH=/nonexistent:" + dir},
		"missing":                  {"kubelet", "PATH=/nonexistent"},
		"a Go program, no kubelet": {self, ""},
	} {
		if v := ReadKubeletVersion(c.path, []string{c.pathEnv}); v.Known() {
			t.Errorf("%s: version %v from %s, want unknown", name, v, v.From)
		}
	}
}

func TestKubeletVersionAtLeast(t *testing.T) {
	v := KubeletVersion{Major: 1, Minor: 35}
	if !v.AtLeast(35) || v.AtLeast(36) || !v.AtLeast(31) {
		t.Errorf("%v: AtLeast wrong", v)
	}
	if (KubeletVersion{}).AtLeast(0) {
		t.Error("an unknown version is at least nothing")
	}
}

func TestTakesRuntimeCgroupDriver(t *testing.T) {
	v := func(minor int) KubeletVersion { return KubeletVersion{Major: 1, Minor: minor} }
	gate := map[string]bool{"KubeletCgroupDriverFromCRI": false}
	tests := []struct {
		name string
		args []string
		kc   KubeletConfig
		v    KubeletVersion
		want bool
	}{
		{name: "unknown release", want: true},
		{name: "1.37", v: v(37), want: true},
		{name: "1.34, gate locked on", v: v(34), kc: KubeletConfig{FeatureGates: gate}, want: true},
		{name: "1.33 by default", v: v(33), want: true},
		{name: "1.33, gate off in the file", v: v(33), kc: KubeletConfig{FeatureGates: gate}},
		{name: "1.33, gate off on the command line", v: v(33), args: []string{"--feature-gates=A=true,KubeletCgroupDriverFromCRI=false"}},
		{name: "1.30 by default", v: v(30)},
		{name: "1.30, gate on", v: v(30), args: []string{"--feature-gates", "KubeletCgroupDriverFromCRI=true"}, want: true},
		{name: "1.27 has no gate", v: v(27), args: []string{"--feature-gates=KubeletCgroupDriverFromCRI=true"}},
	}
	for _, tt := range tests {
		if got := TakesRuntimeCgroupDriver(tt.args, tt.kc, tt.v); got != tt.want {
			t.Errorf("%s: takes the runtime's driver = %t, want %t", tt.name, got, tt.want)
		}
	}
}

func TestFeatureGateTheCommandLineWinsOverTheFile(t *testing.T) {
	kc := KubeletConfig{Files: []string{"/k.yaml"}, FeatureGates: map[string]bool{UserNamespaceGate: true}}
	if v, where := FeatureGate(nil, kc, UserNamespaceGate); !v || where != "the kubelet's configuration /k.yaml" {
		t.Errorf("file: %t from %q", v, where)
	}
	args := []string{"--feature-gates=KubeletInUserNamespace=false", "-feature-gates", "Other=true", "--", "--feature-gates=KubeletInUserNamespace=true"}
	if v, where := FeatureGate(args, kc, UserNamespaceGate); v || where != "the kubelet's --feature-gates" {
		t.Errorf("flag: %t from %q", v, where)
	}
	if _, where := FeatureGate(nil, KubeletConfig{}, UserNamespaceGate); where != "" {
		t.Errorf("unset: from %q", where)
	}
}
