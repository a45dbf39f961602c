package logfile

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openTestFile opens the executor's rotating file in dir, rotated at 1 MiB
// unless rot says otherwise.
func openTestFile(t *testing.T, dir string, rot Rotation) *rotatingFile {
	t.Helper()
	d, err := openDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.close)
	rot.Dir = dir
	if rot.MaxSizeMiB == 0 {
		rot.MaxSizeMiB = 1
	}
	f, err := openFile(d, "executor", rot)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.close() })
	return f
}

// chunk is a run of whole lines, numbered i, a little over half a MiB: the
// second of two chunks does not fit in a 1 MiB file, so every Write after
// the first rotates.
func chunk(i int) []byte {
	line := fmt.Sprintf("chunk %04d %s\n", i, strings.Repeat("x", 88))
	return bytes.Repeat([]byte(line), (1<<19)/len(line)+1)
}

func mustWrite(t *testing.T, f *rotatingFile, p []byte) {
	t.Helper()
	if err := f.Write(p); err != nil {
		t.Fatal(err)
	}
}

// outside makes a file outside the log dir, with content, that no trap may
// let nodeinit change, and returns its path.
func outside(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(p, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// untouched fails the test unless the file made by outside is as it was.
func untouched(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || string(b) != "precious\n" {
		t.Errorf("%s was changed through a trap in the log dir: %q, %v", path, b, err)
	}
}

func content(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// backups lists the regular backups of the executor in dir, oldest first.
func backups(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if _, ok := backupTime("executor", e.Name()); ok && e.Type().IsRegular() {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names
}

func TestLinkAsLogFileIsRefusedAndItsTargetUntouched(t *testing.T) {
	dir, target := t.TempDir(), outside(t)
	if err := os.Symlink(target, filepath.Join(dir, "executor.log")); err != nil {
		t.Fatal(err)
	}
	p := newPump(t, dir)
	defer p.Close(closeBound)
	_, err := p.Add("executor")
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "executor.log")+" is a symbolic link") {
		t.Fatalf("Add(executor) with a link as executor.log = %v, want a refusal naming it", err)
	}
	untouched(t, target)
	if l, err := os.Readlink(filepath.Join(dir, "executor.log")); err != nil || l != target {
		t.Errorf("the link was changed: %q, %v", l, err)
	}
}

func TestHardLinkAsLogFileIsRefused(t *testing.T) {
	dir, target := t.TempDir(), outside(t)
	if err := os.Link(target, filepath.Join(dir, "executor.log")); err != nil {
		t.Fatal(err)
	}
	d, err := openDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	if _, err := openFile(d, "executor", Rotation{Dir: dir, MaxSizeMiB: 1}); err == nil || !strings.Contains(err.Error(), "has 2 hard links") {
		t.Fatalf("openFile with a hard link as executor.log = %v, want a refusal", err)
	}
	untouched(t, target)
}

// A FIFO nobody reads would block an open for writing forever.
func TestFIFOAsLogFileIsRefusedWithoutBlocking(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "executor.log")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := openDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	if _, err := openFile(d, "executor", Rotation{Dir: dir, MaxSizeMiB: 1}); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("openFile with a FIFO as executor.log = %v, want a refusal", err)
	}
	// With a reader the open succeeds, and the file type refuses it.
	r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := openFile(d, "executor", Rotation{Dir: dir, MaxSizeMiB: 1}); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("openFile with a read FIFO as executor.log = %v, want a refusal", err)
	}
}

// A link planted under the name the next rotation would take is neither
// replaced nor followed: the backup takes the next millisecond's name.
func TestRotationDoesNotRenameOverALink(t *testing.T) {
	dir, target := t.TempDir(), outside(t)
	f := openTestFile(t, dir, Rotation{})
	at := time.Date(2026, 11, 30, 9, 7, 0, 123e6, time.UTC)
	f.now = func() time.Time { return at }
	link := filepath.Join(dir, backupName("executor", at))
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, f, chunk(0))
	mustWrite(t, f, chunk(1))
	untouched(t, target)
	if l, err := os.Readlink(link); err != nil || l != target {
		t.Errorf("the link at the backup's name was replaced: %q, %v", l, err)
	}
	if got := content(t, filepath.Join(dir, backupName("executor", at.Add(time.Millisecond)))); !bytes.Equal(got, chunk(0)) {
		t.Errorf("the backup one millisecond on holds %d bytes, want the first chunk", len(got))
	}
	if got := content(t, filepath.Join(dir, "executor.log")); !bytes.Equal(got, chunk(1)) {
		t.Errorf("executor.log holds %d bytes, want the second chunk", len(got))
	}
}

// Rotations within one millisecond keep every backup, in order, without
// waiting for the clock.
func TestRotationsInOneMillisecondKeepEveryBackup(t *testing.T) {
	dir := t.TempDir()
	f := openTestFile(t, dir, Rotation{})
	at := time.Date(2026, 11, 30, 9, 7, 0, 123e6, time.UTC)
	f.now = func() time.Time { return at }
	for i := range 4 {
		mustWrite(t, f, chunk(i))
	}
	want := []string{
		backupName("executor", at),
		backupName("executor", at.Add(time.Millisecond)),
		backupName("executor", at.Add(2*time.Millisecond)),
	}
	if got := backups(t, dir); !slices.Equal(got, want) {
		t.Fatalf("backups %v, want %v", got, want)
	}
	for i, name := range append(want, "executor.log") {
		if got := content(t, filepath.Join(dir, name)); !bytes.Equal(got, chunk(i)) {
			t.Errorf("%s does not hold chunk %d", name, i)
		}
	}
}

