package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// The images the cluster builds. The node image and the control plane's
// run in podman; the rest are saved as archives and loaded into each
// node's containerd, under the names the manifests and containerd's
// configuration use.
const (
	NodeImage    = "localhost/nodeinit/node-runtime:dev"
	baseImage    = "localhost/nodeinit/node-runtime-base:dev"
	PauseImage   = "localhost/nodeinit/pause:1"
	BusyboxImage = "localhost/nodeinit/busybox:1"
	FlannelImage = "localhost/nodeinit/flannel:v0.28.10"
	CoreDNSImage = "localhost/nodeinit/coredns:v1.14.7"
)

// BasePackages are what the node calls at run time: runc and the CNI
// plugins for containerd, iptables and nft, mount, conntrack and modprobe
// for the kubelet and kube-proxy, ip and curl for an operator. flannel's
// image is built on the same root, for its iptables.
var BasePackages = []string{"runc", "containernetworking-plugins", "iptables", "nftables", "mount", "util-linux",
	"conntrack", "kmod", "iproute2", "curl", "ca-certificates", "procps"}

// buildImages builds every image into the cluster's store and saves the
// ones the nodes load.
func (c *Cluster) buildImages() error {
	base, err := c.debianRoot(BasePackages)
	if err != nil {
		return err
	}
	if _, err := c.podman.run(10*time.Minute, "import", base, baseImage); err != nil {
		return err
	}
	ctx := filepath.Join(c.Dir, "context")
	files := map[string]string{
		c.NodeInit:                                                      "bin/nodeinit",
		filepath.Join(c.K8sBin, "kubelet"):                              "bin/kubelet",
		filepath.Join(c.K8sBin, "kube-proxy"):                           "bin/kube-proxy",
		filepath.Join(c.K8sBin, containerd2, "containerd"):              "bin/containerd/containerd",
		filepath.Join(c.K8sBin, containerd2, "containerd-shim-runc-v2"): "bin/containerd/containerd-shim-runc-v2",
		filepath.Join(c.K8sBin, containerd2, "ctr"):                     "bin/containerd/ctr",
		filepath.Join(c.Repo, "images/node-runtime/config.yaml"):        "images/node-runtime/config.yaml",
		filepath.Join(c.Repo, "images/node-runtime/containerd.toml"):    "images/node-runtime/containerd.toml",
		filepath.Join(c.Repo, "images/node-runtime/machine-id"):         "images/node-runtime/machine-id",
		c.Pause:                                 "pause/pause",
		filepath.Join(c.NetBin, "flanneld"):     "flannel/flanneld",
		filepath.Join(c.NetBin, "install-conf"): "flannel/install-conf",
		filepath.Join(c.NetBin, "flannel"):      "flannel/flannel",
		filepath.Join(c.NetBin, "coredns"):      "coredns/coredns",
		"/bin/busybox":                          "busybox/bin/busybox",
	}
	for from, to := range files {
		if err := linkOrCopy(from, filepath.Join(ctx, to)); err != nil {
			return err
		}
	}
	dockerfile, err := os.ReadFile(filepath.Join(c.Repo, "images/node-runtime/Dockerfile"))
	if err != nil {
		return err
	}
	if err := c.podman.build(NodeImage, string(dockerfile), ctx, "BASE="+baseImage); err != nil {
		return err
	}
	if c.Flavor == FlavorSystemd {
		if err := c.buildSystemdNodeImage(ctx); err != nil {
			return err
		}
	}

	// busybox-static and a link for each of its applets: a shell, httpd,
	// wget, nslookup, with no library to load.
	list, err := run(10*time.Second, "/bin/busybox", "--list")
	if err != nil {
		return err
	}
	for _, applet := range strings.Fields(list) {
		if applet == "busybox" || strings.Contains(applet, "/") {
			continue
		}
		if err := os.Symlink("busybox", filepath.Join(ctx, "busybox", "bin", applet)); err != nil {
			return err
		}
	}
	for _, b := range []struct{ tag, dir, dockerfile string }{
		{PauseImage, "pause", "FROM scratch\nCOPY pause /pause\nENTRYPOINT [\"/pause\"]\n"},
		{BusyboxImage, "busybox", "FROM scratch\nCOPY bin /bin\nCMD [\"sh\"]\n"},
		// flannel's upstream image is Alpine with iptables and nft; the
		// node's Debian root has them.
		{FlannelImage, "flannel", "FROM " + baseImage + "\nCOPY flanneld install-conf /opt/bin/\nCOPY flannel /flannel\nENTRYPOINT [\"/opt/bin/flanneld\"]\n"},
		{CoreDNSImage, "coredns", "FROM scratch\nCOPY coredns /coredns\nEXPOSE 53 53/udp\nENTRYPOINT [\"/coredns\"]\n"},
	} {
		if err := c.podman.build(b.tag, b.dockerfile, filepath.Join(ctx, b.dir)); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(c.archiveDir(), 0o755); err != nil {
		return err
	}
	for _, image := range loadedImages {
		if _, err := c.podman.run(5*time.Minute, "save", "--format", "docker-archive", "-o", c.archive(image), image); err != nil {
			return err
		}
	}
	return os.RemoveAll(ctx)
}

// loadedImages are the images every node's containerd gets.
var loadedImages = []string{PauseImage, BusyboxImage, FlannelImage, CoreDNSImage}

func (c *Cluster) archiveDir() string { return filepath.Join(c.Dir, "images") }

func (c *Cluster) archive(image string) string {
	return filepath.Join(c.archiveDir(), strings.NewReplacer("/", "_", ":", "_").Replace(image)+".tar")
}

// debianRoot is a Debian bookworm minbase root with packages, made by
// mmdebstrap from the distribution's packages (nothing is pulled from a
// registry) once per machine and package list, and kept in BaseCache.
func (c *Cluster) debianRoot(packages []string) (string, error) {
	sum := sha256.Sum256([]byte("bookworm minbase " + strings.Join(packages, ",")))
	tarball := filepath.Join(c.BaseCache, "node-runtime-base-bookworm-"+hex.EncodeToString(sum[:6])+".tar")
	if _, err := os.Stat(tarball); err == nil {
		return tarball, nil
	}
	if err := os.MkdirAll(c.BaseCache, 0o755); err != nil {
		return "", err
	}
	start := time.Now()
	// A partial file of this process's own: two clusters made at once
	// may both make the root, and the second rename replaces a whole
	// file with an equal one.
	tmp := fmt.Sprintf("%s.%d.partial", tarball, os.Getpid())
	if _, err := run(15*time.Minute, "mmdebstrap", "--quiet", "--variant=minbase", "--format=tar",
		"--include="+strings.Join(packages, ","), "bookworm", tmp); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("make the node image's Debian root: %w", err)
	}
	if err := os.Rename(tmp, tarball); err != nil {
		return "", err
	}
	c.logf("the node image's Debian root (%s) made with mmdebstrap in %v: %s", strings.Join(packages, " "), time.Since(start).Round(time.Second), tarball)
	return tarball, nil
}

