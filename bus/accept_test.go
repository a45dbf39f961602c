package bus

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
