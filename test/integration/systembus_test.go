package integration

import (
	"net"
	"path/filepath"
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

// The pass-through can be turned off: then the container's system bus is as
// good as absent, and a kubelet on the systemd cgroup driver is refused in
// one line that names the setting; left on, the same node starts.
func TestThePassThroughCanBeTurnedOff(t *testing.T) {
	_, task := binaries(t)
	sock := filepath.Join(t.TempDir(), "system_bus_socket")
	ln, err := net.Listen("unix", sock)
	must(t, err)
	defer ln.Close()
	env := []string{"DBUS_SYSTEM_BUS_ADDRESS=unix:path=" + sock}

	off := testenv.Launch(t, testenv.Options{Env: env},
		"--run-proxy=false", "--graceful-node-shutdown", "--system-bus-pass-through=false", "--", task, "--cgroup-driver=systemd")
	if code := off.Wait(10 * time.Second); code != 1 {
		t.Fatalf("pass-through off: exit %d, want 1; log:\n%s", code, off.Log())
	}
	if lines := off.Lines('E', "cgroup driver is systemd", "--system-bus-pass-through=false"); len(lines) != 1 {
		t.Errorf("pass-through off: want one line naming the setting; log:\n%s", off.Log())
	}

	report := filepath.Join(t.TempDir(), "executor.json")
	on := testenv.Launch(t, testenv.Options{Env: env},
		"--run-proxy=false", "--graceful-node-shutdown", "--", task, "--cgroup-driver=systemd", "--report="+report)
	on.WaitForFile(10*time.Second, report)
	on.WaitForLog(time.Second, 'I', "pass through to the container's system bus", sock)
	if code := on.Stop(10 * time.Second); code != 0 {
		t.Errorf("pass-through on: exit %d after TERM, want 0; log:\n%s", code, on.Log())
	}
}
