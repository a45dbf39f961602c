package mountcg

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/nodeinit/nodeinit/mountns"
	"github.com/nodeinit/nodeinit/test/testenv"
)

func TestPrivateMountNamespaceHoldsNodeinitAndItsChildren(t *testing.T) {
	n := startNode(t, nil, "--private-mountns")
	executor, proxy := n.waitReady()
	pid, ok := n.nodeinitPid()
	if !ok {
		t.Fatal("nodeinit's pid not found")
	}
	// unshare made the mount namespace nodeinit started in (--mount-proc).
	started, err := os.Readlink("/proc/" + itoa(n.unshare.Process.Pid) + "/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	own, err := os.Readlink("/proc/" + itoa(pid) + "/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	if executor.MountNS != proxy.MountNS || executor.MountNS != own {
		t.Errorf("mount namespaces differ: nodeinit %s, executor %s, proxy %s", own, executor.MountNS, proxy.MountNS)
	}
	if own == started {
		t.Errorf("nodeinit stayed in the mount namespace it started in (%s)", started)
	}
	if executor.Ppid != 1 || proxy.Ppid != 1 {
		t.Errorf("executor's parent %d, proxy's %d: nodeinit is not PID 1 after the re-exec", executor.Ppid, proxy.Ppid)
	}
	if status := readProc(t, pid, "status"); !strings.Contains(status, "\nNSpid:\t"+itoa(pid)+"\t1\n") {
		t.Errorf("nodeinit is not PID 1 of its pid namespace:\n%s", status)
	}
	for who, env := range map[string][]string{"executor": executor.Env, "proxy": proxy.Env} {
		for _, kv := range env {
			if strings.HasPrefix(kv, mountns.MarkerEnv+"=") {
				t.Errorf("the %s's environment has nodeinit's marker %s", who, kv)
			}
		}
	}
	if code := n.stop(); code != 0 {
		t.Errorf("nodeinit exited %d after TERM, want 0", code)
	}
}

func TestMakeRSharedSharesRoot(t *testing.T) {
	n := startNode(t, nil, "--make-rshared")
	n.waitReady()
	pid, ok := n.nodeinitPid()
	if !ok {
		t.Fatal("nodeinit's pid not found")
	}
	mounts, err := mountns.ReadMountinfo("/proc/" + itoa(pid) + "/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var root *mountns.Mount
	for i := range mounts {
		if mounts[i].Mountpoint == "/" {
			root = &mounts[i] // the last one on / is the visible one
		}
	}
	if root == nil {
		t.Fatal("no / in nodeinit's mountinfo")
	}
	if _, shared := root.Shared(); !shared {
		t.Errorf("/ is not shared in nodeinit's namespace: %q", root.Optional)
	}
	if code := n.stop(); code != 0 {
		t.Errorf("nodeinit exited %d after TERM, want 0", code)
	}
}

func TestPrivateMountnsWithMakeRSharedIsAUsageError(t *testing.T) {
	nodeinit := testenv.Build(t, "./cmd/nodeinit")
	cmd := exec.Command(nodeinit, "--private-mountns", "--make-rshared", "--", "/bin/true")
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 2 {
		t.Errorf("exit %v, want 2; output:\n%s", err, out)
	}
}
