package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Limit is one resource limit found on a cgroup or its ancestors.
type Limit struct {
	// Value is in bytes (memory), millicores (CPU) or processes (pids).
	Value int64
	// From names the file and cgroup it was read from, for the log:
	// "memory.limit_in_bytes of cgroup /node".
	From string
}

// Found reports whether a limit was found.
func (l Limit) Found() bool { return l.From != "" }

// Limits are the limits that hold for every process below a cgroup: for
// each resource the smallest of the cgroup's own and its ancestors'. A
// zero Limit means none.
type Limits struct {
	Memory Limit
	// CPU is the smaller of the CFS quota (quota / period) and the
	// cgroup's effective cpuset, in millicores.
	CPU  Limit
	Pids Limit
}

// v1Unlimited is where a v1 memory limit means none: the kernel shows "no
// limit" as the largest page-aligned int64 (9223372036854771712 with 4 KiB
// pages), which depends on the page size; no real limit comes near 2^62.
const v1Unlimited = 1 << 62

// ReadLimits reads the limits that hold for the kubelet's cgroup root
// (root, as the kubelet's --cgroup-root takes it: relative to the cgroup
// mounts) from the directories below fsRoot ("/" on a live system): in the
// unified hierarchy on cgroup v2, in the memory, cpu, cpuset and pids v1
// hierarchies otherwise (a hybrid host's controllers are in v1, where the
// kubelet looks too). It reads root and every ancestor up to the root of
// the mount, as the kernel applies them; a hierarchy that is not mounted,
// or a file a cgroup does not have (the root cgroup of v2 has no
// memory.max), limits nothing. A file that is there but unreadable or
// malformed is an error naming it.
func ReadLimits(l Layout, fsRoot, root string) (Limits, error) {
	root = path.Clean("/" + root)
	var lim Limits
	var errs []error
	v2 := l.Mode() == V2
	// keep records the smaller limit.
	keep := func(dst *Limit, v int64, from string) {
		if !dst.Found() || v < dst.Value {
			*dst = Limit{Value: v, From: from}
		}
	}
	for _, h := range l.Hierarchies {
		if h.Unified != v2 {
			continue
		}
		has := func(c string) bool { return h.Unified || slices.Contains(h.Controllers, c) }
		base := filepath.Join(fsRoot, h.Mountpoint)
		for cg := root; ; cg = path.Dir(cg) {
			dir := filepath.Join(base, cg)
			read := func(file string, parse func(string) (int64, bool, error), dst *Limit) {
				text, err := os.ReadFile(filepath.Join(dir, file))
				if errors.Is(err, fs.ErrNotExist) {
					return
				}
				if err == nil {
					var v int64
					var set bool
					v, set, err = parse(strings.TrimSpace(string(text)))
					if err == nil && set {
						keep(dst, v, fmt.Sprintf("%s of cgroup %s", file, cg))
					}
				}
				if err != nil {
					errs = append(errs, fmt.Errorf("read the limit %s of cgroup %s: %w", file, cg, err))
				}
			}
			switch {
			case h.Unified:
				read("memory.max", parseMax, &lim.Memory)
				read("cpu.max", parseCPUMax, &lim.CPU)
				read("pids.max", parseMax, &lim.Pids)
			default:
				if has("memory") {
					read("memory.limit_in_bytes", parseV1Memory, &lim.Memory)
				}
				if has("cpu") {
					read("cpu.cfs_quota_us", cfsQuota(dir), &lim.CPU)
				}
				if has("pids") {
					read("pids.max", parseMax, &lim.Pids)
				}
			}
			if cg == "/" {
				break
			}
		}
		// The CPUs a cgroup's processes run on are the effective cpuset of
		// the nearest cgroup, itself or an ancestor, that has one: on v2 a
		// cgroup without the cpuset controller has no cpuset files and is
		// bound by its ancestor's. An effective cpuset already is what the
		// ancestors above it allow.
		file := "cpuset.effective_cpus"
		if h.Unified {
			file = "cpuset.cpus.effective"
		}
		if h.Unified || has("cpuset") {
			for cg := root; ; cg = path.Dir(cg) {
				read := cpusetReader(filepath.Join(base, cg), cg, file, &errs)
				if n, from := read(); from != "" {
					keep(&lim.CPU, n*1000, from)
					break
				}
				if cg == "/" {
					break
				}
			}
		}
	}
	return lim, errors.Join(errs...)
}

