package cgroups

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nodeinit/nodeinit/internal/linux"
)

// The kubelet's two cgroup drivers.
const (
	DriverCgroupfs = "cgroupfs"
	DriverSystemd  = "systemd"
)

// ContainerdConfig is where containerd reads its configuration, and where
// nodeinit looks for the cgroup driver of its runc runtime. A node
// container sees the host's only where it is mounted in.
const ContainerdConfig = "/etc/containerd/config.toml"

// maxContainerdConfig bounds what is read of it: a configuration is a few
// KiB.
const maxContainerdConfig = 1 << 20

// drivers is what nodeinit can know of the cgroup drivers of a node before
// the first fork: the kubelet's (from its flags and configuration), the
// runtime's (containerd's configuration, where the container has it), and
// whether systemd runs the host and where nodeinit sits.
type drivers struct {
	// Kubelet is the kubelet's own setting, "" when nodeinit cannot tell
	// (the executor has no kubelet configuration and no --cgroup-driver);
	// KubeletDefault says it is the kubelet's default, set nowhere.
	Kubelet        string
	KubeletDefault bool
	// Containerd is the driver containerd's runc runtime uses, "" when
	// unknown; ContainerdAsks says containerd tells the kubelet its driver
	// over the CRI (a configuration of version 3 or later: containerd 2.0 or later,
	// which answers RuntimeConfig; a kubelet from 1.31 on then takes that
	// driver over its own).
	Containerd     string
	ContainerdAsks bool
	// KubeletKeepsOwn says the kubelet does not ask (its release or its
	// KubeletCgroupDriverFromCRI gate).
	KubeletKeepsOwn bool
	// Systemd says /run/systemd/system exists: systemd runs the host and
	// its /run is mounted in.
	Systemd bool
	// PrivateRoot says nodeinit is PID 1 at the root of a private v2
	// cgroup namespace with the namespace's own cgroup2 mount.
	PrivateRoot bool
}

// warnings returns one line for each disagreement of d that makes the
// kubelet's or the runtime's cgroups fail, none when they agree or cannot
// be known.
func (d drivers) warnings() []string {
	kubelet := d.kubelet()
	if kubelet == "" {
		return nil
	}
	said := "the kubelet uses the " + kubelet + " cgroup driver"
	if d.KubeletDefault && kubelet == d.Kubelet {
		said += " (its default)"
	}
	var out []string
	if d.Containerd != "" && !d.takesContainerds() && d.Containerd != d.Kubelet {
		out = append(out, fmt.Sprintf("%s and containerd the %s one (%s in %s): the kubelet makes the pods' cgroups where containerd does not put their containers, and pods fail to start; "+
			"set the same driver in both (the kubelet's cgroupDriver, containerd's SystemdCgroup), or use containerd 2.0 or later, whose driver the kubelet takes over the CRI",
			said, d.Containerd, systemdCgroupSetting(d.Containerd), ContainerdConfig))
	}
	if kubelet != DriverSystemd {
		return out
	}
	switch {
	case !d.Systemd:
		out = append(out, said+", but /run/systemd/system does not exist: the host runs no systemd, or its /run is not mounted into the container, "+
			"and the kubelet asks systemd for every pod cgroup; set the kubelet's cgroupDriver to cgroupfs, or mount the host's /run")
	case d.PrivateRoot:
		out = append(out, said+", but nodeinit is at the root of a private cgroup namespace: the host's systemd makes the pods' slices in the host's tree, "+
			"outside the one this container's /sys/fs/cgroup shows; run the container with --cgroupns=host and the host's /sys/fs/cgroup, or set the kubelet's cgroupDriver to cgroupfs")
	}
	return out
}

// kubelet is the driver the kubelet runs with: containerd's where it
// takes that over the CRI, else its own; "" when unknown.
func (d drivers) kubelet() string {
	if d.takesContainerds() && d.Containerd != "" {
		return d.Containerd
	}
	return d.Kubelet
}

// takesContainerds says containerd reports its driver and the kubelet
// takes it.
func (d drivers) takesContainerds() bool { return d.ContainerdAsks && !d.KubeletKeepsOwn }

// systemdCgroupSetting is the containerd setting that gives driver.
func systemdCgroupSetting(driver string) string {
	return fmt.Sprintf("SystemdCgroup = %v", driver == DriverSystemd)
}

// readDrivers gathers what the files below fsRoot ("/" on a live system)
// say about the runtime's driver and systemd; kubelet is the kubelet's
// setting ("" unset) and configured says the executor has a kubelet
// configuration, where an unset driver is the kubelet's default, cgroupfs.
func readDrivers(fsRoot, kubelet string, configured bool) drivers {
	d := drivers{Kubelet: kubelet}
	if kubelet == "" && configured {
		d.Kubelet, d.KubeletDefault = DriverCgroupfs, true
	}
	if st, err := os.Stat(filepath.Join(fsRoot, "run/systemd/system")); err == nil && st.IsDir() {
		d.Systemd = true
	}
	// Unreadable, absent, not a regular file, too large: unknown, which
	// is no disagreement.
	if text, err := linux.ReadRegularFile(filepath.Join(fsRoot, ContainerdConfig), maxContainerdConfig, linux.FollowLink); err == nil {
		d.Containerd, d.ContainerdAsks = containerdDriver(text)
	}
	return d
}

// containerdDriver reads the cgroup driver of containerd's runtimes from
// its configuration: every "SystemdCgroup = true|false" line, which only
// runc's options take. Several runtimes that disagree, or none that says,
// give "" (unknown: containerd's default depends on its version).
// version3 says the file is a configuration of version 3 or later, which
// only containerd 2.0 and later read (2.0 writes version 3, 2.4 version
// 4). A line scan, not a TOML parser: it needs two keys, whose values are
// bare words.
func containerdDriver(text []byte) (driver string, version3 bool) {
	inTable := false
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 4096), maxContainerdConfig)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if strings.HasPrefix(line, "[") {
			inTable = true
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		switch {
		case key == "version" && !inTable:
			n, err := strconv.Atoi(value)
			version3 = err == nil && n >= 3
		case key == "SystemdCgroup":
			var d string
			switch value {
			case "true":
				d = DriverSystemd
			case "false":
				d = DriverCgroupfs
			default:
				return "", version3
			}
			if driver != "" && driver != d {
				return "", version3
			}
			driver = d
		}
	}
	if sc.Err() != nil {
		return "", false
	}
	return driver, version3
}
