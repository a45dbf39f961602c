package identity

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/test/testenv"
)

func TestApplyMountsTheKeptIDOverMachineIDReadOnly(t *testing.T) {
	root := fakeRoot(t, map[string]string{"etc/machine-id": "uninitialized\n", "state": "/"})
	etc := filepath.Join(root, MachineIDFile)
	opts := Options{Root: root, StateDir: "/state", PID1: true, MachineID: true}
	p, err := Decide(opts)
	must(t, err)
	var seen string
	err = testenv.InPrivateMountNamespace(t, func() error {
		if _, err := p.Apply(true); err != nil {
			return err
		}
		b, err := os.ReadFile(etc)
		seen = string(b)
		// Read-only, as systemd mounts it: nothing running on the node
		// can change the node's id.
		if err := os.WriteFile(etc, []byte(hostsID), 0o644); !errors.Is(err, unix.EROFS) {
			t.Errorf("writing over the mounted machine-id: %v, want EROFS", err)
		}
		return err
	})
	must(t, err)
	if seen != p.MachineID+"\n" {
		t.Errorf("in the namespace %s reads %q, want %q", MachineIDFile, seen, p.MachineID+"\n")
	}
	// Outside the namespace, the container's file is as it was: nothing is
	// written into the image.
	if b, _ := os.ReadFile(etc); string(b) != "uninitialized\n" {
		t.Errorf("outside the namespace %s holds %q", MachineIDFile, b)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "state/machine-id")); string(b) != p.MachineID+"\n" {
		t.Errorf("the state holds %q, want %q", b, p.MachineID)
	}
	// The next start (podman restart) finds the kept one.
	again, err := Decide(opts)
	must(t, err)
	if again.Source != Kept || again.MachineID != p.MachineID {
		t.Errorf("after a restart: %s %s, want kept %s", again.Source, again.MachineID, p.MachineID)
	}
	err = testenv.InPrivateMountNamespace(t, func() error {
		if _, err := again.Apply(true); err != nil {
			return err
		}
		b, err := os.ReadFile(etc)
		seen = string(b)
		return err
	})
	must(t, err)
	if seen != p.MachineID+"\n" {
		t.Errorf("after a restart %s reads %q, want %q", MachineIDFile, seen, p.MachineID)
	}
}

func TestApplyMakesAMissingMachineIDToMountOn(t *testing.T) {
	root := fakeRoot(t, map[string]string{"etc": "/"})
	p, err := Decide(Options{Root: root, StateDir: "/state", PID1: true, MachineID: true})
	must(t, err)
	var seen string
	must(t, testenv.InPrivateMountNamespace(t, func() error {
		if _, err := p.Apply(true); err != nil {
			return err
		}
		b, err := os.ReadFile(filepath.Join(root, MachineIDFile))
		seen = string(b)
		return err
	}))
	if strings.TrimSpace(seen) != p.MachineID {
		t.Errorf("%s reads %q, want %q", MachineIDFile, seen, p.MachineID)
	}
}

// Not PID 1 and not in a private namespace: nodeinit may be running in the
// host's mount namespace, and mounts nothing.
func TestApplyOutsideItsOwnMountNamespaceMountsNothing(t *testing.T) {
	root := fakeRoot(t, map[string]string{"etc/machine-id": "uninitialized\n"})
	p, err := Decide(Options{Root: root, StateDir: "/state", MachineID: true})
	must(t, err)
	err = testenv.InPrivateMountNamespace(t, func() error {
		_, err := p.Apply(false)
		if b, _ := os.ReadFile(filepath.Join(root, MachineIDFile)); string(b) != "uninitialized\n" {
			t.Errorf("%s reads %q", MachineIDFile, b)
		}
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "may share the host's mount namespace") {
		t.Errorf("Apply(false): %v", err)
	}
}

func TestApplyLeavesTheContainersOwnIDAlone(t *testing.T) {
	root := fakeRoot(t, map[string]string{"etc/machine-id": hostsID + "\n"})
	p, err := Decide(Options{Root: root, StateDir: "/state", PID1: false, MachineID: true})
	must(t, err)
	// Not even asked to be contained: nothing is to be mounted.
	done, err := p.Apply(false)
	must(t, err)
	if len(done) != 1 || !strings.Contains(done[0].Msg, "left alone") {
		t.Errorf("the log lines %v; want one saying the container's own id is left alone", done)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	must(t, err)
	if strings.Contains(string(mounts), root) {
		t.Errorf("a mount under %s", root)
	}
}

func TestApplyMountsTheProductUUID(t *testing.T) {
	root := fakeRoot(t, map[string]string{"etc/machine-id": hostsID, "sys/class/dmi/id/product_uuid": "host-uuid\n"})
	p, err := Decide(Options{Root: root, StateDir: "/state", PID1: true, MachineID: true, ProductUUID: true})
	must(t, err)
	var seen string
	must(t, testenv.InPrivateMountNamespace(t, func() error {
		if _, err := p.Apply(true); err != nil {
			return err
		}
		b, err := os.ReadFile(filepath.Join(root, ProductUUIDFile))
		seen = string(b)
		return err
	}))
	if strings.TrimSpace(seen) != p.ProductUUID {
		t.Errorf("product_uuid reads %q, want %q", seen, p.ProductUUID)
	}
}
