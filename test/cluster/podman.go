package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// podman is podman with a configuration and a store of the cluster's own,
// in its directory: the machine's own podman, its images, containers and
// networks are left alone, and the cluster's go with the directory. runc,
// cgroupfs and a log file per container: the machine may have no systemd
// and no journald, and crun refuses hybrid cgroup hosts. The overlay
// driver: the node image's layers are hundreds of megabytes, which vfs
// would copy for every layer.
type podman struct {
	dir string
	env []string
}

const podmanConf = `[containers]
default_ulimits = []
log_driver = "k8s-file"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "%[1]s/events.log"
tmp_dir = "%[1]s/tmp"
static_dir = "%[1]s/storage/libpod"
volume_path = "%[1]s/storage/volumes"
lock_type = "file"

[network]
network_backend = "netavark"
network_config_dir = "%[1]s/networks"
`

const podmanStorage = `[storage]
driver = "overlay"
graphroot = "%[1]s/storage"
runroot = "%[1]s/run"
`

// newPodman writes the store's configuration into dir, once; a second call
// on the same directory uses what is there.
func newPodman(dir string) (*podman, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	files := map[string]string{
		"containers.conf": fmt.Sprintf(podmanConf, dir),
		"storage.conf":    fmt.Sprintf(podmanStorage, dir),
		"registries.conf": "",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return nil, err
		}
	}
	return &podman{dir: dir, env: append(os.Environ(),
		"CONTAINERS_CONF="+filepath.Join(dir, "containers.conf"),
		"CONTAINERS_STORAGE_CONF="+filepath.Join(dir, "storage.conf"),
		"CONTAINERS_REGISTRIES_CONF="+filepath.Join(dir, "registries.conf"),
	)}, nil
}

// run runs one podman command, bounded, and returns its stdout.
func (p *podman) run(timeout time.Duration, args ...string) (string, error) {
	return p.runIn(timeout, nil, args...)
}

// runIn is run with stdin from a file (nil: none).
func (p *podman) runIn(timeout time.Duration, stdin *os.File, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "podman", args...)
	cmd.Env = p.env
	if stdin != nil {
		cmd.Stdin = stdin
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if ctx.Err() != nil {
		err = fmt.Errorf("timed out after %v", timeout)
	}
	if err != nil {
		return string(out), fmt.Errorf("podman %s: %w\n%s", strings.Join(args, " "), err, tail(stderr.String(), 20))
	}
	return string(out), nil
}

// build builds an image from a Dockerfile text and a context directory,
// with no network: nothing is pulled.
func (p *podman) build(tag, dockerfile, context string, buildArgs ...string) error {
	df := filepath.Join(p.dir, "Dockerfile."+strings.NewReplacer("/", "_", ":", "_").Replace(tag))
	if err := os.WriteFile(df, []byte(dockerfile), 0o644); err != nil {
		return err
	}
	args := []string{"build", "-q", "--network=none", "-f", df, "-t", tag}
	for _, a := range buildArgs {
		args = append(args, "--build-arg", a)
	}
	_, err := p.run(15*time.Minute, append(args, context)...)
	return err
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// combined runs one podman command, bounded, and returns its standard
// output and error together (a container's log has both).
func (p *podman) combined(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "podman", args...)
	cmd.Env = p.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}
