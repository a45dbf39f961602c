package logfile

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The test binary plays the task: with LOGFILE_HELPER set it writes to its
// stdout and stderr as told and exits, instead of running the tests.
func TestMain(m *testing.M) {
	if mode := os.Getenv("LOGFILE_HELPER"); mode != "" {
		os.Exit(helper(mode, os.Args[len(os.Args)-3:]))
	}
	os.Exit(m.Run())
}

// helper "lines PREFIX FIRST COUNT" writes numbered lines to stdout through
// a buffer of an odd size, so that most write calls end inside a line, then
// one line to stderr; "perline PREFIX FIRST COUNT" writes each line with a
// write of its own, as klog does. "partial TEXT _ _" writes TEXT as it is, "long N _ _"
// writes longText(N).
func helper(mode string, args []string) int {
	switch mode {
	case "lines":
		first, _ := strconv.Atoi(args[1])
		count, _ := strconv.Atoi(args[2])
		w := bufio.NewWriterSize(os.Stdout, 3001)
		for i := first; i < first+count; i++ {
			fmt.Fprintln(w, line(args[0], i))
		}
		if err := w.Flush(); err != nil {
			return 1
		}
		fmt.Fprintf(os.Stderr, "%s stderr after %d\n", args[0], first+count-1)
		return 0
	case "perline":
		first, _ := strconv.Atoi(args[1])
		count, _ := strconv.Atoi(args[2])
		for i := first; i < first+count; i++ {
			if _, err := os.Stdout.WriteString(line(args[0], i) + "\n"); err != nil {
				return 1
			}
		}
		return 0
	case "partial":
		os.Stdout.WriteString(args[0])
		return 0
	case "long":
		n, _ := strconv.Atoi(args[0])
		os.Stdout.WriteString(longText(n))
		return 0
	}
	return 2
}

// line is line number i of a task: of varying length, up to ~120 bytes.
func line(prefix string, i int) string {
	return fmt.Sprintf("%s %08d %s", prefix, i, strings.Repeat("x", i%101))
}

// runHelper runs the test binary as a task writing to out, and waits for it.
func runHelper(t *testing.T, out *os.File, mode string, args ...string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), "LOGFILE_HELPER="+mode)
	cmd.Stdout = out
	cmd.Stderr = out
	if err := cmd.Run(); err != nil {
		t.Errorf("helper %s %.60q: %v", mode, args, err)
	}
}

// closeBound is the tests' bound on Close: far above what a drain takes.
const closeBound = 10 * time.Second

