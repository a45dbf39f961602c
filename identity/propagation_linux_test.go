package identity

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/internal/adjustment"
	"github.com/nodeinit/nodeinit/test/testenv"
)

// hostAndNode runs, on one OS thread of its own: setup in a new private
// mount namespace that stands for the host's; node in a namespace copied
// from it, as a container runtime makes a container's (a shared mount
// there stays a peer of the host's); then check back in the host's. The
// thread is thrown away afterwards.
func hostAndNode(t *testing.T, setup, node, check func() error) {
	t.Helper()
	must(t, testenv.InPrivateMountNamespace(t, func() error {
		if err := setup(); err != nil {
			return err
		}
		host, err := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(host)
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			return err
		}
		if err := node(); err != nil {
			return err
		}
		if err := unix.Setns(host, unix.CLONE_NEWNS); err != nil {
			return err
		}
		return check()
	}))
}

// sharedWithPeer mounts a tmpfs at dir, shared, and a peer of it at peer:
// the host's view of what the node sees at dir.
func sharedWithPeer(dir, peer string) error {
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, ""); err != nil {
		return err
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
		return err
	}
	return unix.Mount(dir, peer, "", unix.MS_BIND, "")
}

// mountsUnder lists the mount points at or below dir in this namespace.
func mountsUnder(dir string) []string {
	ms, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	var out []string
	for _, m := range ms {
		out = append(out, m.Mountpoint)
	}
	return out
}

// The container's / is shared, and its peer is the host's (the root of the
// host's mount namespace on a systemd host is shared): the node still gets
// its own machine-id, and nothing of it reaches the host's peer.
func TestApplyOnASharedRootWithAHostPeer(t *testing.T) {
	root, host := t.TempDir(), t.TempDir()
	state := t.TempDir()
	var p Plan
	var seen, hostSeen, rootSeen []byte
	var hostMounts []string
	var applied error
	var done []adjustment.Line
	var propagation string
	hostAndNode(t, func() error {
		if err := sharedWithPeer(root, host); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(root, MachineIDFile), []byte("uninitialized\n"), 0o444)
	}, func() error {
		var err error
		if p, err = Decide(Options{Root: root, StateDir: state, PID1: true, MachineID: true}); err != nil {
			return err
		}
		done, applied = p.Apply(true)
		seen, _ = os.ReadFile(filepath.Join(root, MachineIDFile))
		ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(root))
		if err == nil && len(ms) == 1 {
			propagation = ms[0].Optional
		}
		return err
	}, func() error {
		hostSeen, _ = os.ReadFile(filepath.Join(host, MachineIDFile))
		rootSeen, _ = os.ReadFile(filepath.Join(root, MachineIDFile))
		hostMounts = append(mountsUnder(filepath.Join(host, "etc")), mountsUnder(filepath.Join(root, "etc"))...)
		return nil
	})
	if applied != nil || strings.TrimSpace(string(seen)) != p.MachineID {
		t.Errorf("the node reads %q from %s (Apply: %v); want its own %s", seen, MachineIDFile, applied, p.MachineID)
	}
	if string(hostSeen) != "uninitialized\n" || string(rootSeen) != "uninitialized\n" || len(hostMounts) > 0 {
		t.Errorf("the host's peer reads %q, its copy of the node's root %q, mounts %v; want the file as it was and no mount", hostSeen, rootSeen, hostMounts)
	}
	// The node's root is shared again, in a group of its own, and still
	// receives from the host's: only the way out is cut.
	if !strings.Contains(propagation, "shared:") || !strings.Contains(propagation, "master:") {
		t.Errorf("the node's root is %q after; want shared again and a slave of its old peers", propagation)
	}
	// --write-flags and the log say so, once, with the off switch.
	var lines []string
	for _, a := range done {
		lines = append(lines, a.String())
	}
	if len(p.Detach) != 1 || p.Detach[0].Mountpoint != root || len(done) != 2 ||
		!strings.Contains(lines[0], "Detaching the shared mount at "+root+" from its peers") || !strings.Contains(lines[0], "--node-machine-id=false turns this off") ||
		!strings.Contains(lines[1], "Mounting a machine-id of the node's own") {
		t.Errorf("planned %+v; the log lines:\n%s\nwant the detaching, then the mount", p.Detach, strings.Join(lines, "\n"))
	}
	if pre := p.Adjustments(); len(pre) != 2 || pre[0].String() != lines[0] {
		t.Errorf("--write-flags would print %v; want the same lines as the log", pre)
	}
}

