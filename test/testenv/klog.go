package testenv

import (
	"flag"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2"
)

// Log is klog's output in a test's own process, every severity, one copy
// of each line. Goroutines the test started may write to it.
type Log struct {
	mu  sync.Mutex
	buf strings.Builder
}

// CaptureLog sends klog's output to the returned Log for the rest of the
// test, and back to stderr after. Nothing goes to klog's files: without
// this, a test that turned logtostderr off left klog's WARNING and ERROR
// files in the temporary directory.
func CaptureLog(tb testing.TB) *Log {
	l := &Log{}
	set := func(toStderr, oneOutput string) {
		fs := flag.NewFlagSet("klog", flag.PanicOnError)
		klog.InitFlags(fs)
		_ = fs.Set("logtostderr", toStderr)
		_ = fs.Set("one_output", oneOutput)
	}
	set("false", "true")
	klog.SetOutput(l)
	tb.Cleanup(func() {
		klog.Flush()
		set("true", "false")
	})
	return l
}

func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String is everything logged so far.
func (l *Log) String() string {
	klog.Flush()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Lines returns the lines logged so far that contain every one of subs.
func (l *Log) Lines(subs ...string) []string {
	var out []string
	for line := range strings.SplitSeq(l.String(), "\n") {
		ok := line != ""
		for _, s := range subs {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}

// WaitFor waits, at most 10s, for a line that contains every one of subs.
func (l *Log) WaitFor(tb testing.TB, subs ...string) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(l.Lines(subs...)) == 0 {
		if time.Now().After(deadline) {
			tb.Fatalf("no log line with %q within 10s", subs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
