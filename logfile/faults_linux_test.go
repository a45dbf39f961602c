package logfile

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/internal/linux"
	"github.com/nodeinit/nodeinit/test/testenv"
)

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
// truncated away, so no line is split) and counted; the failure is logged
// once however many writes fail, and writing resumes, with one line saying
// how much was lost, once there is room again.
func TestFullDiskDropsWholeWritesCountsThemLogsOnceAndRecovers(t *testing.T) {
	dir := testenv.Tmpfs(t, 256<<10)
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
	resumed := "Writing a task's output to its log file works again"
	want := fmt.Sprintf("droppedLines=150 droppedBytes=%d droppedWrites=3", 3*len(dropped))
	if n := strings.Count(log, resumed); n != 1 || !strings.Contains(log, want) {
		t.Errorf("the recovery was logged %d times, want once, with %q:\n%s", n, want, log)
	}
}

// ext4 mounts a new ext4 file system of size bytes (mkfs.ext4 on a file,
// mount -o loop) at a new temporary directory. mkfs.ext4 keeps blocks there
// that no one may use, root included, for the file system's own needs:
// full, it has free blocks (f_bfree) and none available (f_bavail).
func ext4(t *testing.T, size int64) string {
	t.Helper()
	testenv.RequireRoot(t)
	mkfs, mount := testenv.RequireTool(t, "mkfs.ext4"), testenv.RequireTool(t, "mount")
	_, err := os.Stat("/dev/loop-control")
	testenv.Require(t, err == nil, "needs loop devices (/dev/loop-control) to mount an ext4 image")
	img := filepath.Join(t.TempDir(), "ext4.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mkfs, "-q", "-F", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4 %s: %v\n%s", img, err, out)
	}
	dir := t.TempDir()
	if out, err := exec.Command(mount, "-o", "loop", img, dir).CombinedOutput(); err != nil {
		t.Fatalf("mount -o loop %s: %v\n%s", img, err, out)
	}
	t.Cleanup(func() {
		// The loop device goes with the mount (mount -o loop sets it to
		// clear itself).
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	// mkfs.ext4 leaves lost+found, and root may write into the blocks kept
	// for it: only the blocks kept from everyone stay free once full.
	return dir
}

// fileSystems are the kinds of log disk the full-disk tests run on: tmpfs,
// whose free blocks are all available, and ext4, which keeps some free
// blocks from everyone.
var fileSystems = []struct {
	name  string
	mount func(t *testing.T) string
}{
	{"tmpfs", func(t *testing.T) string { return testenv.Tmpfs(t, 256<<10) }},
	{"ext4", func(t *testing.T) string { return ext4(t, 8<<20) }},
}

// A full disk takes a write that fits in what the file's last page has
// left: the write works, but the disk is still full, and the next longer
// write fails. That is no recovery: the failure is logged once, and the
// recovery once the disk has room again, counting every write dropped
// until then. On ext4 the full disk still has free blocks, which no write
// may use.
func TestAWriteIntoTheLastPageOfAFullDiskIsNoRecovery(t *testing.T) {
	for _, fs := range fileSystems {
		t.Run(fs.name, func(t *testing.T) { aWriteIntoTheLastPageOfAFullDiskIsNoRecovery(t, fs.mount(t)) })
	}
}

func aWriteIntoTheLastPageOfAFullDiskIsNoRecovery(t *testing.T, dir string) {
	logged := testenv.CaptureLog(t)
	f := openTestFile(t, dir, Rotation{})
	s := newStream("executor", f)
	first := []byte(strings.Repeat("a", 99) + "\n")
	s.write(first)
	filler := fill(t, dir)
	// More than the file's page has left, and less.
	dropped := []byte(strings.Repeat("b", 4999) + "\n")
	fits := []byte("fits in the last page\n")
	for range 3 {
		s.write(dropped)
		s.write(fits)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	last := []byte("after the disk had room again\n")
	s.write(last)
	want := string(first) + strings.Repeat(string(fits), 3) + string(last)
	if got := content(t, filepath.Join(dir, "executor.log")); string(got) != want {
		t.Errorf("executor.log = %q, want %q", got, want)
	}
	klog.Flush()
	log := logged.String()
	if n := strings.Count(log, "Writing a task's output to its log file failed"); n != 1 {
		t.Errorf("the failure was logged %d times, want once:\n%s", n, log)
	}
	resumed := "Writing a task's output to its log file works again"
	counts := fmt.Sprintf("droppedLines=3 droppedBytes=%d droppedWrites=3", 3*len(dropped))
	if n := strings.Count(log, resumed); n != 1 || !strings.Contains(log, counts) {
		t.Errorf("the recovery was logged %d times, want once, once the disk had room, with %q:\n%s", n, counts, log)
	}
}

// Writes that keep working for lossReportEvery after the last one dropped
// end the loss even where the file system says it has no room (one that
// reports no free blocks, or a full one whose writes all fit in the file's
// last page): the loss is reported within that bound.
func TestWritesThatWorkForAMinuteEndTheLoss(t *testing.T) {
	dir := testenv.Tmpfs(t, 256<<10)
	logged := testenv.CaptureLog(t)
	f := openTestFile(t, dir, Rotation{})
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.now = func() time.Time { return at }
	s := newStream("executor", f)
	s.write([]byte("before the disk filled\n"))
	fill(t, dir)
	s.write([]byte(strings.Repeat("b", 4999) + "\n"))
	resumed := "Writing a task's output to its log file works again"
	for _, after := range []time.Duration{time.Second, 30 * time.Second, lossReportEvery - time.Millisecond} {
		at = at.Add(after - at.Sub(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)))
		s.write([]byte("fits in the last page\n"))
		klog.Flush()
		if strings.Contains(logged.String(), resumed) {
			t.Fatalf("a write into the last page of a full disk %v after the drop was logged as a recovery:\n%s", after, logged.String())
		}
	}
	at = at.Add(time.Millisecond)
	s.write([]byte("fits in the last page\n"))
	klog.Flush()
	if n := strings.Count(logged.String(), resumed); n != 1 || !strings.Contains(logged.String(), "droppedWrites=1") {
		t.Errorf("writes that worked for %v after the drop were logged as a recovery %d times; want once, with the dropped write:\n%s", lossReportEvery, n, logged.String())
	}
}

// A disk that has room for a write now and then (a page freed, a line that
// fits in the file's last page) makes at most a line of nodeinit's log a
// minute each for the failures and the recoveries, and every dropped line
// is counted in one of them.
func TestADiskFullNowAndThenLogsAtMostTwoLinesAMinute(t *testing.T) {
	dir := testenv.Tmpfs(t, 1<<20)
	logged := testenv.CaptureLog(t)
	f := openTestFile(t, dir, Rotation{})
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.now = func() time.Time { return at }
	s := newStream("executor", f)
	// Longer than a page: it never fits in what the file's last page has
	// left.
	line := []byte(strings.Repeat("c", 4999) + "\n")
	// 20 minutes of a full disk freed for a moment every 10 s: one write
	// in two is dropped.
	const rounds = 120
	for range rounds {
		filler := fill(t, dir)
		s.write(line)
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		s.write(line)
		at = at.Add(10 * time.Second)
	}
	s.reportLoss()
	klog.Flush()
	log := logged.String()
	failed := strings.Count(log, "Writing a task's output to its log file failed")
	resumed := strings.Count(log, "Writing a task's output to its log file works again")
	closed := strings.Count(log, "Closing a task's log file with output dropped")
	if failed > 21 || resumed > 21 || failed+resumed+closed < 2 {
		t.Errorf("over 20 minutes the failures were logged %d times and the recoveries %d; want at most once a minute each:\n%s", failed, resumed, log)
	}
	// The recoveries, and the close, each count what was dropped since the
	// last of them.
	var lines int64
	for _, l := range strings.Split(log, "\n") {
		if _, v, ok := strings.Cut(l, "droppedLines="); ok && !strings.Contains(l, "failed") {
			n, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			lines += n
		}
	}
	kept := int64(bytes.Count(content(t, filepath.Join(dir, "executor.log")), []byte{'\n'}))
	if lines != 2*rounds-kept || lines == 0 {
		t.Errorf("the log counts %d dropped lines; want %d, every one not in the file:\n%s", lines, 2*rounds-kept, log)
	}
	t.Logf("%d dropped lines over 20 minutes: %d lines for failures, %d for recoveries, %d at close", lines, failed, resumed, closed)
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
