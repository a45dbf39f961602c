package integration

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// The login1 bus is the executor's alone: the proxy keeps the system bus
// address nodeinit itself was given, even though the executor's is replaced
// (the two environments once shared an array, and the replacement shifted
// the bus address into the proxy's).
func TestOnlyTheExecutorGetsTheNodesBus(t *testing.T) {
	_, task := binaries(t)
	dir := t.TempDir()
	own := "unix:path=/run/dbus/system_bus_socket"
	exeReport, proxyReport := filepath.Join(dir, "executor.json"), filepath.Join(dir, "proxy.json")
	i := testenv.Launch(t, testenv.Options{Env: []string{"DBUS_SYSTEM_BUS_ADDRESS=" + own, "ZZ_AFTER=1"}},
		"--graceful-node-shutdown", "--proxy-path="+task, "--proxy-arg=--report="+proxyReport,
		"--", task, "--report="+exeReport)
	i.WaitForFile(10*time.Second, exeReport)
	i.WaitForFile(10*time.Second, proxyReport)
	busOf := func(report string) []string {
		var out []string
		for _, kv := range testenv.ReadReport(t, report).Env {
			if a, ok := strings.CutPrefix(kv, "DBUS_SYSTEM_BUS_ADDRESS="); ok {
				out = append(out, a)
			}
		}
		return out
	}
	if got := busOf(proxyReport); len(got) != 1 || got[0] != own {
		t.Errorf("the proxy's DBUS_SYSTEM_BUS_ADDRESS: %q, want only nodeinit's own %q", got, own)
	}
	if got := busOf(exeReport); len(got) != 1 || !strings.Contains(got[0], "nodeinit-bus-") {
		t.Errorf("the executor's DBUS_SYSTEM_BUS_ADDRESS: %q, want only the node's bus", got)
	}
	if code := i.Stop(10 * time.Second); code != 0 {
		t.Errorf("exit %d after TERM, want the executor's 0", code)
	}
}