// Expiry counts and removes regular backups only: links under backup names,
// old as they are, stay, and what they point to is untouched.
func TestExpiryRemovesOnlyRegularBackups(t *testing.T) {
	dir, target := t.TempDir(), outside(t)
	targetDir := filepath.Dir(target)
	old := time.Now().Add(-72 * time.Hour)
	fileLink := filepath.Join(dir, backupName("executor", old))
	dirLink := filepath.Join(dir, backupName("executor", old.Add(time.Second)))
	oldBackup := filepath.Join(dir, backupName("executor", old.Add(2*time.Second)))
	if err := os.Symlink(target, fileLink); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(targetDir, dirLink); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(oldBackup, []byte("three days old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := openTestFile(t, dir, Rotation{MaxBackups: 2, MaxAgeDays: 1})
	if _, err := os.Stat(oldBackup); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a backup three days old survived the open with a maximum age of one day: %v", err)
	}
	for i := range 5 {
		mustWrite(t, f, chunk(i))
	}
	untouched(t, target)
	if entries, err := os.ReadDir(targetDir); err != nil || len(entries) != 1 {
		t.Errorf("the directory a link points to was changed: %v, %v", entries, err)
	}
	for _, l := range []string{fileLink, dirLink} {
		if _, err := os.Readlink(l); err != nil {
			t.Errorf("link %s under a backup's name was removed: %v", l, err)
		}
	}
	got := backups(t, dir)
	if len(got) != 2 {
		t.Fatalf("%d regular backups %v, want MaxBackups=2", len(got), got)
	}
	for i, name := range got {
		if c := content(t, filepath.Join(dir, name)); !bytes.Equal(c, chunk(i+2)) {
			t.Errorf("backup %s is not chunk %d: the newest must be kept", name, i+2)
		}
	}
}

// Once open, the directory is held: renaming it and putting a link in its
// place sends no write anywhere else.
func TestWritesFollowTheDirectoryNotItsPath(t *testing.T) {
	base := t.TempDir()
	dir, moved, elsewhere := filepath.Join(base, "logs"), filepath.Join(base, "moved"), filepath.Join(base, "elsewhere")
	for _, d := range []string{dir, elsewhere} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f := openTestFile(t, dir, Rotation{})
	mustWrite(t, f, chunk(0))
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, dir); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, f, chunk(1))
	mustWrite(t, f, chunk(2))
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Errorf("writes followed the path to %s: %v", elsewhere, entries)
	}
	if got := backups(t, moved); len(got) != 2 {
		t.Errorf("%d backups in the moved directory, want 2", len(got))
	}
	if got := content(t, filepath.Join(moved, "executor.log")); !bytes.Equal(got, chunk(2)) {
		t.Errorf("the moved directory's executor.log holds %d bytes, want the last chunk", len(got))
	}
}

// A file replaced by a rotation hands its permission bits on; a new one is
// 0600.
func TestRotationKeepsTheFileMode(t *testing.T) {
	dir := t.TempDir()
	f := openTestFile(t, dir, Rotation{})
	path := filepath.Join(dir, "executor.log")
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("a new log file has mode %v (%v), want 0600", fi.Mode(), err)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, f, chunk(0))
	mustWrite(t, f, chunk(1))
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("after a rotation executor.log has mode %v (%v), want 0640", fi.Mode(), err)
	}
}

// A log file already at its maximum size when nodeinit starts is rotated
// before the first write.
func TestFullLogFileIsRotatedAtOpen(t *testing.T) {
	dir := t.TempDir()
	full := bytes.Repeat([]byte("previous run\n"), (1<<20)/13+1)
	if err := os.WriteFile(filepath.Join(dir, "executor.log"), full, 0o600); err != nil {
		t.Fatal(err)
	}
	f := openTestFile(t, dir, Rotation{})
	mustWrite(t, f, chunk(0))
	got := backups(t, dir)
	if len(got) != 1 || !bytes.Equal(content(t, filepath.Join(dir, got[0])), full) {
		t.Fatalf("backups %v, want one holding the previous run's full file", got)
	}
	if !bytes.Equal(content(t, filepath.Join(dir, "executor.log")), chunk(0)) {
		t.Error("executor.log does not hold just the new chunk")
	}
}

// The configuration allows a maximum size of 8 EiB, which in bytes is one
// more than an int64 holds.
func TestLargestMaximumSizeDoesNotOverflow(t *testing.T) {
	for mib, want := range map[int]int64{1: 1 << 20, 10: 10 << 20, 1<<43 - 1: (1<<43 - 1) << 20, 1 << 43: math.MaxInt64} {
		if got := maxBytes(mib); got != want {
			t.Errorf("maxBytes(%d) = %d, want %d", mib, got, want)
		}
	}
}

func TestBackupNamesRoundTrip(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 678e6, time.UTC)
	name := backupName("proxy", at)
	if name != "proxy-2026-01-02T03-04-05.678.log" {
		t.Errorf("backupName = %s", name)
	}
	if got, ok := backupTime("proxy", name); !ok || !got.Equal(at) {
		t.Errorf("backupTime(%s) = %v, %v", name, got, ok)
	}
	for _, other := range []string{"proxy.log", "proxy-x-2026-01-02T03-04-05.678.log", "executor-2026-01-02T03-04-05.678.log",
		"proxy-2026-01-02T03-04-05.678.log.gz", "proxy-2026-01-02.log"} {
		if _, ok := backupTime("proxy", other); ok {
			t.Errorf("backupTime(proxy, %s) took it for a backup", other)
		}
	}
}
