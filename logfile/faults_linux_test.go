package logfile

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/internal/linux"
	"github.com/nodeinit/nodeinit/test/testenv"
)

// mountTmpfs mounts a tmpfs of size bytes on a new directory, for the test.
func mountTmpfs(t *testing.T, size int) string {
	t.Helper()
	testenv.RequireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
		t.Fatalf("mount a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes to a new file in dir until the file system is full, and
// returns its path.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, 4096)
	for {
		if _, err := f.Write(block); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("fill %s: %v", dir, err)
			}
			return path
		}
	}
}

// On a full disk a write is dropped whole (a write the disk cut short is
// truncated away, so no line is split), the failure is logged once however
// many writes fail, and writing resumes, with a line saying so, once there
// is room again.
func TestFullDiskDropsWholeWritesLogsOnceAndRecovers(t *testing.T) {
	dir := mountTmpfs(t, 256<<10)
	logged := testenv.CaptureLog(t)
	f := openTestFile(t, dir, Rotation{})
	s := newStream("executor", f)
	first := []byte("before the disk filled " + strings.Repeat("a", 76) + "\n")
	s.write(first)
	filler := fill(t, dir)
	// The file's one page has room for most of this, not all: the kernel
	// writes part of it before it fails.
	dropped := bytes.Repeat([]byte("dropped "+strings.Repeat("b", 91)+"\n"), 50)
	for range 3 {
		s.write(dropped)
	}
	if got := content(t, filepath.Join(dir, "executor.log")); !bytes.Equal(got, first) {
		t.Fatalf("on a full disk executor.log holds %d bytes ending %q, want only the %d written before",
			len(got), got[max(0, len(got)-20):], len(first))
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	last := []byte("after the disk had room again\n")
	s.write(last)
	if got := content(t, filepath.Join(dir, "executor.log")); string(got) != string(first)+string(last) {
		t.Errorf("after the disk had room executor.log = %q, want the lines before and after", got)
	}
	klog.Flush()
	log := logged.String()
	if n := strings.Count(log, "Writing a task's output to its log file failed"); n != 1 || !strings.Contains(log, "no space left on device") {
		t.Errorf("the failure was logged %d times, want once, naming the cause:\n%s", n, log)
	}
	if n := strings.Count(log, "Writing a task's output to its log file works again"); n != 1 {
		t.Errorf("the recovery was logged %d times, want once:\n%s", n, log)
	}
}

// A write to a hung log volume never returns; Close must return all the
// same, within its bound, saying what was not written. The task's file is
// swapped for a full pipe that nobody reads: a write to it blocks in the
// kernel just as one to a hung volume does, until the test reads from it.
func TestCloseIsBoundedWhenAWriteNeverReturns(t *testing.T) {
	dir := t.TempDir()
	p := newPump(t, dir)
	out, err := p.Add("executor")
	if err != nil {
		t.Fatal(err)
	}
	var hung [2]int
	if err := unix.Pipe2(hung[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(hung[0])
	for {
		if _, err := unix.Write(hung[1], make([]byte, 4096)); errors.Is(err, unix.EAGAIN) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.SetNonblock(hung[1], false); err != nil {
		t.Fatal(err)
	}
	s := p.order[0]
	s.file.close()
	s.file.fd = hung[1]
	p.Start()
	if _, err := out.WriteString("the stuck line\n"); err != nil {
		t.Fatal(err)
	}

	const bound = 300 * time.Millisecond
	start := time.Now()
	err = p.Close(bound)
	took := time.Since(start)
	want := fmt.Sprintf("log files not closed within %s: a write of 15 bytes to %s has not returned since ", bound, filepath.Join(dir, "executor.log"))
	if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
		t.Errorf("Close with a write that never returns = %v, want one line starting %q", err, want)
	}
	if took < bound || took > bound+2*time.Second {
		t.Errorf("Close returned after %s, want just after its bound of %s", took, bound)
	}
	if again := p.Close(bound); again == nil || again.Error() != err.Error() {
		t.Errorf("a second Close = %v, want the first one's error", again)
	}

	// The volume comes back: the write completes, the line arrives and the
	// copying goroutine ends.
	var got []byte
	buf := make([]byte, 64<<10)
	for !bytes.HasSuffix(got, []byte("the stuck line\n")) {
		readable := []unix.PollFd{{Fd: int32(hung[0]), Events: unix.POLLIN}}
		if n, err := linux.Poll(readable, 10_000); n != 1 {
			t.Fatalf("the stuck line never arrived once the write could go on (%v): %q", err, got)
		}
		n, err := unix.Read(hung[0], buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, bytes.TrimLeft(buf[:n], "\x00")...)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the copying goroutine did not end once its write returned")
	}
}
