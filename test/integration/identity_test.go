package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeinit/nodeinit/identity"
	"github.com/nodeinit/nodeinit/test/testenv"
)

// machineIDAsPID1 runs nodeinit as PID 1 of a new pid namespace, with
// cat /etc/machine-id as its executor, in a throwaway mount namespace
// whose /etc/machine-id is "uninitialized" (a bind mount the test makes
// there, as an image's). With ownProc the pid namespace gets its own
// /proc, as a container runtime mounts one; without it nodeinit sees the
// host's /proc, where it is not 1. It returns what the executor read and
// nodeinit's log.
func machineIDAsPID1(t *testing.T, ownProc bool, state string, flags ...string) (read, log string) {
	t.Helper()
	return machineIDAsPID1After(t, "", ownProc, state, flags...)
}

// machineIDAsPID1After is machineIDAsPID1 with setup, shell commands, run
// first in the throwaway mount namespace.
func machineIDAsPID1After(t *testing.T, setup string, ownProc bool, state string, flags ...string) (read, log string) {
	t.Helper()
	testenv.RequireRoot(t)
	nodeinit := testenv.BuildRaced(t, "./cmd/nodeinit")
	uninit := filepath.Join(t.TempDir(), "machine-id")
	must(t, os.WriteFile(uninit, []byte(identity.Uninitialized+"\n"), 0o444))
	pidns := "unshare --pid --fork"
	if ownProc {
		pidns += " --mount-proc"
	}
	if setup != "" {
		setup += " && "
	}
	script := setup + "mount --bind " + uninit + " /etc/machine-id && exec " + pidns + " " + nodeinit +
		" --run-proxy=false --identity-dir=" + state + " " + strings.Join(flags, " ") + " -- cat /etc/machine-id"
	out, err := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("nodeinit: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case identity.Valid(strings.TrimSpace(line)) || strings.TrimSpace(line) == identity.Uninitialized:
			read = strings.TrimSpace(line)
		default:
			log += line + "\n"
		}
	}
	return read, log
}

// A container's PID 1 gives the node a machine-id of its own, which the
// executor reads, and keeps it: the next start reads the same.
func TestPID1GivesTheExecutorAMachineIDOfItsOwn(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	read, log := machineIDAsPID1(t, true, state)
	if !identity.Valid(read) {
		t.Fatalf("the executor read %q; want a machine-id of the node's own\n%s", read, log)
	}
	if !strings.Contains(log, `"Mounting a machine-id of the node's own over /etc/machine-id`) || !strings.Contains(log, `source="generated"`) {
		t.Errorf("nodeinit's log does not say it mounted a new machine-id:\n%s", log)
	}
	again, log := machineIDAsPID1(t, true, state)
	if again != read || !strings.Contains(log, `source="kept"`) {
		t.Errorf("the next start read %q, the first %q; log:\n%s", again, read, log)
	}
	// On the test's own namespace, nothing changed.
	if m, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(m), state) {
		t.Errorf("a mount from %s is left in the test's namespace", state)
	}
}

// The start's order, seen in a real run: the node's id is mounted before
// / is made shared (so its mount cannot propagate), and both before the
// first task starts.
func TestPID1MountsTheIdentityBeforeMakingRootShared(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	read, log := machineIDAsPID1(t, true, state, "--make-rshared")
	if !identity.Valid(read) {
		t.Fatalf("the executor read %q; want a machine-id of the node's own\n%s", read, log)
	}
	order := []string{`"Mounting a machine-id of the node's own over /etc/machine-id`, `"Made / rshared`, `"Started task"`}
	at := -1
	for _, line := range order {
		i := strings.Index(log, line)
		if i < 0 {
			t.Fatalf("no %s in nodeinit's log:\n%s", line, log)
		}
		if i < at {
			t.Errorf("%s comes before the line ahead of it in %q:\n%s", line, order, log)
		}
		at = i
	}
}

// PID 1 of a pid namespace without a /proc of its own may be in the host's
// mount namespace: nodeinit mounts nothing and says why.
func TestPID1WithTheHostsProcMountsNothing(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	read, log := machineIDAsPID1(t, false, state)
	if read != identity.Uninitialized {
		t.Errorf("the executor read %q; want the container's own %q\n%s", read, identity.Uninitialized, log)
	}
	if !strings.Contains(log, "may share the host's mount namespace") {
		t.Errorf("nodeinit's log does not say why it mounted nothing:\n%s", log)
	}
	if _, err := os.Stat(state); err == nil {
		t.Errorf("%s was made though nothing was mounted", state)
	}
}

// A product_uuid that cannot be mounted (a machine without DMI has no
// product_uuid to mount over) takes nothing from the machine-id: the node
// has its own, the log says so, and the warning names what failed, what
// the node has instead, and the switch for it. On a machine with DMI the
// test hides DMI's files in its throwaway mount namespace (an empty tmpfs
// over their directory), so it runs on every machine.
func TestPID1WithoutAProductUUIDKeepsItsOwnMachineID(t *testing.T) {
	setup := ""
	if _, err := os.Stat(identity.ProductUUIDFile); err == nil {
		dmi, err := filepath.EvalSymlinks(filepath.Dir(identity.ProductUUIDFile))
		must(t, err)
		setup = "mount -t tmpfs -o size=4k,mode=0555 nodeinit-test-no-dmi " + dmi
		t.Logf("this machine has a DMI product_uuid: hidden from nodeinit under an empty tmpfs on %s", dmi)
	}
	state := filepath.Join(t.TempDir(), "state")
	read, log := machineIDAsPID1After(t, setup, true, state, "--node-product-uuid")
	if !identity.Valid(read) {
		t.Fatalf("the executor read %q; want a machine-id of the node's own\n%s", read, log)
	}
	if !strings.Contains(log, `"Mounting a machine-id of the node's own over /etc/machine-id`) {
		t.Errorf("nodeinit's log does not say it mounted the node's machine-id:\n%s", log)
	}
	var warning string
	for _, l := range strings.Split(log, "\n") {
		if strings.HasPrefix(l, "W") && strings.Contains(l, "product_uuid") {
			warning = l
		}
	}
	t.Log(warning)
	if !strings.Contains(warning, identity.ProductUUIDFile) || !strings.Contains(warning, "systemUUID stays the machine's") ||
		!strings.Contains(warning, "--node-product-uuid=false") || strings.Contains(warning, "keeps its container's") {
		t.Errorf("the warning %q should name %s, say the systemUUID stays the machine's and name --node-product-uuid=false; log:\n%s",
			warning, identity.ProductUUIDFile, log)
	}
}
