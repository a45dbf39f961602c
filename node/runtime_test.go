package node

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodeinit/nodeinit/config"
)

func withRuntime(c *config.Config) {
	c.Runtime.Path, c.Runtime.Args, c.Runtime.Socket = "/usr/bin/containerd", []string{"--config", "/etc/c.toml"}, "/run/node/c.sock"
}

func TestNoRuntimeByDefaultAndNoEndpoint(t *testing.T) {
	c := cfg(func(c *config.Config) {})
	if _, ok := Runtime(c, nil); ok {
		t.Error("a runtime command without runtime.path")
	}
	if flag, lines := RuntimeEndpoint(c, nil, KubeletConfig{}); flag != "" || lines != nil {
		t.Errorf("RuntimeEndpoint without a runtime: %q %v", flag, lines)
	}
	if got := Executor(c, nil, Container{}, KubeletConfig{}).Args; len(got) != 0 {
		t.Errorf("executor args %q, want none", got)
	}
}

func TestTheRuntimesCommandIsItsProgramAndArgs(t *testing.T) {
	c := cfg(withRuntime)
	cmd, ok := Runtime(c, []string{"PATH=/bin"})
	if !ok || cmd.Path != "/usr/bin/containerd" || !slices.Equal(cmd.Args, []string{"--config", "/etc/c.toml"}) || getenv(cmd.Env, "PATH") != "/bin" {
		t.Errorf("Runtime: %+v %v", cmd, ok)
	}
}

func TestTheRuntimesSocketIsPassedUnlessTheExecutorNamesAnEndpoint(t *testing.T) {
	const passed = "--container-runtime-endpoint=unix:///run/node/c.sock"
	kubeletConf := filepath.Join(t.TempDir(), "kubelet.yaml")
	for _, tc := range []struct {
		name   string
		change func(*config.Config)
		kc     KubeletConfig
		flag   string
		line   string // in the decision's line
		warn   bool
	}{
		{"passed", func(c *config.Config) {}, KubeletConfig{}, passed, "Passing the executor the runtime's socket", false},
		{"turned off", func(c *config.Config) { c.Runtime.PassEndpoint = false }, KubeletConfig{}, "", "runtime.passEndpoint off", false},
		{"the executor's own flag, the same socket", func(c *config.Config) {
			c.Executor.Args = []string{"--container-runtime-endpoint", "unix:///run/node/c.sock"}
		}, KubeletConfig{}, "", "names the runtime's socket itself", false},
		{"the executor's own flag, another socket", func(c *config.Config) {
			c.Executor.Args = []string{"--container-runtime-endpoint=unix:///run/containerd/containerd.sock"}
		}, KubeletConfig{}, "", `endpoint="unix:///run/containerd/containerd.sock"`, true},
		{"the kubelet's configuration", func(c *config.Config) {}, KubeletConfig{Files: []string{kubeletConf}, ContainerRuntimeEndpoint: "/run/node/c.sock"},
			"", "containerRuntimeEndpoint of the kubelet's configuration " + kubeletConf, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg(func(c *config.Config) { withRuntime(c); tc.change(c) })
			flag, lines := RuntimeEndpoint(c, c.Executor.Args, tc.kc)
			if flag != tc.flag {
				t.Errorf("flag %q, want %q", flag, tc.flag)
			}
			if len(lines) != 1 || !strings.Contains(lines[0].String(), tc.line) || lines[0].Warning != tc.warn {
				t.Errorf("lines %v, want one (warning %v) saying %q", lines, tc.warn, tc.line)
			}
			args := Executor(c, nil, Container{}, tc.kc).Args
			if has := slices.Contains(args, passed); has != (tc.flag != "") {
				t.Errorf("executor args %q", args)
			}
		})
	}
}

func TestTheEndpointGoesBeforeTheExecutorsDoubleDash(t *testing.T) {
	c := cfg(func(c *config.Config) { withRuntime(c); c.Executor.Args = []string{"--v=2", "--", "child"} })
	got := Executor(c, nil, Container{}, KubeletConfig{}).Args
	want := []string{"--v=2", "--container-runtime-endpoint=unix:///run/node/c.sock", "--", "child"}
	if !slices.Equal(got, want) {
		t.Errorf("args %q, want %q", got, want)
	}
}

func TestTheKubeletConfigurationsEndpointIsRead(t *testing.T) {
	file := writeFile(t, t.TempDir(), "kubelet.yaml", "kind: KubeletConfiguration\napiVersion: kubelet.config.k8s.io/v1beta1\ncontainerRuntimeEndpoint: unix:///run/k.sock\n")
	kc, err := ReadKubeletConfig([]string{"--config=" + file})
	if err != nil || kc.ContainerRuntimeEndpoint != "unix:///run/k.sock" {
		t.Errorf("ReadKubeletConfig: %+v %v", kc, err)
	}
}
