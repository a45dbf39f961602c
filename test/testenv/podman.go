package testenv

import (
	"fmt"
	"os"
	"path/filepath"
)

// podmanConf is podman's whole configuration in a private store. Each
// setting is one that a bare VM or CI machine needs:
//   - default_ulimits = []: podman otherwise asks the runtime for
//     RLIMIT_NOFILE and RLIMIT_NPROC above a hard limit the host may set
//     lower, and the runtime fails with EPERM.
//   - runtime = "runc": crun refuses hybrid cgroup hosts (v1 hierarchies plus
//     a cgroup2 mount with a controller in it); runc runs on v1, hybrid and v2.
//   - cgroup_manager = "cgroupfs" and events_logger = "file": there may be no
//     systemd and no journald.
//   - tmp_dir, static_dir, volume_path, the events file and lock_type =
//     "file": keep every piece of state in the store's directory, so nothing
//     is shared with the machine's own podman.
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
network_config_dir = "%[1]s/networks"
`

const podmanStorage = `[storage]
driver = "%[2]s"
graphroot = "%[1]s/storage"
runroot = "%[1]s/run"
`

// PodmanStore writes a podman configuration whose state all lives in dir,
// with the storage driver given (vfs works on any file system and leaves no
// mount behind; overlay is much faster for large images), and no registry,
// so nothing is ever pulled. It returns the environment every podman
// command of the store runs with: the machine's own podman and its images
// are left alone.
func PodmanStore(dir, driver string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	files := map[string]string{
		"containers.conf": fmt.Sprintf(podmanConf, dir),
		"storage.conf":    fmt.Sprintf(podmanStorage, dir, driver),
		"registries.conf": "",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return nil, err
		}
	}
	return append(os.Environ(),
		"CONTAINERS_CONF="+filepath.Join(dir, "containers.conf"),
		"CONTAINERS_STORAGE_CONF="+filepath.Join(dir, "storage.conf"),
		"CONTAINERS_REGISTRIES_CONF="+filepath.Join(dir, "registries.conf"),
	), nil
}
