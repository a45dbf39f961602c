package identity

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// decideWithin runs Decide and fails the test if it does not return within
// a bound: what lies in the identity dir must never hold PID 1.
func decideWithin(t *testing.T, o Options) (Plan, error) {
	t.Helper()
	type result struct {
		p   Plan
		err error
	}
	done := make(chan result, 1)
	go func() {
		p, err := Decide(o)
		done <- result{p, err}
	}()
	select {
	case r := <-done:
		return r.p, r.err
	case <-time.After(5 * time.Second):
		t.Fatalf("Decide did not return within 5 s")
		return Plan{}, nil
	}
}

// A FIFO, a link to /dev/zero, a link to a file elsewhere, a huge file or a
// directory where the kept ids are: Decide returns at once with one line
// naming the file, what it is, and what to do.
func TestDecideRefusesWhatIsNotAKeptIDFile(t *testing.T) {
	big := filepath.Join(t.TempDir(), "big")
	must(t, os.WriteFile(big, []byte(strings.Repeat(keptID+"\n", 1000)), 0o644))
	elsewhere := filepath.Join(t.TempDir(), "id")
	must(t, os.WriteFile(elsewhere, []byte(keptID+"\n"), 0o644))
	for _, tc := range []struct {
		name, what string
		make       func(path string) error
	}{
		{"a FIFO", "a FIFO", func(p string) error { return unix.Mkfifo(p, 0o644) }},
		{"a link to /dev/zero", "a symbolic link", func(p string) error { return os.Symlink("/dev/zero", p) }},
		{"a link to an id elsewhere", "a symbolic link", func(p string) error { return os.Symlink(elsewhere, p) }},
		{"a huge file", "too large", func(p string) error { return os.WriteFile(p, []byte(strings.Repeat(keptID+"\n", 1000)), 0o644) }},
		{"a directory", "a directory", func(p string) error { return os.Mkdir(p, 0o755) }},
	} {
		for _, file := range []string{"machine-id", "product_uuid"} {
			t.Run(tc.name+" as "+file, func(t *testing.T) {
				root := fakeRoot(t, map[string]string{"etc/machine-id": "uninitialized\n", "state": "/"})
				path := filepath.Join(root, "state", file)
				must(t, tc.make(path))
				_, err := decideWithin(t, Options{Root: root, StateDir: "/state", PID1: true, MachineID: true, ProductUUID: true})
				if err == nil {
					t.Fatalf("Decide took %s as the kept %s", tc.name, file)
				}
				msg := err.Error()
				t.Log(msg)
				if !strings.Contains(msg, "/state/"+file) || !strings.Contains(msg, tc.what) || !strings.Contains(msg, "remove it") || strings.Contains(msg, "\n") {
					t.Errorf("the error %q should name /state/%s, say it is %s, and say to remove it, on one line", msg, file, tc.what)
				}
			})
		}
	}
}

// The host's id read through PID 1's root is bounded and never waits: a
// FIFO there means no host id, and the node gets one of its own.
func TestDecideDoesNotWaitOnTheHostsMachineID(t *testing.T) {
	root := fakeRoot(t, map[string]string{"etc/machine-id": "uninitialized\n", "proc/1/root/etc": "/", "state": "/"})
	must(t, unix.Mkfifo(filepath.Join(root, "proc/1/root/etc/machine-id"), 0o644))
	p, err := decideWithin(t, Options{Root: root, StateDir: "/state", MachineID: true})
	must(t, err)
	if p.Source != Generated {
		t.Errorf("source %q, want generated", p.Source)
	}
}
