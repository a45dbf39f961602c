// The evacuation of a private v2 cgroup namespace's root: every process
// into /init, the controllers enabled for the kubelet's pods.

package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	occgroups "github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// evacuateByDefault is the auto value of --cgroup-v2-evacuate: true when
// nodeinit is PID 1 on a pure v2 host at the root of its cgroup namespace,
// where the kubelet could not create pod cgroups beside it, and the
// cgroup2 mount shows that root (never the host's tree above it).
func evacuateByDefault(pid int, l Layout) bool {
	h, ok := l.Unified()
	if !ok {
		return false
	}
	_, shown := h.Dir("/", "/")
	return pid == 1 && l.Mode() == V2 && h.Current == "/" && shown
}

// evacuateRoot moves every process of the namespace's root cgroup into
// /init and enables every available controller for the root's children.
func evacuateRoot(l Layout) error {
	if l.Mode() != V2 {
		return fmt.Errorf("only for cgroup v2, and this is %s", l.Mode())
	}
	h, _ := l.Unified()
	root, ok := h.Dir("/", "/")
	if !ok {
		return fmt.Errorf("the cgroup2 mount at %s shows cgroup %s, not the namespace root", h.Mountpoint, h.Root)
	}
	dest := filepath.Join(root, evacuationCgroup)
	if err := os.Mkdir(dest, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		if errors.Is(err, unix.EROFS) {
			return fmt.Errorf("the cgroup filesystem at %s is read-only, so the processes of the root stay there and the kubelet may fail to create pod cgroups (mount it read-write)", h.Mountpoint)
		}
		return fmt.Errorf("create %s: %w", evacuationCgroup, err)
	}
	moved, err := moveAll(root, dest)
	if err != nil {
		return err
	}
	available, err := occgroups.ReadFile(root, "cgroup.controllers")
	if err != nil {
		return fmt.Errorf("read the root's controllers: %w", err)
	}
	var enabled, failed []string
	for _, c := range strings.Fields(available) {
		if err := occgroups.WriteFile(root, "cgroup.subtree_control", "+"+c); err != nil {
			failed = append(failed, fmt.Sprintf("%s (%v)", c, errors.Unwrap(err)))
			continue
		}
		enabled = append(enabled, c)
	}
	klog.Infof("moved %d processes of the root cgroup into %s; controllers enabled for its children: %s",
		moved, evacuationCgroup, strings.Join(enabled, " "))
	if len(failed) > 0 {
		return fmt.Errorf("could not enable controllers in the root's cgroup.subtree_control: %s", strings.Join(failed, ", "))
	}
	return nil
}

// moveAll moves every process of the cgroup at dir into the one at dest. A
// process may fork while it runs, so it reads cgroup.procs again until it is
// empty, a bounded number of times.
func moveAll(dir, dest string) (int, error) {
	moved := 0
	for range 5 {
		pids, err := occgroups.GetPids(dir)
		if err != nil {
			return moved, fmt.Errorf("list the processes of the root cgroup: %w", err)
		}
		if len(pids) == 0 {
			return moved, nil
		}
		outside := 0
		for _, pid := range pids {
			// A process outside this pid namespace reads as pid 0, and
			// writing 0 would move the writer itself: it cannot be moved
			// from here.
			if pid == 0 {
				outside++
				continue
			}
			err := occgroups.WriteCgroupProc(dest, pid)
			if errors.Is(err, unix.ESRCH) {
				continue // it exited meanwhile
			}
			if err != nil {
				return moved, fmt.Errorf("move pid %d into %s: %w", pid, evacuationCgroup, err)
			}
			moved++
		}
		if outside == len(pids) {
			return moved, fmt.Errorf("%d processes of the root cgroup are outside nodeinit's pid namespace and cannot be moved into %s", outside, evacuationCgroup)
		}
	}
	return moved, fmt.Errorf("the root cgroup still has processes after moving %d of them into %s", moved, evacuationCgroup)
}
