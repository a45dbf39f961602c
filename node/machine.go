package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/nodeinit/nodeinit/cgroups"
	"github.com/nodeinit/nodeinit/internal/linux"
)

// Machine is the node's capacity as the kubelet reads it (kubelet v1.34,
// pkg/kubelet/cm/container_manager_linux.go), never from its cgroup root:
// memory and CPUs from cAdvisor's machine info, pids from the kernel.
type Machine struct {
	// Memory is MemTotal of /proc/meminfo, in bytes: what cAdvisor reports,
	// lxcfs's view where lxcfs serves /proc/meminfo.
	Memory int64
	// CPUs are the CPUs cAdvisor counts: each cpuN of
	// /sys/devices/system/cpu that is online and has a topology.
	CPUs int
	// Pids is the smaller of kernel.pid_max and kernel.threads-max, as
	// the kubelet's pidlimit takes it.
	Pids int64
}

var memTotal = regexp.MustCompile(`(?m)^MemTotal:\s*([0-9]+) kB$`)

// ReadMachine reads the node's capacity below fsRoot ("/" on a live
// system) from the files the kubelet and cAdvisor read.
func ReadMachine(fsRoot string) (Machine, error) {
	var m Machine
	meminfo, err := os.ReadFile(filepath.Join(fsRoot, "proc/meminfo"))
	if err != nil {
		return m, fmt.Errorf("read the machine's memory: %w", err)
	}
	match := memTotal.FindSubmatch(meminfo)
	if match == nil {
		return m, errors.New("read the machine's memory: /proc/meminfo has no MemTotal")
	}
	kb, err := strconv.ParseInt(string(match[1]), 10, 64)
	if err != nil {
		return m, fmt.Errorf("read the machine's memory: MemTotal %s: %w", match[1], err)
	}
	m.Memory = kb * 1024
	if m.CPUs, err = countCPUs(filepath.Join(fsRoot, "sys/devices/system/cpu")); err != nil {
		return m, err
	}
	m.Pids = -1
	for _, f := range []string{"proc/sys/kernel/pid_max", "proc/sys/kernel/threads-max"} {
		b, err := os.ReadFile(filepath.Join(fsRoot, f))
		if err != nil {
			return m, fmt.Errorf("read the machine's process limit: %w", err)
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return m, fmt.Errorf("read the machine's process limit: /%s: %w", f, err)
		}
		if m.Pids < 0 || v < m.Pids {
			m.Pids = v
		}
	}
	return m, nil
}

// countCPUs counts the CPUs as cAdvisor (v0.52, utils/sysinfo) does: the
// cpuN directories of dir that are in its online list (all of them without
// one) and have a core and a package id.
func countCPUs(dir string) (int, error) {
	cpus, err := filepath.Glob(filepath.Join(dir, "cpu*[0-9]"))
	if err != nil {
		return 0, err
	}
	online := map[int]bool{}
	list, err := os.ReadFile(filepath.Join(dir, "online"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		online = nil
	case err != nil:
		return 0, fmt.Errorf("read the online CPUs: %w", err)
	default:
		ids, err := cgroups.ParseCPUList(strings.TrimSpace(string(list)))
		if err != nil {
			return 0, fmt.Errorf("read the online CPUs: %w", err)
		}
		for _, c := range ids {
			online[c] = true
		}
	}
	n := 0
	for _, c := range cpus {
		id, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(c), "cpu"))
		if err != nil || online != nil && !online[id] {
			continue
		}
		if !linux.Exists(filepath.Join(c, "topology/core_id")) || !linux.Exists(filepath.Join(c, "topology/physical_package_id")) {
			continue
		}
		n++
	}
	if n == 0 {
		return 0, fmt.Errorf("read the machine's CPUs: no online CPU with a topology in %s", dir)
	}
	return n, nil
}
