package mountns

import (
	"os"
	"path/filepath"
	"testing"
)

// fakeProc lays out a /proc with the links Own reads: self pointing at
// the process's directory, and each process's ns/mnt.
func fakeProc(t *testing.T, self string, mnt map[string]string) string {
	t.Helper()
	proc := t.TempDir()
	for p, ns := range mnt {
		dir := filepath.Join(proc, p, "ns")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(ns, filepath.Join(dir, "mnt")); err != nil {
			t.Fatal(err)
		}
	}
	if self != "" {
		if err := os.Symlink(self, filepath.Join(proc, "self")); err != nil {
			t.Fatal(err)
		}
	}
	return proc
}

func TestOwnTellsANamespaceOfNodeinitsOwnFromTheHosts(t *testing.T) {
	const host, ctr = "mnt:[4026531841]", "mnt:[4026532999]"
	for _, tc := range []struct {
		name      string
		pid, ppid int
		self      string
		mnt       map[string]string
		want      bool
	}{
		{"a container's PID 1, its /proc its pid namespace's", 1, 0, "1", map[string]string{"1": ctr}, true},
		{"PID 1 of unshare --pid --fork, seeing the host's /proc", 1, 0, "4242", map[string]string{"4242": host, "1": host}, false},
		{"a host pid namespace container: PID 1 is the host's init", 4242, 4200, "4242", map[string]string{"4242": ctr, "1": host, "4200": host}, true},
		{"under a parent in another namespace, PID 1 unreadable", 4242, 4200, "4242", map[string]string{"4242": ctr, "4200": host}, true},
		{"the host's own namespace, shared with PID 1 and the parent", 4242, 4200, "4242", map[string]string{"4242": host, "1": host, "4200": host}, false},
		{"nsenter -t 1 -m from a pod: PID 1's namespace, the parent in the pod's", 4242, 4200, "4242", map[string]string{"4242": host, "1": host, "4200": ctr}, false},
		{"the parent's namespace shared, PID 1 unreadable", 4242, 4200, "4242", map[string]string{"4242": ctr, "4200": ctr}, false},
		{"nothing readable but itself", 4242, 4200, "4242", map[string]string{"4242": ctr}, false},
		{"no /proc at all", 4242, 4200, "", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := own(fakeProc(t, tc.self, tc.mnt), tc.pid, tc.ppid); got != tc.want {
				t.Fatalf("own = %v; want %v", got, tc.want)
			}
		})
	}
}

// The test runs in the mount namespace of its parent (go test), so on
// the real /proc it is not its own.
func TestOwnIsFalseInTheParentsNamespace(t *testing.T) {
	if Own() {
		t.Fatal("Own() = true for a test that shares its parent's mount namespace")
	}
}

// A marker counts only with a namespace other than this one and this
// process's own mark: one set by hand or left over is not taken for a
// re-exec, so nodeinit enters its namespace anyway.
func TestValidMarkerOnlyFromThisProcesssReexec(t *testing.T) {
	mark, err := ProcessMark()
	if err != nil {
		t.Fatal(err)
	}
	current, err := Current()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		marker string
		want   bool
	}{
		{"mnt:[1];self=" + mark, true},
		{"mnt:[1]", false},
		{"mnt:[1];self=", false},
		{"mnt:[1];self=1/2/3:4", false},
		{current + ";self=" + mark, false},
		{"", false},
	} {
		if got := ValidMarker(tc.marker); got != tc.want {
			t.Errorf("ValidMarker(%q) = %v; want %v", tc.marker, got, tc.want)
		}
	}
}
