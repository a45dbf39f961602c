package mountcg

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/mountns"
	"github.com/nodeinit/nodeinit/test/testenv"
)

func TestPrivateMountNamespaceHoldsNodeinitAndItsChildren(t *testing.T) {
	n := startNode(t, nil, "--private-mountns")
	executor, proxy := n.waitReady()
	pid := n.Pid()
	// unshare made the mount namespace nodeinit started in (--mount-proc).
	started, err := os.Readlink("/proc/" + itoa(n.Outer()) + "/ns/mnt")
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

// A marker in the environment nodeinit is started with (set by hand, or
// left over from another nodeinit) is not taken for its own re-exec: with
// --private-mountns it still enters a namespace of its own, and without
// it no child sees the marker.
func TestAMarkerFromOutsideIsNotItsOwnReexec(t *testing.T) {
	outside := mountns.MarkerEnv + "=mnt:[1]"
	check := func(t *testing.T, flags ...string) (ns string, n *node) {
		t.Helper()
		n = startNode(t, []string{outside}, flags...)
		executor, proxy := n.waitReady()
		for who, env := range map[string][]string{"executor": executor.Env, "proxy": proxy.Env} {
			for _, kv := range env {
				if strings.HasPrefix(kv, mountns.MarkerEnv+"=") {
					t.Errorf("the %s's environment has the marker %s", who, kv)
				}
			}
		}
		return executor.MountNS, n
	}
	t.Run("with --private-mountns nodeinit still enters its own namespace", func(t *testing.T) {
		ns, n := check(t, "--private-mountns")
		started, err := os.Readlink("/proc/" + itoa(n.Outer()) + "/ns/mnt")
		if err != nil {
			t.Fatal(err)
		}
		if ns == started {
			t.Errorf("the executor runs in the namespace nodeinit started in (%s): the marker from outside skipped the re-exec", started)
		}
		if code := n.stop(); code != 0 {
			t.Errorf("nodeinit exited %d after TERM, want 0", code)
		}
	})
	t.Run("without it the marker is removed", func(t *testing.T) {
		_, n := check(t)
		if code := n.stop(); code != 0 {
			t.Errorf("nodeinit exited %d after TERM, want 0", code)
		}
	})
}

func TestMakeRSharedSharesRoot(t *testing.T) {
	n := startNode(t, nil, "--make-rshared")
	n.waitReady()
	pid := n.Pid()
	mounts := readMountinfo(t, "/proc/"+itoa(pid)+"/mountinfo")
	var root *mountinfo.Info
	for _, m := range mounts {
		if m.Mountpoint == "/" {
			root = m // the last one on / is the visible one
		}
	}
	if root == nil {
		t.Fatal("no / in nodeinit's mountinfo")
	}
	if !strings.Contains(" "+root.Optional+" ", " shared:") {
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

// sharedTmpfs mounts a tmpfs at a new temporary directory and makes it
// rshared, so that mounts below it propagate to its peers and slaves.
func sharedTmpfs(t *testing.T) string {
	t.Helper()
	testenv.RequireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("mountcg", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatalf("mount a tmpfs at %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	if err := unix.Mount("", dir, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		t.Fatalf("make %s rshared: %v", dir, err)
	}
	return dir
}

// readMountinfo parses a /proc/PID/mountinfo.
func readMountinfo(t *testing.T, file string) []*mountinfo.Info {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mounts, err := mountinfo.GetMountsFromReader(f, nil)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return mounts
}

func mountedIn(t *testing.T, file, path string) bool {
	t.Helper()
	return slices.ContainsFunc(readMountinfo(t, file), func(m *mountinfo.Info) bool { return m.Mountpoint == path })
}

func TestPrivateMountnsReceivesHostMountsAndKeepsItsOwn(t *testing.T) {
	shared := sharedTmpfs(t)
	nsenter := testenv.RequireTool(t, "nsenter")
	// unshare keeps the propagation it copies, so its namespace stays a
	// peer of the shared tmpfs: it plays the host.
	n := startNodeWith(t, nodeOptions{propagation: "unchanged"}, nil, "--private-mountns")
	n.waitReady()
	pid := n.Pid()
	inside := "/proc/" + itoa(pid) + "/mountinfo"

	after := filepath.Join(shared, "after-start")
	if err := os.Mkdir(after, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("host", after, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(after, unix.MNT_DETACH)
	if !mountedIn(t, inside, after) {
		t.Errorf("a host mount at %s made after nodeinit started is not in nodeinit's namespace", after)
	}

	own := filepath.Join(shared, "own")
	if err := os.Mkdir(own, 0o755); err != nil {
		t.Fatal(err)
	}
	mount := exec.Command(nsenter, "--mount=/proc/"+itoa(pid)+"/ns/mnt", "--", "mount", "-t", "tmpfs", "node", own)
	if out, err := mount.CombinedOutput(); err != nil {
		t.Fatalf("mount inside nodeinit's namespace: %v\n%s", err, out)
	}
	if !mountedIn(t, inside, own) {
		t.Fatalf("the mount made inside at %s is not there", own)
	}
	if mountedIn(t, "/proc/self/mountinfo", own) || mountedIn(t, "/proc/"+itoa(n.Outer())+"/mountinfo", own) {
		t.Errorf("a mount made in nodeinit's namespace at %s leaked out", own)
	}
	if code := n.stop(); code != 0 {
		t.Errorf("nodeinit exited %d after TERM, want 0", code)
	}
}
