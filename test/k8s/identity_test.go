//go:build k8s

package k8s

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nodeidentity "github.com/nodeinit/nodeinit/identity"
)

// identityUninitialized is /etc/machine-id in the node image, as systemd's
// images ship it.
const identityUninitialized = nodeidentity.Uninitialized

// checkOwnMachineID checks the machine-id the Node n reports for a node in
// the image (whose /etc/machine-id is image): a valid one, not the
// image's, the one nodeinit keeps in the node's state, mounted read-only
// over /etc/machine-id in the container once (a restart stacks nothing),
// and the host's own /etc/machine-id untouched, with no mount over it.
func (k *kubeNode) checkOwnMachineID(n node, image string) string {
	t := k.t
	t.Helper()
	id := n.Status.NodeInfo.MachineID
	if !nodeidentity.Valid(id) || id == image {
		t.Errorf("the Node's machineID is %q; want a machine-id of its own, not the image's %q", id, image)
	}
	kept, err := os.ReadFile(filepath.Join(nodeIdentityDir, "machine-id"))
	if err != nil || strings.TrimSpace(string(kept)) != id {
		t.Errorf("the node's kept machine-id is %q (%v); the Node reports %q", kept, err, id)
	}
	mounts := machineIDMounts(t, fmt.Sprintf("/proc/%d/mountinfo", k.pid()))
	if len(mounts) != 1 || !strings.Contains(","+mounts[0]+",", ",ro,") {
		t.Errorf("the container has %d mounts on /etc/machine-id, options %q; want one, read-only", len(mounts), mounts)
	}
	if host := machineIDMounts(t, "/proc/self/mountinfo"); len(host) != 0 {
		t.Errorf("the host has a mount on /etc/machine-id: %q", host)
	}
	if b, err := os.ReadFile("/etc/machine-id"); err == nil && strings.TrimSpace(string(b)) == id {
		t.Errorf("the host's /etc/machine-id is the node's %s", id)
	}
	return id
}

// machineIDMounts lists the options of each mount on /etc/machine-id in a
// mountinfo file.
func machineIDMounts(t *testing.T, mountinfo string) []string {
	t.Helper()
	b, err := os.ReadFile(mountinfo)
	must(t, err)
	var out []string
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 5 && f[4] == "/etc/machine-id" {
			out = append(out, f[5])
		}
	}
	return out
}

