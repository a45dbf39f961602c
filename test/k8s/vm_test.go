//go:build k8s

package k8s

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// The VM suite boots a modern node host under qemu: Debian 12 with systemd
// as PID 1 on a cgroup v2-only hierarchy, containerd with SystemdCgroup =
// true, podman (test/vm/build-image.sh builds the image, make vm-image). The
// control plane stays on this machine's loopback (the shared fixture); the
// guest reaches it at 10.0.2.2 through qemu's user network, and its socat
// unit forwards the guest's own 127.0.0.1:6443 there, so the API server's
// certificate for 127.0.0.1 holds. The test drives the guest over ssh on a
// forwarded loopback port with the image's own key; binaries and images
// reach it through a 9p shared folder, mounted at guestShare.

// guestShare is where the guest mounts the shared folder (its fstab).
const guestShare = "/mnt/share"

// The bounds of the guest's waits. TCG emulates every instruction: systemd
// reaches multi-user in 60-100 s on two loaded cores, a small podman run
// takes about 20 s. A boot that stalls is tried once more.
const (
	vmBootTimeout  = 4 * time.Minute // to ssh answering; 35-70 s is usual
	vmBootAttempts = 2
	vmSSHTimeout   = 5 * time.Minute // one command over ssh, unless told
)

// vm is one running guest.
type vm struct {
	t      *testing.T
	dir    string // console log, the shared folder
	share  string // the shared folder, as this machine sees it
	image  string // the image's directory (build-image.sh)
	port   int    // the loopback port forwarded to the guest's sshd
	qemu   *server
	booted time.Duration // qemu start to ssh answering
}

