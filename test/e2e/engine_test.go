package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// engine is podman with a configuration and a store of its own, so the
// tests behave the same on a brand-new machine and on a developer's one, and
// leave nothing behind in the machine's own store.
type engine struct {
	dir   string   // configuration, storage, run state: all removed at the end
	env   []string // the environment every podman command runs with
	image string   // the images/e2e image, uniquely tagged
	// wrap, if set, runs each podman command through it (see onCgroup2).
	wrap []string
}

// setup writes the configuration, builds the binaries and the e2e image.
func (e *engine) setup(t *testing.T) error {
	dir, err := os.MkdirTemp("", "nodeinit-e2e-")
	if err != nil {
		return err
	}
	e.dir, e.image = dir, "localhost/nodeinit-e2e:"+randomID()
	// vfs: it works on any file system (overlay on overlay or on tmpfs does
	// not) and leaves no mounts behind; the images here are a few MiB.
	if e.env, err = testenv.PodmanStore(dir, "vfs"); err != nil {
		return err
	}

	context := filepath.Join(dir, "context")
	for _, pkg := range []string{"./cmd/nodeinit", "./test/helpers/task", "./test/helpers/demo-executor", "./test/helpers/demo-proxy"} {
		if err := copyFile(testenv.Build(t, pkg), filepath.Join(context, "bin", filepath.Base(pkg))); err != nil {
			return err
		}
	}
	// The image's shell: a static busybox, called sh.
	busybox := "/bin/busybox"
	testenv.Require(t, isFile(busybox), "needs a static busybox at "+busybox+" (Debian's busybox-static)")
	if err := copyFile(busybox, filepath.Join(context, "bin", "sh")); err != nil {
		return err
	}
	dockerfile := filepath.Join(testenv.ModuleRoot(t), "images", "e2e", "Dockerfile")
	if _, err := e.podman("build", "-q", "-f", dockerfile, "-t", e.image, context); err != nil {
		return fmt.Errorf("build the e2e image: %w", err)
	}
	return nil
}

// teardown removes every container and image of the private store, then the store.
func (e *engine) teardown() {
	if e.dir == "" {
		return
	}
	_, _ = e.podman("rm", "--all", "--force", "--time", "0")
	_, _ = e.podman("rmi", "--all", "--force")
	_ = os.RemoveAll(e.dir)
}

// podman runs one podman command and returns its stdout. The error carries
// the exit code (as *exec.ExitError) and stderr.
func (e *engine) podman(args ...string) (string, error) {
	cmd := e.command(args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("podman %s: %w\n%s%s", strings.Join(args, " "), err, stderr.Bytes(), stdout.Bytes())
	}
	return stdout.String(), err
}

// command is a podman command, ready to start.
func (e *engine) command(args ...string) *exec.Cmd {
	argv := append(append(append([]string(nil), e.wrap...), "podman"), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = e.env
	return cmd
}

// onCgroup2 returns the engine seen through a mount namespace whose
// /sys/fs/cgroup is the host's cgroup2 hierarchy. On a hybrid host (v1
// hierarchies, cgroup2 beside them) podman then runs containers on cgroup v2,
// as on a v2 host. Every podman command gets a namespace of its own, all with
// the same view; conmon stays in the one of the command that started it.
func (e *engine) onCgroup2() *engine {
	v2 := *e
	v2.wrap = []string{"unshare", "--mount", "--propagation", "private", "sh", "-c",
		`mount -t cgroup2 cgroup2 /sys/fs/cgroup && exec "$@"`, "sh"}
	return &v2
}

// must runs a podman command that has to succeed.
func (e *engine) must(t *testing.T, args ...string) string {
	t.Helper()
	out, err := e.podman(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// exitCode runs a podman command that is expected to end with a status, and returns it.
func (e *engine) exitCode(t *testing.T, args ...string) int {
	t.Helper()
	_, err := e.podman(args...)
	if err == nil {
		return 0
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return exit.ExitCode()
}

// inspect returns one field of `podman inspect` by Go template.
func (e *engine) inspect(t *testing.T, name, format string) string {
	t.Helper()
	return strings.TrimSpace(e.must(t, "inspect", "--format", format, name))
}

// randomID is a short unique name part.
func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

func randomID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func copyFile(from, to string) error {
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