// TestNodeImageGetsAMachineIDOfItsOwn runs the node image in podman: its
// /etc/machine-id is uninitialized, and the real kubelet reports a
// machine-id of the node's own, the same after podman restart; a second
// node of the same image gets another. An image with a machine-id baked
// in, named by --image-machine-id, is treated the same way. A node in the
// host's pid namespace reports the host's.
func TestNodeImageGetsAMachineIDOfItsOwn(t *testing.T) {
	c := getCluster(t)
	c.buildNodeImage(t)
	node := func(t *testing.T, o imageRun, image string) string {
		k := c.runNodeImage(t, o)
		n, took := k.waitReady(90 * time.Second)
		id := k.checkOwnMachineID(n, image)
		k.waitLog(0, 0, `"Mounting a machine-id of the node's own over /etc/machine-id (--node-machine-id=false turns this off)"`,
			fmt.Sprintf("machineID=%q", id), `source="generated"`)
		again, ready := k.restart(1)
		if got := k.checkOwnMachineID(again, image); got != id {
			t.Errorf("after podman restart the Node's machineID is %q, was %q", got, id)
		}
		k.waitLog(0, k.since, `"Mounting a machine-id of the node's own`, fmt.Sprintf("machineID=%q", id), `source="kept"`)
		t.Logf("the Node Ready %v after start with machineID %s (image: %q); after podman restart Ready in %v with the same",
			took.Round(10*time.Millisecond), id, image, ready.Round(10*time.Millisecond))
		t.Logf("podman stop: %v", k.stopAndCheck(90*time.Second))
		return id
	}
	var first, second string
	t.Run("uninitialized", func(t *testing.T) { first = node(t, imageRun{}, identityUninitialized) })
	t.Run("a second node of the image", func(t *testing.T) { second = node(t, imageRun{}, identityUninitialized) })
	if first != "" && first == second {
		t.Errorf("two nodes of one image both have machineID %q", first)
	}
	// In the host's pid namespace the node is the host: its machine-id is
	// the host's, read through PID 1's root and mounted in the container
	// (the host's own file untouched). Where the host's PID 1 cannot be
	// read (a host that is itself a sandbox whose PID 1 hides from root),
	// nodeinit cannot take the host's and gives the node one of its own,
	// kept. podman stop would signal every process of the container at
	// once here; the test removes it.
	t.Run("sharing the host's pid namespace", func(t *testing.T) {
		host, err := os.ReadFile("/etc/machine-id")
		must(t, err)
		hostID := strings.TrimSpace(string(host))
		_, pid1Err := os.ReadFile("/proc/1/root/etc/machine-id")
		k := c.runNodeImage(t, imageRun{podman: []string{"--pid=host"}})
		n, took := k.waitReady(90 * time.Second)
		if pid1Err != nil {
			id := k.checkOwnMachineID(n, identityUninitialized)
			k.waitLog(0, 0, `"Mounting a machine-id of the node's own over /etc/machine-id`, fmt.Sprintf("machineID=%q", id), `source="generated"`)
			t.Logf("in the host's pid namespace, whose PID 1 cannot be read here (%v), the Node Ready %v after start with a machineID of its own %s",
				pid1Err, took.Round(10*time.Millisecond), id)
			return
		}
		if id := n.Status.NodeInfo.MachineID; id != hostID {
			t.Errorf("the Node's machineID is %q; want the host's %q", id, hostID)
		}
		k.waitLog(0, 0, `"Mounting a machine-id of the node's own over /etc/machine-id`, fmt.Sprintf("machineID=%q", hostID), `source="host"`)
		if m := machineIDMounts(t, fmt.Sprintf("/proc/%d/mountinfo", k.pid())); len(m) != 1 {
			t.Errorf("the container has %d mounts on /etc/machine-id; want one", len(m))
		}
		if m := machineIDMounts(t, "/proc/self/mountinfo"); len(m) != 0 {
			t.Errorf("the host has a mount on /etc/machine-id: %q", m)
		}
		if _, err := os.Stat(nodeIdentityDir); err == nil {
			t.Errorf("%s exists: the host's id needs none kept", nodeIdentityDir)
		}
		t.Logf("in the host's pid namespace the Node Ready %v after start with the host's machineID %s", took.Round(10*time.Millisecond), hostID)
	})
	t.Run("baked into the image", func(t *testing.T) {
		const baked = "0123456789abcdef0123456789abcdef"
		image := "localhost/nodeinit-k8s-node-baked:test"
		dir := t.TempDir()
		must(t, os.WriteFile(filepath.Join(dir, "machine-id"), []byte(baked+"\n"), 0o444))
		must(t, c.podman.build(image, "FROM "+nodeImage+"\nCOPY machine-id /etc/machine-id\n", dir))
		t.Cleanup(func() { _, _ = c.podman.run(time.Minute, "rmi", "--force", image) })
		node(t, imageRun{image: image, nodeinit: []string{"--image-machine-id=" + baked}}, baked)
	})
}

// TestNodeOnTheHostKeepsTheHostsMachineID: nodeinit on the host's root
// finds the host's valid /etc/machine-id, its own, and leaves it alone: no
// mount over it, and the Node reports it.
func TestNodeOnTheHostKeepsTheHostsMachineID(t *testing.T) {
	c := getCluster(t)
	host, err := os.ReadFile("/etc/machine-id")
	must(t, err)
	hostID := strings.TrimSpace(string(host))
	k := c.startNode(t, nodeSpec{})
	n, _ := k.waitReady(90 * time.Second)
	if id := n.Status.NodeInfo.MachineID; id != hostID {
		t.Errorf("the Node's machineID is %q; want the host's %q", id, hostID)
	}
	k.waitLog(0, 0, `"The node's machine-id is its container's own: left alone"`, fmt.Sprintf("machineID=%q", hostID))
	for _, mi := range []string{fmt.Sprintf("/proc/%d/mountinfo", k.pid()), "/proc/self/mountinfo"} {
		if m := machineIDMounts(t, mi); len(m) != 0 {
			t.Errorf("%s has a mount on /etc/machine-id: %q", mi, m)
		}
	}
	t.Logf("on the host: the Node's machineID is the host's %s, left alone; TERM: %v", hostID, k.stopAndCheck(90*time.Second))
}
