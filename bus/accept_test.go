package bus

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// fifoThreads counts the threads of the test process at real-time
// priority (SCHED_FIFO: policy 1, the 41st field of a thread's stat).
func fifoThreads(t *testing.T) int {
	t.Helper()
	stats, err := filepath.Glob("/proc/self/task/*/stat")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // a thread that has ended
		}
		// The fields after the command, which may hold spaces, in
		// parentheses: the 3rd field is the first of them.
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 38 && fields[38] == "1" {
			n++
		}
	}
	return n
}

// The accept loops run at real-time priority, each on a thread of its own
// that ends with it: none goes back to Go's threads for other work.
func TestTheAcceptLoopsRunAboveOrdinaryProcesses(t *testing.T) {
	testenv.RequireRoot(t)
	before := fifoThreads(t)
	b, err := listenTest(filepath.Join(t.TempDir(), "bus"), testOptions{}, defaultTunables())
	if err != nil {
		t.Fatal(err)
	}
	loops := b.loopCount()
	deadline := time.Now().Add(5 * time.Second)
	for fifoThreads(t)-before != loops {
		if time.Now().After(deadline) {
			b.Close()
			t.Fatalf("%d threads at real-time priority with the bus's %d accept loops, want %d", fifoThreads(t)-before, loops, loops)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for fifoThreads(t) != before {
		if time.Now().After(deadline) {
			t.Fatalf("%d threads still at real-time priority after Close", fifoThreads(t)-before)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A refusal on an accept loop allocates nothing: during a flood, what the
// loops allocate at the flood's rate is what makes Go's collector stop
// them, and a loop stopped lets the backlog fill.
func TestARefusalOnTheAcceptLoopAllocatesNothing(t *testing.T) {
	b, err := listenTest(filepath.Join(t.TempDir(), "bus"), testOptions{}, defaultTunables())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// The executor is another process: the test process, which floods,
	// is outside its tree.
	executor := exec.Command("sleep", "60")
	if err := executor.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		executor.Process.Kill()
		executor.Wait()
	}()
	if err := b.AdmitExecutor(executor.Process.Pid); err != nil {
		t.Fatal(err)
	}
	sa := &unix.SockaddrUnix{Name: b.path}
	flood := func(n int) {
		for range n {
			fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := unix.Connect(fd, sa); err != nil {
				t.Fatal(err)
			}
			unix.Close(fd)
		}
	}
	// The first refusal walks, remembers the test process and is logged.
	flood(100)
	refused(t, b, 100)
	// The counts are the whole process's: what goroutines an earlier test
	// left behind (a connection timing out, a log line) allocate in the
	// same window. So a flood is measured up to three times, and one
	// clean count is enough; a refusal that allocates fails all three.
	const n = 20000
	total := 100
	var allocs float64
	for range 3 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		flood(n)
		total += n
		refused(t, b, total)
		runtime.ReadMemStats(&after)
		allocs = float64(after.Mallocs-before.Mallocs) / n
		t.Logf("%.3f allocations, %.1f bytes per refusal; %d collections", allocs, float64(after.TotalAlloc-before.TotalAlloc)/n, after.NumGC-before.NumGC)
		if allocs <= 0.05 {
			return
		}
	}
	t.Errorf("%.3f allocations per refusal in the last of three floods, want none", allocs)
}
