package cgroups

import (
	"strings"
	"testing"
)

// The cgroup mounts and /proc/self/cgroup as the kernel shows them in and
// out of a private cgroup namespace (seen on this project's machines with
// unshare --cgroup: a mount made outside the namespace shows its root as
// "/.." per level above the namespace's root, one made inside as "/").
// Only a mount that shows the namespace's own tree is one nodeinit may
// evacuate, join through or hand to the kubelet.
func TestNamespaceView(t *testing.T) {
	tests := []struct {
		host string
		// refused holds the words of the one-line error, none when the
		// view is consistent.
		refused []string
		// evacuate is evacuateByDefault as PID 1; rootReachable says the
		// first hierarchy's mount reaches the namespace root.
		evacuate, rootReachable bool
	}{
		{host: "v2", evacuate: true, rootReachable: true},
		{host: "v2-host-namespace", rootReachable: true},
		{host: "v2-private-host-tree", refused: []string{"the cgroup mount at /sys/fs/cgroup (cgroup /../../..) shows cgroups above or beside the root of nodeinit's private cgroup namespace",
			"run the container with --cgroupns=host, or do not mount the host's /sys/fs/cgroup into it"}},
		{host: "v2-private-beside", refused: []string{"the cgroup mount at /sys/fs/cgroup (cgroup /../other.slice) shows"}},
		{host: "v1-private-host-tree", refused: []string{
			"the cgroup mounts at /sys/fs/cgroup/cpu,cpuacct (cgroup /..), /sys/fs/cgroup/memory (cgroup /../..), /sys/fs/cgroup/pids (cgroup /..) show cgroups above or beside",
			"--cgroupns=host"}},
		{host: "v2-outside-own-namespace", rootReachable: true},
		{host: "hybrid", rootReachable: true},
		{host: "v1", rootReachable: true},
		{host: "docker-v1"}, // its name=systemd mount shows /docker/4f1e only
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			l, err := ReadLayout(fakeRoot(t, tt.host, nil, nil))
			if err != nil {
				t.Fatal(err)
			}
			err = checkNamespaceView(l)
			switch {
			case len(tt.refused) == 0 && err != nil:
				t.Errorf("refused: %v", err)
			case len(tt.refused) > 0 && err == nil:
				t.Errorf("accepted, want an error saying %q", tt.refused)
			case err != nil:
				for _, w := range tt.refused {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				if strings.Contains(err.Error(), "\n") {
					t.Errorf("error of more than one line: %q", err)
				}
			}
			if got := evacuateByDefault(1, l); got != tt.evacuate {
				t.Errorf("evacuateByDefault as PID 1 = %v, want %v", got, tt.evacuate)
			}
			if _, ok := l.Hierarchies[0].Dir("/", "/"); ok != tt.rootReachable {
				t.Errorf("the %s mount (cgroup %s) reaches the namespace root: %v, want %v", l.Hierarchies[0].Name(), l.Hierarchies[0].Root, ok, tt.rootReachable)
			}
			// nodeinit's own cgroup is never resolved below a mount that
			// does not show it.
			for _, h := range l.Hierarchies {
				if dir, ok := h.Dir("/", h.Current); ok && (outsideNamespace(h.Root) || outsideNamespace(h.Current)) {
					t.Errorf("the %s hierarchy resolves cgroup %s below a mount of %s, at %s", h.Name(), h.Current, h.Root, dir)
				}
			}
		})
	}
}
