package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeinit/nodeinit/identity"
	"github.com/nodeinit/nodeinit/test/testenv"
)

// systemdLikeHost is the shell that runs one node container as on a
// systemd host: in a mount namespace of its own whose / is shared (systemd
// makes the host's / shared), on cgroup v2 (the host's cgroup2 hierarchy
// shown as /sys/fs/cgroup), with crun, podman's default runtime there,
// which leaves the container's / shared when a volume is rshared, as the
// node image's run line has /var/lib/kubelet. It starts the container,
// waits until the executor has written /rec/id, then records what the
// host's namespace has on machine-id, and removes the container.
const systemdLikeHost = `
mount -t cgroup2 cgroup2 /sys/fs/cgroup || exit 1
"$@" || exit 1
i=0
until [ -e "$REC/id" ] || [ $i -ge 300 ]; do sleep 0.1; i=$((i+1)); done
grep machine-id /proc/self/mountinfo > "$REC/host-mounts"
echo done > "$REC/host-done"
`

// On a systemd host the node container's / is a shared mount: nodeinit
// detaches it from its peers, mounts the node's machine-id, and shares it
// again; the executor reads the node's id, and the host's namespace has no
// mount of it.
func TestNodeOnASharedRootGetsItsMachineID(t *testing.T) {
	e := start(t)
	testenv.RequireTool(t, "crun")
	testenv.RequireTool(t, "unshare")
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	v2, _ := hostLayout(t).Unified()
	testenv.Require(t, err == nil || v2.Mountpoint != "", "a cgroup2 hierarchy (crun runs on cgroup v2 only)")

	rec, kubelet := t.TempDir(), t.TempDir()
	name := "nodeinit-e2e-" + randomID()
	t.Cleanup(func() { _, _ = e.podman("rm", "--force", "--time", "0", name) })
	args := []string{"unshare", "--mount", "--propagation", "shared", "sh", "-c", systemdLikeHost, "sh",
		"podman", "run", "--detach", "--name", name, "--runtime", "crun", "--privileged", "--pids-limit=0", "--network=none",
		"-v", rec + ":" + recDir, "-v", kubelet + ":/var/lib/kubelet:rshared", e.image,
		"--run-proxy=false", "--", "/bin/sh", "-c",
		"grep ' / ' /proc/self/mountinfo > /rec/root; cat /etc/machine-id > /rec/id.new; mv /rec/id.new /rec/id; exec sleep 30"}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(e.env, "REC="+rec)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the node container on a systemd-like host: %v\n%s", err, out)
	}
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(rec, name))
		return strings.TrimSpace(string(b))
	}
	logs, _ := e.podman("logs", name)
	if read("host-done") != "done" {
		t.Fatalf("the host's side did not finish; nodeinit's log:\n%s", logs)
	}
	if !strings.Contains(read("root"), "shared:") {
		t.Errorf("the container's / is %q; want shared, as crun leaves it with an rshared volume", read("root"))
	}
	id := read("id")
	kept, _ := os.ReadFile(filepath.Join(kubelet, "nodeinit/machine-id"))
	if !identity.Valid(id) || strings.TrimSpace(string(kept)) != id {
		t.Errorf("the executor read %q, the kept id is %q; want the node's own; nodeinit's log:\n%s", id, kept, logs)
	}
	if !strings.Contains(logs, `"Detaching the shared mount at / from its peers`) {
		t.Errorf("nodeinit's log does not say it detached /:\n%s", logs)
	}
	if m := read("host-mounts"); m != "" {
		t.Errorf("the host's namespace has a mount of the machine-id: %s", m)
	}
}