// /etc in the container is a link into a shared mount whose peer is the
// host's: the check is of the mount the id lands on, not of the path
// before the link, and nothing reaches the host.
func TestApplyThroughALinkedDirectoryChecksTheMountItLandsOn(t *testing.T) {
	root := fakeRoot(t, map[string]string{"state": "/"})
	shared, host := t.TempDir(), t.TempDir()
	must(t, os.Symlink(filepath.Join(shared, "etc"), filepath.Join(root, "etc")))
	var p Plan
	var seen, hostSeen []byte
	var hostMounts []string
	var applied error
	hostAndNode(t, func() error {
		if err := sharedWithPeer(shared, host); err != nil {
			return err
		}
		if err := os.Mkdir(filepath.Join(shared, "etc"), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(shared, MachineIDFile), []byte("uninitialized\n"), 0o444)
	}, func() error {
		var err error
		if p, err = Decide(Options{Root: root, StateDir: "/state", PID1: true, MachineID: true}); err != nil {
			return err
		}
		_, applied = p.Apply(true)
		seen, _ = os.ReadFile(filepath.Join(root, MachineIDFile))
		return nil
	}, func() error {
		hostSeen, _ = os.ReadFile(filepath.Join(host, MachineIDFile))
		hostMounts = mountsUnder(host)
		return nil
	})
	if applied != nil || strings.TrimSpace(string(seen)) != p.MachineID {
		t.Errorf("the node reads %q (Apply: %v); want its own %s", seen, applied, p.MachineID)
	}
	if string(hostSeen) != "uninitialized\n" || len(hostMounts) > 1 {
		t.Errorf("the host's peer reads %q, mounts %v; want the file as it was and no mount but the peer itself", hostSeen, hostMounts)
	}
}

// /etc/machine-id itself is a link: nodeinit mounts over no link.
func TestApplyRefusesAMachineIDThatIsALink(t *testing.T) {
	root := fakeRoot(t, map[string]string{"etc": "/", "state": "/", "elsewhere": "uninitialized\n"})
	must(t, os.Symlink(filepath.Join(root, "elsewhere"), filepath.Join(root, MachineIDFile)))
	p, err := Decide(Options{Root: root, StateDir: "/state", PID1: true, MachineID: true})
	must(t, err)
	var applied error
	var seen []byte
	must(t, testenv.InPrivateMountNamespace(t, func() error {
		_, applied = p.Apply(true)
		seen, _ = os.ReadFile(filepath.Join(root, "elsewhere"))
		return nil
	}))
	if applied == nil || !strings.Contains(applied.Error(), "symbolic link") || string(seen) != "uninitialized\n" {
		t.Errorf("Apply over a link: %v; the link's target reads %q", applied, seen)
	}
}

// The host's id, read through the root of PID 1 of the pid namespace,
// which is in another mount namespace (the host's): the node gets the
// host's id, from a copy kept in the state directory, not a mount taken
// from another mount namespace (which the kernel refuses: EINVAL).
func TestApplyGivesTheNodeTheHostsIDFromAKeptCopy(t *testing.T) {
	testenv.RequireRoot(t)
	hostFile := filepath.Join(t.TempDir(), "machine-id")
	must(t, os.WriteFile(hostFile, []byte(hostsID+"\n"), 0o444))
	// The host: PID 1 in a mount namespace of its own, whose
	// /etc/machine-id is hostsID.
	host := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
		"mount --bind "+hostFile+" /etc/machine-id && echo ready && exec sleep 60")
	out, err := host.StdoutPipe()
	must(t, err)
	must(t, host.Start())
	t.Cleanup(func() { _ = host.Process.Kill(); _ = host.Wait() })
	ready := make([]byte, 6)
	if _, err := out.Read(ready); err != nil || string(ready) != "ready\n" {
		t.Fatalf("the host's stand-in: %q %v", ready, err)
	}
	root := fakeRoot(t, map[string]string{"etc/machine-id": "uninitialized\n", "proc": "/", "state": "/"})
	must(t, os.Symlink("/proc/"+strconv.Itoa(host.Process.Pid), filepath.Join(root, "proc/1")))
	p, err := Decide(Options{Root: root, StateDir: "/state", MachineID: true})
	must(t, err)
	if p.Source != Host || p.MachineID != hostsID {
		t.Fatalf("source %q, id %q; want the host's %s", p.Source, p.MachineID, hostsID)
	}
	var seen []byte
	var applied error
	var source string
	must(t, testenv.InPrivateMountNamespace(t, func() error {
		_, applied = p.Apply(true)
		seen, _ = os.ReadFile(filepath.Join(root, MachineIDFile))
		ms, _ := mountinfo.GetMounts(mountinfo.SingleEntryFilter(filepath.Join(root, MachineIDFile)))
		for _, m := range ms {
			source = m.Root
		}
		return nil
	}))
	if applied != nil || strings.TrimSpace(string(seen)) != hostsID {
		t.Fatalf("the node reads %q (Apply: %v); want the host's %s", seen, applied, hostsID)
	}
	if !strings.HasSuffix(source, "/state/host-machine-id") {
		t.Errorf("the mount over %s is of %q; want the kept copy in the state directory", MachineIDFile, source)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "state/host-machine-id")); string(b) != hostsID+"\n" {
		t.Errorf("the kept copy holds %q", b)
	}
}