func newPump(t *testing.T, dir string) *Pump {
	t.Helper()
	p, err := NewPump(Rotation{Dir: dir, MaxSizeMiB: 1})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// files returns the log files of a task, oldest first: the backups by their
// timestamp, then the current file.
func files(t *testing.T, dir, name string) []string {
	t.Helper()
	backups, err := filepath.Glob(filepath.Join(dir, name+"-*.log"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(backups)
	return append(backups, filepath.Join(dir, name+".log"))
}

// checkLines checks that the task's files hold exactly want, in order, that
// no file ends inside a line and none is above 1 MiB. It returns the number
// of backups.
func checkLines(t *testing.T, dir, name string, want []string) int {
	t.Helper()
	paths := files(t, dir, name)
	var got []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 1<<20 {
			t.Errorf("%s has %d bytes, above the 1 MiB maximum", p, len(b))
		}
		if len(b) > 0 && b[len(b)-1] != '\n' {
			t.Errorf("%s ends inside a line: %q", p, b[max(0, len(b)-40):])
		}
		got = append(got, strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")...)
	}
	if len(got) != len(want) {
		t.Errorf("%s: %d lines across %d files, want %d", name, len(got), len(paths), len(want))
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Fatalf("%s: line %d is %q, want %q (lost, duplicated or out of order)", name, i, trim(got[i]), trim(want[i]))
		}
	}
	return len(paths) - 1
}

// longText is a line of n bytes between two short lines.
func longText(n int) string {
	return "short\n" + strings.Repeat("y", n) + "\nafter\n"
}

func trim(s string) string { return s[:min(len(s), 30)] }

// expected is what a helper "lines" run of first..first+count-1 writes.
func expected(prefix string, first, count int) []string {
	var want []string
	for i := first; i < first+count; i++ {
		want = append(want, line(prefix, i))
	}
	return append(want, fmt.Sprintf("%s stderr after %d", prefix, first+count-1))
}

func TestEveryLineArrivesOnceAcrossRotations(t *testing.T) {
	dir := t.TempDir()
	p := newPump(t, dir)
	out, err := p.Add("executor")
	if err != nil {
		t.Fatal(err)
	}
	p.Start()
	const n = 60000 // ~4 MiB
	runHelper(t, out, "lines", "executor", "0", strconv.Itoa(n))
	if err := p.Close(closeBound); err != nil {
		t.Fatal(err)
	}
	if backups := checkLines(t, dir, "executor", expected("executor", 0, n)); backups < 3 {
		t.Errorf("%d rotations, want at least 3", backups)
	}
}

// A task that writes line by line is read many lines at a time: the pump
// does not wake for every line. A read that takes less than coalesceBelow
// is followed by a pause of coalesceFor, so there are at most as many such
// reads as milliseconds, and the others take coalesceBelow each.
func TestLinesWrittenOneByOneAreReadTogether(t *testing.T) {
	dir := t.TempDir()
	p := newPump(t, dir)
	out, err := p.Add("executor")
	if err != nil {
		t.Fatal(err)
	}
	if !p.order[0].coalesce {
		t.Fatal("the pipe was not enlarged: reads cannot wait for more")
	}
	p.Start()
	const n = 20000
	start := time.Now()
	runHelper(t, out, "perline", "executor", "0", strconv.Itoa(n))
	if err := p.Close(closeBound); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	var want []string
	size := 0
	for i := range n {
		want = append(want, line("executor", i))
		size += len(want[i]) + 1
	}
	checkLines(t, dir, "executor", want)
	reads, most := p.order[0].reads, int(took/coalesceFor)+size/coalesceBelow+10
	if reads > most {
		t.Errorf("%d lines written one by one in %s took %d reads, want at most %d", n, took, reads, most)
	}
	t.Logf("%d lines written one by one in %s took %d reads", n, took, reads)
}

func TestTwoTasksWriteAtOnce(t *testing.T) {
	dir := t.TempDir()
	p := newPump(t, dir)
	outs := map[string]*os.File{}
	for _, name := range []string{"executor", "proxy"} {
		out, err := p.Add(name)
		if err != nil {
			t.Fatal(err)
		}
		outs[name] = out
	}
	p.Start()
	const n = 40000
	var wg sync.WaitGroup
	for name, out := range outs {
		wg.Go(func() { runHelper(t, out, "lines", name, "0", strconv.Itoa(n)) })
	}
	wg.Wait()
	if err := p.Close(closeBound); err != nil {
		t.Fatal(err)
	}
	for name := range outs {
		if backups := checkLines(t, dir, name, expected(name, 0, n)); backups < 2 {
			t.Errorf("%s: %d rotations, want at least 2", name, backups)
		}
	}
}

func TestRespawnedTaskWritesOnInTheSameFile(t *testing.T) {
	dir := t.TempDir()
	p := newPump(t, dir)
	out, err := p.Add("proxy")
	if err != nil {
		t.Fatal(err)
	}
	p.Start()
	const n = 15000
	runHelper(t, out, "lines", "proxy", "0", strconv.Itoa(n))
	runHelper(t, out, "lines", "proxy", strconv.Itoa(n), strconv.Itoa(n))
	if err := p.Close(closeBound); err != nil {
		t.Fatal(err)
	}
	want := append(expected("proxy", 0, n), expected("proxy", n, n)...)
	if backups := checkLines(t, dir, "proxy", want); backups < 1 {
		t.Errorf("%d rotations, want at least 1", backups)
	}
}

func TestLastLineWithoutNewlineIsWrittenAtClose(t *testing.T) {
	dir := t.TempDir()
	p := newPump(t, dir)
	out, err := p.Add("executor")
	if err != nil {
		t.Fatal(err)
	}
	p.Start()
	runHelper(t, out, "partial", "first line\nno newline at the end", "_", "_")
	// The unfinished line stays in the pump until Close.
	if err := p.Close(closeBound); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "executor.log"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), "first line\nno newline at the end"; got != want {
		t.Errorf("executor.log = %q, want %q", got, want)
	}
}

// A line longer than the buffer is written in pieces, all of it; in a file
// large enough for the whole line, so that no rotation comes between them.
func TestLineLongerThanTheBufferIsWrittenWhole(t *testing.T) {
	dir := t.TempDir()
	p, err := NewPump(Rotation{Dir: dir, MaxSizeMiB: 8})
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Add("executor")
	if err != nil {
		t.Fatal(err)
	}
	p.Start()
	n := 3*bufferSize + 17
	runHelper(t, out, "long", strconv.Itoa(n), "_", "_")
	if err := p.Close(closeBound); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "executor.log"))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != longText(n) {
		t.Errorf("executor.log has %d bytes, want the %d written", len(b), len(longText(n)))
	}
}

