package integration

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// With --log-dir on a disk that fills up, nodeinit goes on as before: the
// signals it passes on arrive, a crash-looping proxy and its orphans are
// reaped, and no zombie is left. Writes are dropped whole and counted: the
// failure is logged once per task, and so is the first write that works
// again, with how much was lost; the rest is counted when the files close,
// so that every line written is either in a file or counted as dropped.
func TestAFullLogDiskBlocksNeitherReapingNorSignals(t *testing.T) {
	_, task := binaries(t)
	// A 1 MiB disk that holds a backup of 256 KiB made a minute ago, which
	// no rotation expires (--max-log-backups=0 keeps all): the disk is
	// full until the test removes it.
	logs := testenv.Tmpfs(t, 1<<20)
	backup := filepath.Join(logs, "executor-"+time.Now().Add(-time.Minute).UTC().Format("2006-01-02T15-04-05.000")+".log")
	must(t, os.WriteFile(backup, make([]byte, 256<<10), 0o600))
	dir := t.TempDir()
	ex, starts := filepath.Join(dir, "executor"), filepath.Join(dir, "starts")
	began := time.Now()
	// The executor's 50,000 lines (3.2 MB) fill the disk; the proxy writes
	// 2,000 more, makes 20 orphans and exits, every 50 ms.
	const executorLines, proxyLines = 50000, 2000
	n := testenv.Launch(t, testenv.Options{PID1: true}, "--log-dir="+logs, "--max-log-size=1Mi", "--max-log-backups=0",
		"--proxy-path="+task, "--proxy-arg=--lines="+strconv.Itoa(proxyLines), "--proxy-arg=--orphans=20",
		"--proxy-arg=--lifetime=1ns", "--proxy-arg=--exit=1", "--proxy-arg=--starts="+starts,
		"--proxy-restart-backoff=50ms", "--proxy-restart-backoff-max=50ms",
		"--", task, "--lines="+strconv.Itoa(executorLines), "--record="+ex+".rec", "--ready="+ex+".ready")
	full := n.WaitForLog(20*time.Second, 'E', "Writing a task's output to its log file failed", `task="executor"`)
	filled := time.Since(began)
	if !strings.Contains(full, "no space left on device") {
		t.Fatalf("the first failure is not the full disk's: %s", full)
	}
	// The proxy's 130 KB a start fill what the executor left within a few
	// starts; from then on each of its starts is dropped.
	n.WaitForLog(20*time.Second, 'E', "Writing a task's output to its log file failed", `task="proxy"`)

	// Two seconds of a full disk, and 10 proxy starts at least: a USR2
	// every 20 ms or so, each passed on before the next is sent (two
	// pending at once would be one). Not HUP: nodeinit passes HUP to the
	// proxy's process group too, where it kills the helper process that
	// each proxy start forks for its orphans before it has a handler, and
	// that start then ends before it writes its lines. The number of starts
	// is waited for rather than timed: a start takes longer on a loaded
	// machine, and a reaper held by the full disk makes none at all.
	startsBefore := countLines(t, starts)
	sigs, slowest := 0, time.Duration(0)
	deadline := time.Now().Add(30 * time.Second)
	for t0 := time.Now(); time.Since(t0) < 2*time.Second || countLines(t, starts)-startsBefore < 10; sigs++ {
		if time.Now().After(deadline) {
			t.Fatalf("the proxy started %d times in 30 s of a full disk; want 10 (one every 50 ms)", countLines(t, starts)-startsBefore)
		}
		sent := time.Now()
		n.Signal(syscall.SIGUSR2)
		testenv.WaitFor(t, 5*time.Second, "the USR2 passed on", func() bool {
			return strings.Count(recorded(ex+".rec"), "USR2") == sigs+1
		})
		slowest = max(slowest, time.Since(sent))
		time.Sleep(20 * time.Millisecond)
	}
	var fs unix.Statfs_t
	must(t, unix.Statfs(logs, &fs))
	// Bsize is an int64 on amd64, a uint32 on s390x.
	if free := int64(fs.Bavail) * int64(fs.Bsize); free >= 64<<10 {
		t.Errorf("the log disk has %d bytes free after the signals; want it full, less than the proxy's 128 KB", free)
	}
	respawned := countLines(t, starts) - startsBefore
	pid := n.Pid()
	testenv.WaitFor(t, 10*time.Second, "no zombie", func() bool { return len(testenv.Zombies(pid)) == 0 })

	// Room again: the backup goes, and the proxy's lines reach its file.
	proxyLog := filepath.Join(logs, "proxy.log")
	before := fileLines(t, proxyLog)
	freed := time.Now()
	must(t, os.Remove(backup))
	testenv.WaitFor(t, 20*time.Second, "the proxy's lines written again", func() bool { return fileLines(t, proxyLog) > before+proxyLines })
	resumed := time.Since(freed)
	if code := n.Stop(10 * time.Second); code != 0 {
		t.Fatalf("nodeinit exited %d", code)
	}

	for _, task := range []string{"executor", "proxy"} {
		failed, again := n.Lines('E', "log file failed", `task="`+task+`"`), n.Lines('I', "log file works again", `task="`+task+`"`)
		if len(failed) != 1 || len(again) > 1 {
			t.Errorf("the %s's loss was logged %d times and its recovery %d; want once each at most, within a minute:\n%s",
				task, len(failed), len(again), strings.Join(append(failed, again...), "\n"))
		}
	}
	// Every line of the executor's is in a file or counted as dropped,
	// once. (The proxy's last start may be ended before it writes.)
	var dropped, kept int
	for _, l := range n.Lines('I', "dropped", `task="executor"`) {
		_, v, _ := strings.Cut(l, "droppedLines=")
		d, err := strconv.Atoi(strings.Fields(v + " ")[0])
		must(t, err)
		dropped += d
	}
	files, err := filepath.Glob(filepath.Join(logs, "executor*.log"))
	must(t, err)
	for _, f := range files {
		kept += fileLines(t, f)
	}
	if dropped+kept != executorLines || dropped == 0 {
		t.Errorf("the executor wrote %d lines; %d are in its files and %d counted as dropped:\n%s",
			executorLines, kept, dropped, strings.Join(n.Lines('I', "dropped", `task="executor"`), "\n"))
	}
	t.Logf("1 MiB disk full %v after the start; while full %d USR2s passed on (the slowest in %v) and %d proxy starts reaped (20 orphans each); "+
		"its lines written again %v after room came back; of the executor's %d lines %d kept, %d dropped and counted",
		filled.Round(time.Millisecond), sigs, slowest.Round(time.Millisecond), respawned, resumed.Round(time.Millisecond), executorLines, kept, dropped)
}

// fileLines counts the lines in a file; a missing file has none.
func fileLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return 0
	}
	must(t, err)
	return bytes.Count(b, []byte{'\n'})
}