// vmImage is the image's directory: $NODEINIT_VM_IMAGE (make e2e-vm sets
// it), else what test/vm/build-image.sh prints, building the image the
// first time (about 5 minutes).
func vmImage(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("NODEINIT_VM_IMAGE"); dir != "" {
		return dir
	}
	script := filepath.Join(testenv.ModuleRoot(t), "test", "vm", "build-image.sh")
	out, err := stdoutOf(30*time.Minute, script)
	if err != nil {
		t.Fatalf("the VM image: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}

// freePort is a loopback TCP port nobody listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// bootVM boots the image under qemu (TCG unless $NODEINIT_VM_ACCEL says
// kvm): its root, the image's disk, and stores, the disk of its image
// stores (imageStores), each with a throw-away overlay (snapshot=on: the
// files are never written), the shared folder share, and the guest's
// console in DIR/console.log, and waits until ssh answers; each of the
// guest's ports in forwards is this machine's loopback port of the same
// number too. The guest is killed when the test ends, and by the kernel if
// the test process dies first.
func bootVM(t *testing.T, dir, share, stores string, forwards ...int) *vm {
	t.Helper()
	for _, tool := range []string{"qemu-system-x86_64", "ssh"} {
		testenv.RequireTool(t, tool)
	}
	image := vmImage(t)
	for _, f := range []string{"disk.img", "vmlinuz", "initrd.img", "id_ed25519"} {
		if _, err := os.Stat(filepath.Join(image, f)); err != nil {
			t.Fatalf("the VM image in %s is incomplete: %v (make vm-image)", image, err)
		}
	}
	accel := "tcg,thread=multi"
	if os.Getenv("NODEINIT_VM_ACCEL") == "kvm" {
		accel = "kvm"
	}
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		must(t, err)
		v := &vm{t: t, dir: dir, share: share, image: image, port: port}
		netdev := fmt.Sprintf("user,id=n0,hostfwd=tcp:127.0.0.1:%d-:22", port)
		for _, p := range forwards {
			netdev += fmt.Sprintf(",hostfwd=tcp:127.0.0.1:%d-:%d", p, p)
		}
		args := []string{"qemu-system-x86_64",
			"-name", "nodeinit-vm", "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
			"-accel", accel, "-cpu", "max", "-smp", "2", "-m", "4096",
			"-kernel", filepath.Join(image, "vmlinuz"), "-initrd", filepath.Join(image, "initrd.img"),
			"-append", "console=ttyS0 root=/dev/vda rw panic=-1",
			"-drive", "file=" + filepath.Join(image, "disk.img") + ",format=raw,if=virtio,snapshot=on",
			"-drive", "file=" + stores + ",format=raw,if=virtio,snapshot=on",
			"-netdev", netdev,
			"-device", "virtio-net-pci,netdev=n0,romfile=",
			"-virtfs", "local,path=" + share + ",mount_tag=share,security_model=passthrough,id=share",
			"-device", "virtio-rng-pci",
			"-serial", "file:" + v.console(),
			"-monitor", "none",
		}
		start := time.Now()
		v.qemu, err = startServer(dir, "qemu", args...)
		must(t, err)
		t.Cleanup(v.kill)
		err = v.waitSSH(start.Add(vmBootTimeout))
		if err == nil {
			v.booted = time.Since(start)
			return v
		}
		if attempt == vmBootAttempts || !v.qemu.running() {
			t.Fatalf("%v\nthe guest's console, last lines:\n%s", err, v.consoleTail(40))
		}
		// Under TCG a guest now and then stalls in its boot (a vCPU the
		// kernel reports as a soft lockup): boot it once more.
		t.Logf("%v; booting it again. The guest's console, last lines:\n%s", err, v.consoleTail(20))
		must(t, v.qemu.stop(10*time.Second))
		must(t, os.Rename(v.console(), filepath.Join(dir, fmt.Sprintf("console-%d.log", attempt))))
	}
}

// waitSSH waits until the guest answers ssh, until deadline.
func (v *vm) waitSSH(deadline time.Time) error {
	for {
		_, err := v.sshTimeout(30*time.Second, "true")
		if err == nil {
			return nil
		}
		if !v.qemu.running() {
			return fmt.Errorf("qemu exited (%v) before the guest answered ssh\n%s", v.qemu.err, v.qemu.tail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the guest did not answer ssh within %v (last: %v)", vmBootTimeout, err)
		}
		time.Sleep(2 * time.Second)
	}
}

func (v *vm) console() string { return filepath.Join(v.dir, "console.log") }

// consoleTail is the end of the guest's console, also kept in
// $NODEINIT_VM_LOGS (when set) for a failed run.
func (v *vm) consoleTail(n int) string {
	b, _ := os.ReadFile(v.console())
	return testenv.Tail(string(b), n)
}

// kill stops qemu by its pid (the guest's disk is a throw-away overlay,
// nothing to save) and, for a failed test, keeps the guest's console and
// journal where $NODEINIT_VM_LOGS says and prints their ends.
func (v *vm) kill() {
	if v.t.Failed() && v.qemu.running() {
		journal, err := v.sshTimeout(time.Minute, "journalctl --no-pager -n 200")
		if err != nil {
			journal += err.Error()
		}
		v.t.Logf("the guest's journal, last lines:\n%s", testenv.Tail(journal, 60))
		v.keepLog("journal.log", journal)
	}
	if err := v.qemu.stop(10 * time.Second); err != nil {
		v.t.Error(err)
	}
	if v.t.Failed() {
		b, _ := os.ReadFile(v.console())
		v.keepLog("console.log", string(b))
		v.t.Logf("the guest's console, last lines:\n%s", v.consoleTail(40))
	}
	// Whatever ran with the share on its command line (qemu, and nothing
	// else) must be gone.
	for _, pid := range testenv.ProcessesWithArg("path=" + v.share + ",") {
		v.t.Errorf("process %d that the VM test started still runs: %q", pid, cmdline(pid))
	}
}

// keepLog writes a guest's log into $NODEINIT_VM_LOGS, where make e2e-vm
// asks for it, so a failed run says why after the test's directory is gone.
func (v *vm) keepLog(name, text string) {
	dir := os.Getenv("NODEINIT_VM_LOGS")
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err == nil {
		p := filepath.Join(dir, name)
		if os.WriteFile(p, []byte(text), 0o644) == nil {
			v.t.Logf("the guest's %s is kept in %s", strings.TrimSuffix(name, ".log"), p)
		}
	}
}

// ssh runs a shell command in the guest as root, bounded by vmSSHTimeout,
// and returns its output; a failure fails the test.
func (v *vm) ssh(command string) string {
	v.t.Helper()
	out, err := v.sshTimeout(vmSSHTimeout, command)
	if err != nil {
		v.t.Fatalf("in the guest: %v", err)
	}
	return out
}

// sshTimeout runs a shell command in the guest as root and returns its
// stdout; the error holds stderr.
func (v *vm) sshTimeout(timeout time.Duration, command string) (string, error) {
	return stdoutOf(timeout, "ssh", "-i", filepath.Join(v.image, "id_ed25519"), "-p", strconv.Itoa(v.port),
		"-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "LogLevel=ERROR", "-o", "ConnectTimeout=20", "-o", "ServerAliveInterval=10", "-o", "ServerAliveCountMax=6",
		"root@127.0.0.1", command)
}

// waitRunning waits until the guest's systemd has finished booting, and
// logs how long that took.
func (v *vm) waitRunning() {
	t := v.t
	t.Helper()
	start := time.Now()
	state, err := v.sshTimeout(vmBootTimeout, "systemctl is-system-running --wait")
	state = strings.TrimSpace(state)
	if state == "" {
		t.Errorf("the guest's systemd state after boot is unknown: %v", err)
	} else if state != "running" {
		// Each failed unit with the end of its journal, the first lines of
		// the failure, so a run that ends here says which unit and why.
		units, _ := v.sshTimeout(time.Minute, "systemctl --failed --no-legend --plain | cut -d' ' -f1")
		units = strings.Join(strings.Fields(units), " ")
		// The names come back from systemctl itself, never through a shell
		// word, which would eat the \x2d of an escaped unit name.
		journal, _ := v.sshTimeout(time.Minute, `systemctl --failed --no-legend --plain | cut -d' ' -f1 | while read -r u; do echo "--- $u:"; journalctl -b -u "$u" -n 15 --no-pager -o short-monotonic; done`)
		t.Errorf("the guest's systemd is %q after boot, not running; failed units: %s\n%s", state, units, journal)
	}
	t.Logf("guest systemd %s %v after ssh answered (%v after qemu started)", state, time.Since(start).Round(time.Second), (v.booted + time.Since(start)).Round(time.Second))
}

// bootNodeHost boots a guest (bootVM) with the image stores on stores
// (imageStores) and waits for its systemd to be running.
func bootNodeHost(t *testing.T, dir, share, stores string, forwards ...int) *vm {
	t.Helper()
	v := bootVM(t, dir, share, stores, forwards...)
	t.Logf("VM booted (qemu start to ssh answering) in %v, accel %s", v.booted.Round(time.Second), cmdAccel(v))
	v.waitRunning()
	return v
}
