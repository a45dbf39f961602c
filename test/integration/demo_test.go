package integration

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// The README's `make demo`: nodeinit as PID 1 with the demo executor and
// proxy, stopped by Ctrl-C (INT). Both demo programs must take the flags
// nodeinit passes them, or the proxy would crash-loop.
func TestDemoRunsAndStopsGracefullyOnInt(t *testing.T) {
	testenv.RequireRoot(t)
	executor := testenv.Build(t, "./test/helpers/demo-executor")
	proxy := testenv.Build(t, "./test/helpers/demo-proxy")
	i := start(t, asPID1, "--proxy-path="+proxy, "--proxy-arg=--interval=100ms", "--shutdown-grace-period=5s",
		"--", executor, "--interval=100ms", "--drain=100ms")
	testenv.WaitFor(t, 10*time.Second, "heartbeats and rule syncs", func() bool {
		l := i.Log()
		return strings.Contains(l, "heartbeat 3") && strings.Contains(l, "synced service rules")
	})
	i.Signal(syscall.SIGINT)
	if got := i.Wait(10 * time.Second); got != 0 {
		t.Fatalf("exit %d; log:\n%s", got, i.Log())
	}
	for _, want := range []string{"got interrupt: draining pods", "[demo-proxy] got terminated: exiting 0"} {
		if !strings.Contains(i.Log(), want) {
			t.Errorf("demo log lacks %q:\n%s", want, i.Log())
		}
	}
	// Each heartbeat leaves an orphan, and three were logged.
	if n, ok := orphansReaped(i); !ok || n < 3 {
		t.Errorf("the demo's last line counts %d orphans reaped (found: %v), want at least the three heartbeats':\n%s", n, ok, testenv.Tail(i.Log(), 3))
	}
	if strings.Contains(i.Log(), "Restarted task") {
		t.Errorf("the demo proxy restarted:\n%s", i.Log())
	}
}
