package node

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestReadKubeletConfigMergesDropInsInOrder(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "kubelet.yaml")
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("kubelet.yaml", "kind: KubeletConfiguration\napiVersion: kubelet.config.k8s.io/v1beta1\ncgroupRoot: /base\naddress: 10.0.0.1\nshutdownGracePeriod: 30s\n")
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o700); err != nil {
		t.Fatal(err)
	}
	b := write("d/20-b.conf", "cgroupRoot: /second\n")
	a := write("d/10-a.conf", "cgroupRoot: /first\nshutdownGracePeriodCriticalPods: 10s\n")
	write("d/ignored.yaml", "cgroupRoot: /never\n")
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(filepath.Join(dir, "d", "15-sub"), 0o700))
	sub := write("d/15-sub/x.conf", "address: 10.0.0.2\n")

	k, err := ReadKubeletConfig([]string{"--config", file, "--config-dir=" + filepath.Join(dir, "d"), "--v=2"})
	if err != nil {
		t.Fatal(err)
	}
	if k.CgroupRoot != "/second" || k.Address != "10.0.0.2" || k.ShutdownGracePeriodCriticalPods.Duration != 10*time.Second {
		t.Errorf("merged config = %+v", k)
	}
	if want := []string{file, a, sub, b}; !reflect.DeepEqual(k.Files, want) {
		t.Errorf("files read = %v, want %v", k.Files, want)
	}
	if k.ShutdownDelay() != 30*time.Second {
		t.Errorf("shutdown delay = %v, want 30s", k.ShutdownDelay())
	}
}

func TestKubeletShutdownDelayIsTheSumByPodPriority(t *testing.T) {
	k := KubeletConfig{ShutdownGracePeriod: kubeletDuration{time.Minute}, ShutdownGracePeriodByPodPriority: []ShutdownGracePeriodAt{
		{Priority: 100000, ShutdownGracePeriodSeconds: 10}, {Priority: 0, ShutdownGracePeriodSeconds: 25},
	}}
	if got := k.ShutdownDelay(); got != 35*time.Second {
		t.Errorf("delay = %v, want 35s (the kubelet ignores shutdownGracePeriod when the list is given)", got)
	}
}

// The kubelet takes --config-dir without --config, as drop-ins over its
// defaults.
func TestReadKubeletConfigFromTheDropInsAlone(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "10.conf"), []byte("cgroupRoot: /dropin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := ReadKubeletConfig([]string{"--config-dir", dir})
	if err != nil || k.CgroupRoot != "/dropin" || k.File != "" {
		t.Errorf("got %+v, %v", k, err)
	}
}

func TestReadKubeletConfigWithoutConfigFlag(t *testing.T) {
	k, err := ReadKubeletConfig([]string{"--kubeconfig=/etc/kubelet.conf"})
	if err != nil || !reflect.DeepEqual(k, KubeletConfig{}) {
		t.Errorf("got %+v, %v; want nothing read and no error", k, err)
	}
}

func TestReadKubeletConfigErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("shutdownGracePeriod: [1, 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{bad, filepath.Join(dir, "missing.yaml")} {
		_, err := ReadKubeletConfig([]string{"--config=" + file})
		if err == nil || !strings.Contains(err.Error(), file) {
			t.Errorf("%s: error %v does not name the file", file, err)
		}
	}
}

func TestCgroupDriverIsTheFlagOverTheFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "kubelet.yaml")
	if err := os.WriteFile(file, []byte("cgroupDriver: systemd\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--config=" + file}, "systemd"},
		{[]string{"--config=" + file, "--cgroup-driver=cgroupfs"}, "cgroupfs"},
		{[]string{"--cgroup-driver", "systemd"}, "systemd"},
		{[]string{"--v=2"}, ""},
	} {
		k, err := ReadKubeletConfig(tc.args)
		if err != nil || k.CgroupDriver() != tc.want {
			t.Errorf("%q: cgroup driver %q, %v; want %q", tc.args, k.CgroupDriver(), err, tc.want)
		}
	}
}
