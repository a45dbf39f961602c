package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// A kubelet with the systemd cgroup driver reaches systemd on the system
// bus, which with graceful node shutdown is nodeinit's: where the container
// has no system bus to pass those calls to, nodeinit refuses to start, in
// one line that says what to do.
func TestAKubeletOnSystemdCgroupsWithoutASystemBusIsRefused(t *testing.T) {
	_, task := binaries(t)
	i := testenv.Launch(t, testenv.Options{Env: []string{"DBUS_SYSTEM_BUS_ADDRESS=unix:path=/nonexistent/system_bus_socket"}},
		"--run-proxy=false", "--graceful-node-shutdown", "--", task, "--cgroup-driver=systemd")
	if code := i.Wait(10 * time.Second); code != 1 {
		t.Fatalf("exit %d, want 1; log:\n%s", code, i.Log())
	}
	lines := i.Lines('E', "Cannot serve login1 for graceful node shutdown", "cgroup driver is systemd",
		"there is no socket at /nonexistent/system_bus_socket", "mount the host's /run/dbus/system_bus_socket")
	if len(lines) != 1 || strings.Count(i.Log(), "cgroup driver is systemd") != 1 {
		t.Errorf("want one line that says why; log:\n%s", i.Log())
	}
}