// An orphan of a task may keep the write end open after the task is gone:
// Close must drain what is there and return without waiting for it.
func TestCloseDoesNotWaitForALingeringWriter(t *testing.T) {
	dir := t.TempDir()
	p := newPump(t, dir)
	out, err := p.Add("executor")
	if err != nil {
		t.Fatal(err)
	}
	p.Start()
	orphan, err := unix.Dup(int(out.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(orphan)
	if _, err := unix.Write(orphan, []byte("from the orphan\n")); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- p.Close(closeBound) }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for a writer that never closes")
	}
	b, _ := os.ReadFile(filepath.Join(dir, "executor.log"))
	if string(b) != "from the orphan\n" {
		t.Errorf("executor.log = %q, want the orphan's line", b)
	}
}

func TestExistingLogIsAppendedTo(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "executor.log")
	if err := os.WriteFile(path, []byte("from the previous run\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := newPump(t, dir)
	out, err := p.Add("executor")
	if err != nil {
		t.Fatal(err)
	}
	p.Start()
	runHelper(t, out, "partial", "from this run\n", "_", "_")
	if err := p.Close(closeBound); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if want := "from the previous run\nfrom this run\n"; string(b) != want {
		t.Errorf("executor.log = %q, want %q", b, want)
	}
}

func TestLogDirThatCannotBeCreatedIsAnErrorNamingIt(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(file, "logs")
	_, err := NewPump(Rotation{Dir: dir, MaxSizeMiB: 1})
	if err == nil || !strings.Contains(err.Error(), dir) {
		t.Fatalf("NewPump(%s) = %v, want an error naming the dir", dir, err)
	}
}

func TestLogFileThatCannotBeOpenedIsAnErrorNamingIt(t *testing.T) {
	dir := t.TempDir()
	// A link into a directory that does not exist: no one, root included,
	// can create the file.
	if err := os.Symlink(filepath.Join(dir, "missing", "proxy.log"), filepath.Join(dir, "proxy.log")); err != nil {
		t.Fatal(err)
	}
	p := newPump(t, dir)
	defer p.Close(closeBound)
	_, err := p.Add("proxy")
	if want := filepath.Join(dir, "proxy.log"); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Add(proxy) = %v, want an error naming %s", err, want)
	}
}

func TestRotationIsValidated(t *testing.T) {
	for _, tc := range []struct {
		rot  Rotation
		want string
	}{
		{Rotation{MaxSizeMiB: 1}, "log dir is empty"},
		{Rotation{Dir: "d", MaxSizeMiB: 0}, "below the minimum of 1 MiB"},
		{Rotation{Dir: "d", MaxSizeMiB: 1, MaxBackups: -1}, "max log backups -1 is negative"},
		{Rotation{Dir: "d", MaxSizeMiB: 1, MaxAgeDays: -2}, "max log age -2 days is negative"},
		{Rotation{Dir: "d", MaxSizeMiB: 10, MaxBackups: 5, MaxAgeDays: 7}, ""},
	} {
		err := tc.rot.validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v.validate() = %v, want %q", tc.rot, err, tc.want)
		}
	}
}

func TestAddIsRefusedAfterStartAndForADuplicateName(t *testing.T) {
	p := newPump(t, t.TempDir())
	defer p.Close(closeBound)
	if _, err := p.Add("executor"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Add("executor"); err == nil {
		t.Error("a second Add(executor) succeeded")
	}
	if _, err := p.Add("../x"); err == nil {
		t.Error("Add(../x) succeeded")
	}
	p.Start()
	if _, err := p.Add("proxy"); err == nil {
		t.Error("Add after Start succeeded")
	}
}

func TestPipeEndsAreNotInherited(t *testing.T) {
	p := newPump(t, t.TempDir())
	defer p.Close(closeBound)
	out, err := p.Add("executor")
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range []int{int(out.Fd()), p.order[0].rfd} {
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil {
			t.Fatal(err)
		}
		if flags&unix.FD_CLOEXEC == 0 {
			t.Errorf("fd %d is not close-on-exec", fd)
		}
	}
	if fl, _ := unix.FcntlInt(out.Fd(), unix.F_GETFL, 0); fl&unix.O_NONBLOCK != 0 {
		t.Error("the write end is non-blocking: a task would see EAGAIN on a full pipe")
	}
}
