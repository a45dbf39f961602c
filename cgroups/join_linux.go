// Joining a cgroup: the steps of a join in every hierarchy, the v2 leaf,
// and moving a process in.

package cgroups

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	occgroups "github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// ownLeaf moves this process into the leaf of the unified cgroup it was
// started in (as planJoin decides it) when that cgroup is to be the
// kubelet's root on a pure v2 host and offers controllers: the kubelet
// enables them there for its pods, which the kernel refuses while nodeinit
// and its children live in the cgroup itself. It returns where this
// process is now (or, without act, would be), nil where it stays.
func ownLeaf(l Layout, leaf string, act bool) (map[string]string, error) {
	h, ok := l.Unified()
	if !ok || l.Mode() != V2 {
		return nil, nil
	}
	steps := planJoin(l, "/", h.Current, leaf, true)
	if len(steps) != 1 || steps[0].Missing != "" || steps[0].Cgroup == h.Current {
		return nil, nil
	}
	if !act {
		return map[string]string{h.Name(): steps[0].Cgroup}, nil
	}
	joined, err := join(l, h.Current, leaf, true)
	if err != nil {
		return joined, fmt.Errorf("cgroup %s cannot be the kubelet's cgroup root while nodeinit lives in it, and its leaf cannot be joined: %w", h.Current, err)
	}
	return joined, nil
}

// join moves this process into cgroup in every hierarchy where it exists
// (into the v2 leaf where planJoin says so: kubeletRoot says the cgroup is
// to be the kubelet's root), then verifies the move in /proc/self/cgroup. It tries every hierarchy even
// when one fails, so that the error can say where nodeinit is now.
func join(l Layout, cgroup, leaf string, kubeletRoot bool) (map[string]string, error) {
	if l.Mode() == NoCgroups {
		return nil, errors.New("no cgroup filesystem is mounted (no cgroup or cgroup2 line in /proc/self/mountinfo)")
	}
	steps := planJoin(l, "/", cgroup, leaf, kubeletRoot)
	var found, missing []step
	for _, s := range steps {
		if s.Missing == "" {
			found = append(found, s)
		} else {
			missing = append(missing, s)
		}
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("cgroup %s exists in none of the mounted hierarchies (%s)", cgroup, names(l))
	}
	if len(missing) > 0 {
		// Normal for Mesos: with its default isolation (posix/cpu,
		// posix/mem) the agent makes a container's cgroup only in the
		// freezer and name=systemd hierarchies, and on a hybrid host never
		// in the unified one. Whether the kubelet can use the cgroup is
		// decided, and warned about, apart from joining it.
		var in, stay, unreachable []string
		for _, s := range found {
			in = append(in, s.Hierarchy.Name())
		}
		for _, s := range missing {
			stay = append(stay, s.Hierarchy.Name()+":"+s.Hierarchy.Current)
			if !strings.HasPrefix(s.Missing, "cgroup ") {
				unreachable = append(unreachable, "; "+s.Missing)
			}
		}
		klog.Infof("cgroup %s exists only in the %s; staying in %s there%s",
			cgroup, plural(in, "hierarchy", "hierarchies"), strings.Join(stay, " "), strings.Join(unreachable, ""))
	}

	pid := os.Getpid()
	var failed, readOnly []string
	for _, s := range found {
		err := enter(s, pid)
		switch {
		case errors.Is(err, unix.EROFS):
			readOnly = append(readOnly, s.Hierarchy.Name())
		case err != nil:
			failed = append(failed, err.Error())
		}
	}
	// A read-only cgroupfs fails every hierarchy the same way: one clause
	// for all of them, not one error with its path per hierarchy.
	if len(readOnly) > 0 {
		failed = append(failed, fmt.Sprintf("cannot join cgroup %s in the %s: mounted read-only",
			cgroup, plural(readOnly, "hierarchy", "hierarchies")))
	}
	own, err := occgroups.ParseCgroupFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("verify the cgroup move: %w", err)
	}
	now := cgroupsOf(l, own)
	joined := map[string]string{}
	for _, s := range found {
		name := s.Hierarchy.Name()
		if now[name] == s.Cgroup {
			joined[name] = s.Cgroup
		} else if len(failed) == 0 {
			failed = append(failed, fmt.Sprintf("wrote pid %d into cgroup %s of the %s hierarchy, but /proc/self/cgroup shows %q", pid, s.Cgroup, name, now[name]))
		}
	}
	if len(failed) > 0 {
		return joined, fmt.Errorf("%s (now in %s)", strings.Join(failed, "; "), describe(l, now))
	}
	klog.Infof("joined cgroup %s: now in %s", cgroup, describe(l, now))
	return joined, nil
}

// enter moves pid into the cgroup of one step, creating the v2 leaf first
// when the plan needs it.
func enter(s step, pid int) error {
	if s.CreateLeaf {
		if err := os.Mkdir(s.Dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create the v2 leaf cgroup %s: %w", s.Cgroup, err)
		}
	}
	err := occgroups.WriteCgroupProc(s.Dir, pid)
	if err == nil {
		return nil
	}
	hint := ""
	if errors.Is(err, unix.ENOSPC) && slices.Contains(s.Hierarchy.Controllers, "cpuset") {
		hint = " (its cpuset.cpus or cpuset.mems is empty)"
	}
	// WriteCgroupProc says "failed to write <pid>: <path error>": keep the
	// path error, which names the file.
	if inner := errors.Unwrap(err); inner != nil {
		err = inner
	}
	return fmt.Errorf("join cgroup %s in the %s hierarchy: %w%s", s.Cgroup, s.Hierarchy.Name(), err, hint)
}
