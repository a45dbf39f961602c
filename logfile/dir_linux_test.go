package logfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// unsafeDir makes a directory with mode (umask aside) and, when uid is not
// -1, owner uid, and returns NewPump's error for it.
func unsafeDir(t *testing.T, mode os.FileMode, uid int) (string, error) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "logs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	if uid != -1 {
		if err := os.Chown(dir, uid, -1); err != nil {
			t.Fatal(err)
		}
	}
	p, err := NewPump(Rotation{Dir: dir, MaxSizeMiB: 1})
	if err == nil {
		p.Close(closeBound)
	}
	return dir, err
}

func TestWritableByOthersLogDirIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode os.FileMode
		want string
	}{
		{"group-writable", 0o775, "mode 0775 lets its group"},
		{"world-writable", 0o777, "mode 0777 lets every user write to it (sticky bit or not)"},
		{"world-writable with the sticky bit", 0o777 | os.ModeSticky, "mode 1777 lets every user write to it (sticky bit or not)"},
		{"writable by others only", 0o703, "mode 0703 lets every user write"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := unsafeDir(t, tc.mode, -1)
			if !errors.Is(err, errUnsafeDir) || !strings.Contains(err.Error(), dir+": "+tc.want) {
				t.Fatalf("NewPump(%s) = %v, want %q", dir, err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("the error is not one line: %q", err)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("a refused log dir was written to: %v", entries)
			}
		})
	}
}

func TestLogDirOwnedByAnotherUserIsRefused(t *testing.T) {
	testenv.RequireRoot(t)
	dir, err := unsafeDir(t, 0o755, 65534)
	if !errors.Is(err, errUnsafeDir) || !strings.Contains(err.Error(), dir+": owned by uid 65534, but it must be owned by root or by nodeinit's own uid 0") {
		t.Fatalf("NewPump(%s) owned by 65534 = %v, want a refusal naming the owner", dir, err)
	}
}

// Only its owner writing to it is what makes a directory safe: mode 0755 or
// 0700, owned by nodeinit's own user or root, and readable by all or not.
func TestLogDirWritableByItsOwnerOnlyIsAccepted(t *testing.T) {
	for _, mode := range []os.FileMode{0o755, 0o700, 0o750, 0o1755} {
		if dir, err := unsafeDir(t, mode, -1); err != nil {
			t.Errorf("NewPump(%s) with mode %v = %v", dir, mode, err)
		}
	}
}

// The rules themselves, for owners and modes a test cannot make without
// root.
func TestDirRules(t *testing.T) {
	for _, tc := range []struct {
		uid, euid int
		mode      uint32
		want      string
	}{
		{0, 0, 0o755, ""},
		{0, 1000, 0o755, ""},
		{1000, 1000, 0o755, ""},
		{1000, 1000, 0o700, ""},
		{1000, 0, 0o755, "owned by uid 1000, but it must be owned by root or by nodeinit's own uid 0"},
		{1001, 1000, 0o700, "owned by uid 1001, but it must be owned by root or by nodeinit's own uid 1000"},
		{0, 0, 0o775, "lets its group (gid 4) write"},
		{0, 0, 0o1777, "lets every user write"},
		{0, 0, 0o757, "lets every user write"},
		// The owner rule comes first: a stranger's directory is refused
		// whatever its mode.
		{1000, 0, 0o777, "owned by uid 1000"},
	} {
		st := unix.Stat_t{Uid: uint32(tc.uid), Gid: 4, Mode: unix.S_IFDIR | tc.mode}
		err := checkDir("/d", &st, tc.euid)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("uid %d, euid %d, mode %04o: %v, want %q", tc.uid, tc.euid, tc.mode, err, tc.want)
		}
	}
}
