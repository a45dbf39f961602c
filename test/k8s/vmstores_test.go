//go:build k8s

package k8s

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// guestStoresLabel is the label of the guest's second disk, its image
// stores. The guest's fstab (test/vm/guest/etc/fstab) mounts it at
// /var/lib/nodeinit-stores and binds its containerd, containers/storage
// and docker directories to the runtimes' roots before they start.
const guestStoresLabel = "nodeinit-stores"

// storesContainerdConfig is the containerd 2 that fills the guest's store
// on this machine, the guest's own (containerd2Config's format): %[1]s is
// its root (the store), %[2]s the directory of its state and sockets. It
// only imports: no CRI plugin, no task.
const storesContainerdConfig = `version = 4
root = "%[1]s"
state = "%[2]s/state"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images", "io.containerd.cri.v1.runtime", "io.containerd.nri.v1.nri", "io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.erofs", "io.containerd.tracing.processor.v1.otlp"]

[plugins.'io.containerd.server.v1.grpc']
  address = "%[2]s/containerd.sock"

[plugins.'io.containerd.server.v1.ttrpc']
  address = "%[2]s/containerd.sock.ttrpc"
`

// imageStores makes, in dir, the disk with the guest's image stores and
// returns its path. The guest's runtimes and this machine's are the same:
// containerd 2 from the shared folder, and Debian's podman and Docker, so
// the stores are filled here, natively, as the guest's runtimes would fill
// them from the shared folder's archives:
// pause, busybox and the node image into containerd (namespace k8s.io,
// unpacked for overlayfs: the kubelet's and the DaemonSet's), the images
// of the archives podman names (images/NAME.tar) into podman's store
// (overlay) and, with docker, the node image into Docker's (overlay2;
// without it Docker's store is empty); more archives, containerd, go into
// containerd's store too. mke2fs -d writes them into an ext4
// image, which every guest of the suite gets as a throw-away disk
// (snapshot=on), like its root. Under TCG the guest itself took 6 to 10
// minutes to load the same archives.
func imageStores(t *testing.T, dir, share string, podman []string, docker bool, containerd ...string) string {
	t.Helper()
	testenv.RequireTool(t, "mke2fs")
	stores := filepath.Join(dir, "stores")
	images := filepath.Join(share, "images")
	node := filepath.Join(images, "node.tar")
	var podmanArchives []string
	for _, name := range podman {
		podmanArchives = append(podmanArchives, filepath.Join(images, name+".tar"))
	}
	for _, step := range []struct {
		what, store string
		fill        func(store string) error
	}{
		{fmt.Sprintf("pause, busybox, the node image and %d more archives into containerd's store", len(containerd)), "containerd", func(store string) error {
			return fillContainerdStore(filepath.Join(dir, "containerd"), filepath.Join(share, filepath.Base(guestContainerdDir)), store,
				append([]string{filepath.Join(images, "pause.tar"), filepath.Join(images, "busybox.tar"), node}, containerd...)...)
		}},
		{fmt.Sprintf("%v into podman's store", podman), "containers/storage", func(store string) error {
			return fillPodmanStore(filepath.Join(dir, "podman"), store, podmanArchives...)
		}},
		{map[bool]string{true: "the node image into Docker's store", false: "Docker's store, empty"}[docker], "docker", func(store string) error {
			if !docker {
				// The guest's fstab binds it: it must be there.
				return os.MkdirAll(store, 0o700)
			}
			return fillDockerStore(t, store, node)
		}},
	} {
		start := time.Now()
		store := filepath.Join(stores, step.store)
		if err := os.MkdirAll(filepath.Dir(store), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := step.fill(store); err != nil {
			t.Fatalf("the guest's image stores: %s: %v", step.what, err)
		}
		t.Logf("%s in %v", step.what, time.Since(start).Round(100*time.Millisecond))
	}
	start := time.Now()
	disk := filepath.Join(dir, "stores.img")
	// 8 GB, sparse: what the tests' pods and containers write goes there too.
	if _, err := run(5*time.Minute, "mke2fs", "-q", "-t", "ext4", "-L", guestStoresLabel, "-d", stores, "-F", disk, "8G"); err != nil {
		t.Fatalf("the guest's image stores: %v", err)
	}
	must(t, removeAll(stores))
	var st syscall.Stat_t
	must(t, syscall.Stat(disk, &st))
	t.Logf("the stores written into an ext4 image (mke2fs -d, %d MiB) in %v", st.Blocks*512>>20, time.Since(start).Round(100*time.Millisecond))
	return disk
}

// fillContainerdStore imports archives into a containerd store, with the
// containerd and ctr in bin, run with its state in dir.
func fillContainerdStore(dir, bin, store string, archives ...string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	conf := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(conf, fmt.Appendf(nil, storesContainerdConfig, store, dir), 0o644); err != nil {
		return err
	}
	s, err := startServer(dir, "containerd", filepath.Join(bin, "containerd"), "--config", conf)
	if err != nil {
		return err
	}
	c := &containerd{server: s, dir: dir, ctr: filepath.Join(bin, "ctr")}
	defer func() { _ = s.stop(30 * time.Second) }()
	if err := c.waitServing(30 * time.Second); err != nil {
		return err
	}
	for _, a := range archives {
		if err := c.importImage(a); err != nil {
			return err
		}
	}
	if err := s.stop(30 * time.Second); err != nil {
		return err
	}
	return removeAll(dir)
}

// fillPodmanStore loads archives into a podman store of its own in dir,
// then moves the store to store, without what is this machine's and not
// the guest's: libpod's database, which names the store's path here and
// holds no image, and the network backend podman chose here (netavark,
// which the guest, with the CNI plugins, does not have).
func fillPodmanStore(dir, store string, archives ...string) error {
	p, err := newPodman(dir)
	if err != nil {
		return err
	}
	for _, a := range archives {
		if _, err := p.run(5*time.Minute, "load", "--quiet", "--input", a); err != nil {
			return err
		}
	}
	if err := os.Rename(filepath.Join(dir, "storage"), store); err != nil {
		return err
	}
	for _, mine := range []string{"libpod", "defaultNetworkBackend"} {
		if err := removeAll(filepath.Join(store, mine)); err != nil {
			return err
		}
	}
	return removeAll(dir)
}

// fillDockerStore loads an archive into a Docker engine of the test's own,
// stops it, and moves its images and layers to store: what else the engine
// keeps (its network database, its containerd's) the guest's makes anew.
func fillDockerStore(t *testing.T, store, archive string) error {
	d := startDockerd(t)
	if _, err := d.run(5*time.Minute, "load", "--quiet", "--input", archive); err != nil {
		return err
	}
	if err := d.stop(); err != nil {
		return err
	}
	if err := os.MkdirAll(store, 0o700); err != nil {
		return err
	}
	for _, sub := range []string{"image", "overlay2"} {
		if err := os.Rename(filepath.Join(d.dataRoot(), sub), filepath.Join(store, sub)); err != nil {
			return err
		}
	}
	return nil
}
