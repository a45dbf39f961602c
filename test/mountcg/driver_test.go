package mountcg

import (
	"testing"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// withContainerdConfig is the shell that shows nodeinit containerd's
// configuration $1 at /etc/containerd/config.toml and an empty /run (no
// systemd), in the test's private mount namespace, then execs the rest.
const withContainerdConfig = `mount -t tmpfs tmpfs /run && mount -t tmpfs tmpfs /etc/containerd &&
printf '%s' "$1" > /etc/containerd/config.toml || exit 99
shift
exec "$@"`

// A kubelet whose cgroup driver differs from containerd's, or that needs a
// systemd the container cannot reach: one warning line before the first
// fork says which and what to set, and the node runs (the kubelet gives
// its own error).
func TestKubeletCgroupDriverThatTheRuntimeOrHostDisagreesWith(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.Require(t, exists("/etc/containerd"), "/etc/containerd (containerd installed), to mount a configuration over")
	const config = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n"
	tests := []struct {
		name, driver string
		words        []string
	}{
		{"cgroupfs against containerd's systemd", "cgroupfs", []string{
			"the kubelet uses the cgroupfs cgroup driver and containerd the systemd one (SystemdCgroup = true in /etc/containerd/config.toml)",
			"set the same driver in both"}},
		{"systemd without systemd", "systemd", []string{
			"the kubelet uses the systemd cgroup driver, but /run/systemd/system does not exist",
			"set the kubelet's cgroupDriver to cgroupfs, or mount the host's /run"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := startNodeWith(t, nodeOptions{
				prefix:       []string{"/bin/sh", "-c", withContainerdConfig, "sh", config},
				executorArgs: []string{"--cgroup-driver=" + tt.driver},
			}, nil)
			n.waitReady()
			if w, named := n.cgroupWarnings(), n.Lines('W', tt.words...); len(w) != 1 || len(named) != 1 {
				t.Errorf("want one warning saying %q; log:\n%s", tt.words, n.Log())
			}
			if code := n.stop(); code != 0 {
				t.Errorf("nodeinit exited %d after TERM, want 0", code)
			}
		})
	}
}