// cpusetReader reads the number of CPUs in a cpuset file of dir; an empty
// or missing file limits nothing (a v2 cgroup without the cpuset
// controller has none: its processes run on an ancestor's).
func cpusetReader(dir, cg, file string, errs *[]error) func() (int64, string) {
	return func() (int64, string) {
		text, err := os.ReadFile(filepath.Join(dir, file))
		if errors.Is(err, fs.ErrNotExist) {
			return 0, ""
		}
		if err != nil {
			*errs = append(*errs, fmt.Errorf("read the cpuset %s of cgroup %s: %w", file, cg, err))
			return 0, ""
		}
		cpus, err := ParseCPUList(strings.TrimSpace(string(text)))
		n := len(cpus)
		if err != nil {
			*errs = append(*errs, fmt.Errorf("read the cpuset %s of cgroup %s: %w", file, cg, err))
			return 0, ""
		}
		if n == 0 {
			return 0, ""
		}
		return int64(n), fmt.Sprintf("%s of cgroup %s (%s)", file, cg, strings.TrimSpace(string(text)))
	}
}

// ParseCPUList returns the CPUs of a kernel CPU list such as
// "0-3,8,10-11" (cpuset.cpus, /sys/devices/system/cpu/online).
func ParseCPUList(list string) ([]int, error) {
	var cpus []int
	if list == "" {
		return nil, nil
	}
	for part := range strings.SplitSeq(list, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("not a CPU list: %q", list)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b-a > 1<<16 {
				return nil, fmt.Errorf("not a CPU list: %q", list)
			}
		}
		for i := a; i <= b; i++ {
			cpus = append(cpus, i)
		}
	}
	return cpus, nil
}

// parseMax reads a v2 limit, or pids.max: a number, or "max" for none.
func parseMax(s string) (int64, bool, error) {
	if s == "max" {
		return 0, false, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, false, fmt.Errorf("not a number or max: %q", s)
	}
	return v, true, nil
}

// parseV1Memory reads memory.limit_in_bytes.
func parseV1Memory(s string) (int64, bool, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, false, fmt.Errorf("not a number: %q", s)
	}
	return v, v < v1Unlimited, nil
}

// parseCPUMax reads cpu.max, "QUOTA PERIOD" or "max PERIOD", as
// millicores, rounded down: a node never gets more than the quota.
func parseCPUMax(s string) (int64, bool, error) {
	quota, period, ok := strings.Cut(s, " ")
	if !ok {
		return 0, false, fmt.Errorf("not QUOTA PERIOD: %q", s)
	}
	if quota == "max" {
		return 0, false, nil
	}
	return millicores(quota, period)
}

// cfsQuota reads cpu.cfs_quota_us with cpu.cfs_period_us of the same
// cgroup dir, as millicores; -1 is no quota.
func cfsQuota(dir string) func(string) (int64, bool, error) {
	return func(quota string) (int64, bool, error) {
		if strings.HasPrefix(quota, "-") {
			return 0, false, nil
		}
		period, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_period_us"))
		if err != nil {
			return 0, false, err
		}
		return millicores(quota, strings.TrimSpace(string(period)))
	}
}

func millicores(quota, period string) (int64, bool, error) {
	q, err1 := strconv.ParseInt(quota, 10, 64)
	p, err2 := strconv.ParseInt(period, 10, 64)
	if err1 != nil || err2 != nil || q < 0 || p <= 0 {
		return 0, false, fmt.Errorf("not a CFS quota and period: %q %q", quota, period)
	}
	return q * 1000 / p, true, nil
}