// buildSystemdNodeImage builds the systemd flavor's node image from the
// build context ctx, which holds the binaries: images/systemd-node on a
// Debian root with SystemdPackages, then images/systemd-node-runtime on
// it. systemd reads the units as it will at boot: a misspelt key or a
// missing program fails the build here, where at boot it would only be a
// warning in the node's journal.
func (c *Cluster) buildSystemdNodeImage(ctx string) error {
	root, err := c.debianRoot(SystemdPackages)
	if err != nil {
		return err
	}
	if _, err := c.podman.run(10*time.Minute, "import", root, systemdRootImage); err != nil {
		return err
	}
	for _, f := range []string{"systemd-node/Dockerfile", "systemd-node/kubelet.service", "systemd-node/kube-proxy.service",
		"systemd-node/kubelet.slice", "systemd-node/10-kubeadm.conf", "systemd-node-runtime/containerd.service",
		"systemd-node-runtime/kubelet-node.conf", "systemd-node-runtime/kube-proxy-node.conf", "systemd-node-runtime/entrypoint",
		"systemd-node-runtime/system.conf"} {
		if err := linkOrCopy(filepath.Join(c.Repo, "images", f), filepath.Join(ctx, "images", f)); err != nil {
			return err
		}
	}
	for _, b := range []struct{ tag, dockerfile, base string }{
		{systemdBaseImage, "images/systemd-node/Dockerfile", systemdRootImage},
		{SystemdNodeImage, "images/systemd-node-runtime/Dockerfile", systemdBaseImage},
	} {
		dockerfile, err := os.ReadFile(filepath.Join(c.Repo, b.dockerfile))
		if err != nil {
			return err
		}
		if err := c.podman.build(b.tag, string(dockerfile), ctx, "BASE="+b.base); err != nil {
			return err
		}
	}
	// systemd-analyze warns on stderr and exits 0: its output is the
	// verdict.
	out, err := c.podman.run(time.Minute, "run", "--rm", "--network=none", "--entrypoint", "/bin/sh", SystemdNodeImage, "-c",
		"cd /etc/systemd/system && systemd-analyze verify --man=no containerd.service kubelet.service kube-proxy.service kubelet.slice 2>&1")
	if err != nil || strings.TrimSpace(out) != "" {
		return fmt.Errorf("systemd-analyze verify of the systemd node's units: %v %s", err, out)
	}
	return nil
}

// loadImages imports the cluster's own images into a node's containerd.
func (c *Cluster) loadImages(node string) error {
	archives := make([]string, len(loadedImages))
	for i, image := range loadedImages {
		archives[i] = c.archive(image)
	}
	return c.importInto(node, archives)
}

// importInto imports image archives into a node's containerd, in the
// k8s.io namespace the CRI uses.
func (c *Cluster) importInto(node string, archives []string) error {
	for _, a := range archives {
		f, err := os.Open(a)
		if err != nil {
			return err
		}
		_, err = c.podman.runIn(5*time.Minute, f, "exec", "-i", node, "ctr", "--namespace=k8s.io", "images", "import", "-")
		f.Close()
		if err != nil {
			return fmt.Errorf("load %s into %s: %w", a, node, err)
		}
	}
	return nil
}

// linkOrCopy puts the file from at to, hard-linked when both are on one
// file system, else copied.
func linkOrCopy(from, to string) error {
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	if err := os.Link(from, to); err == nil {
		return nil
	}
	return exec.Command("cp", "--preserve=mode", from, to).Run()
}

// LoadArchives imports image archives (docker-archive or OCI) into every
// node's containerd, concurrentLoads nodes at a time: images of a user's
// own, or the e2e suite's.
func (c *Cluster) LoadArchives(archives ...string) error {
	return c.eachNode(func(node string) error { return c.importInto(node, archives) })
}

// eachNode runs f for every node, concurrentLoads at a time, and returns
// the first error.
func (c *Cluster) eachNode(f func(node string) error) error {
	errs := make([]error, len(c.NodeNames))
	slots := make(chan struct{}, concurrentLoads)
	var wg sync.WaitGroup
	for i, n := range c.NodeNames {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			errs[i] = f(n)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
