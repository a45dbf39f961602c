//go:build k8s

package k8s

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// podman is podman with a configuration and a store of the fixture's own
// (runc, cgroupfs, no systemd or journald needed), so that the machine's
// own podman and its images are left alone; close removes it all. The
// store uses the overlay driver: the node image's layers are hundreds of
// megabytes, which vfs would copy for every layer of the build (90 s here,
// against 14 s). Only podman's blob-info cache stays machine-wide
// (/var/lib/containers/cache).
type podman struct {
	dir string
	env []string
}

func newPodman(dir string) (*podman, error) {
	env, err := testenv.PodmanStore(dir, "overlay")
	if err != nil {
		return nil, err
	}
	// runc keeps its state in the store too, not in /run/runc: podman
	// runs it through a wrapper that says so. (A --runtime-flag would not
	// reach the cleanup conmon starts when a container exits, and the
	// stale state of a stopped container would fail its next start.)
	runc, err := exec.LookPath("runc")
	if err != nil {
		return nil, err
	}
	wrapper := filepath.Join(dir, "bin", "runc")
	if err := os.MkdirAll(filepath.Dir(wrapper), 0o755); err != nil {
		return nil, err
	}
	script := fmt.Sprintf("#!/bin/sh\nexec %s --root %s \"$@\"\n", runc, filepath.Join(dir, "runc"))
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		return nil, err
	}
	conf, err := os.OpenFile(filepath.Join(dir, "containers.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	defer conf.Close()
	if _, err := fmt.Fprintf(conf, "\n[engine.runtimes]\nrunc = [%q]\n", wrapper); err != nil {
		return nil, err
	}
	return &podman{dir: dir, env: env}, nil
}

// run runs one podman command, bounded, and returns its stdout.
func (p *podman) run(timeout time.Duration, args ...string) (string, error) {
	cmd := exec.Command("podman", args...)
	cmd.Env = p.env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	done := make(chan struct{})
	var out []byte
	var err error
	go func() {
		out, err = cmd.Output()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		err = fmt.Errorf("timed out after %v", timeout)
	}
	if err != nil {
		return string(out), fmt.Errorf("podman %s: %w\n%s", strings.Join(args, " "), err, testenv.Tail(stderr.String(), 20))
	}
	return string(out), nil
}

// close removes every container and image of the store, then the store.
func (p *podman) close() []error {
	var errs []error
	for _, args := range [][]string{{"rm", "--all", "--force", "--time", "0"}, {"rmi", "--all", "--force"}} {
		if _, err := p.run(2*time.Minute, args...); err != nil {
			errs = append(errs, err)
		}
	}
	if err := removeAll(p.dir); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// build builds an image from a Dockerfile text and the files of a context
// directory.
func (p *podman) build(tag, dockerfile, context string, buildArgs ...string) error {
	df := filepath.Join(p.dir, "Dockerfile."+strings.NewReplacer("/", "_", ":", "_").Replace(tag))
	if err := os.WriteFile(df, []byte(dockerfile), 0o644); err != nil {
		return err
	}
	args := []string{"build", "-q", "--network=none", "-f", df, "-t", tag}
	for _, a := range buildArgs {
		args = append(args, "--build-arg", a)
	}
	_, err := p.run(10*time.Minute, append(args, context)...)
	return err
}

// buildPodImages builds the pause and busybox images from scratch and saves
// each as a docker-archive for containerd, returning the archives.
func (c *cluster) buildPodImages(t *testing.T) ([]string, error) {
	pause := filepath.Join(c.dir, "images", "pause")
	if err := linkOrCopy(testenv.Build(t, "./test/k8s/pause"), filepath.Join(pause, "pause")); err != nil {
		return nil, err
	}
	if err := c.podman.build(pauseImage, "FROM scratch\nCOPY pause /pause\nENTRYPOINT [\"/pause\"]\n", pause); err != nil {
		return nil, err
	}

	// busybox-static and a link for each of its applets: a shell, httpd,
	// sleep and the rest, with no library to load.
	box := filepath.Join(c.dir, "images", "busybox")
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return nil, err
	}
	if err := linkOrCopy(bb, filepath.Join(box, "bin", "busybox")); err != nil {
		return nil, err
	}
	list, err := run(10*time.Second, bb, "--list")
	if err != nil {
		return nil, err
	}
	for _, applet := range strings.Fields(list) {
		if applet == "busybox" || strings.Contains(applet, "/") {
			continue
		}
		if err := os.Symlink("busybox", filepath.Join(box, "bin", applet)); err != nil {
			return nil, err
		}
	}
	if err := c.podman.build(busyboxImage, "FROM scratch\nCOPY bin /bin\nCMD [\"sh\"]\n", box); err != nil {
		return nil, err
	}

	var archives []string
	for _, image := range []string{pauseImage, busyboxImage} {
		a := filepath.Join(c.dir, "images", filepath.Base(strings.Split(image, ":")[0])+".tar")
		if _, err := c.podman.run(2*time.Minute, "save", "--format", "docker-archive", "-o", a, image); err != nil {
			return nil, err
		}
		archives = append(archives, a)
	}
	return archives, nil
}

// nodeBasePackages are what the kubelet and kube-proxy call at run time in
// the node image: mount and umount, iptables and nft, conntrack, modprobe.
var nodeBasePackages = []string{"iptables", "nftables", "mount", "util-linux", "conntrack", "kmod", "ca-certificates"}

// nodeBase is a Debian bookworm root file system for the node image, made
// by mmdebstrap from the distribution's packages (nothing is pulled from a
// registry) and cached beside the Kubernetes binaries, keyed on the package
// list, so that a machine makes it once.
func nodeBase(t *testing.T, cacheDir string) string {
	t.Helper()
	return debianRoot(t, cacheDir, nodeBasePackages)
}

// debianRoot is a Debian bookworm minbase root with packages, made by
// mmdebstrap once per machine and package list and cached in cacheDir.
func debianRoot(t *testing.T, cacheDir string, packages []string) string {
	t.Helper()
	testenv.RequireTool(t, "mmdebstrap")
	sum := sha256.Sum256([]byte("bookworm minbase " + strings.Join(packages, ",")))
	tarball := filepath.Join(cacheDir, "node-base-bookworm-"+hex.EncodeToString(sum[:6])+".tar")
	if _, err := os.Stat(tarball); err == nil {
		return tarball
	}
	start := time.Now()
	// A name of its own: make e2e-k8s and make e2e-vm may make the same
	// base at once; the last rename wins, with the same contents.
	tmp := fmt.Sprintf("%s.%d.partial", tarball, os.Getpid())
	cmd := []string{"mmdebstrap", "--quiet", "--variant=minbase", "--format=tar", "--include=" + strings.Join(packages, ","), "bookworm", tmp}
	if ns := os.Getenv("NODEINIT_HOST_NETNS"); ns != "" {
		// This run's network namespace has no way out (test/vm/netns.sh):
		// mmdebstrap fetches the packages from the one netns.sh started in.
		cmd = append([]string{"nsenter", "--net=" + ns, "--"}, cmd...)
	}
	if _, err := run(10*time.Minute, cmd...); err != nil {
		os.RemoveAll(tmp)
		t.Fatalf("make a node image's base: %v", err)
	}
	if err := os.Rename(tmp, tarball); err != nil {
		t.Fatal(err)
	}
	t.Logf("node base (%s) made with mmdebstrap in %v: %s", strings.Join(packages, " "), time.Since(start).Round(time.Second), tarball)
	return tarball
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
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o755)
}
