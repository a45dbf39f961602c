// Package cgroups owns nodeinit's place in the cgroup hierarchies: finding
// the Mesos container cgroup (or the one --cgroup-parent names), moving
// nodeinit into it on every mounted v1 hierarchy and on the v2 unified one
// (in a leaf child where v2 requires it), and emptying the root of a private
// v2 cgroup namespace so that a kubelet can create pod cgroups there. It
// runs before the first child starts, so the executor and the proxy inherit
// the result. Parsing /proc/self/cgroup and writing cgroup.procs go through
// github.com/opencontainers/cgroups; mount points come from
// /proc/self/mountinfo.
package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	occgroups "github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// DefaultLeaf is the leaf cgroup nodeinit uses on v2 below a cgroup that
// enables controllers for its children (--cgroup-v2-leaf).
const DefaultLeaf = "nodeinit"

// EvacuationCgroup is where the processes of a v2 namespace root move.
const EvacuationCgroup = "/init"

// Options are the cgroup flags of nodeinit.
type Options struct {
	// Parent is --cgroup-parent: a cgroup that wins over Mesos discovery.
	Parent string
	// Prefix is --mesos-cgroup-prefix (default "mesos").
	Prefix string
	// Leaf is --cgroup-v2-leaf (default DefaultLeaf).
	Leaf string
	// Require is --require-cgroup: a cgroup that cannot be found or joined
	// is an error instead of a warning.
	Require bool
	// Evacuate is --cgroup-v2-evacuate; nil means auto (EvacuateByDefault).
	Evacuate *bool
	// Getenv looks up the Mesos variables; nil means os.Getenv.
	Getenv func(string) string
}

// Result is what Setup found and did.
type Result struct {
	// Cgroup is the discovered cgroup (never the v2 leaf), empty when none
	// was named; it is set even when joining it failed (see Joined): the
	// executor gets it as --cgroup-root.
	Cgroup string
	// ContainerID is the Mesos container id, empty when none: the executor
	// gets it as MESOS_EXECUTOR_CONTAINER_UUID.
	ContainerID string
	// Joined maps each hierarchy nodeinit moved in ("cpu,cpuacct",
	// "unified", ...) to the cgroup it is in now.
	Joined map[string]string
	// Evacuated says the processes of the v2 namespace root moved to /init.
	Evacuated bool
}

// Setup evacuates the root of a v2 cgroup namespace when asked (or by
// default, see EvacuateByDefault), then discovers the target cgroup and
// moves this process into it. Without Require every failure is logged as a
// warning and nodeinit stays where it is; Setup returns an error only for
// invalid options or, with Require, for a cgroup it cannot find or join.
func Setup(opts Options) (Result, error) {
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	if opts.Prefix == "" {
		opts.Prefix = "mesos"
	}
	if opts.Leaf == "" {
		opts.Leaf = DefaultLeaf
	}
	if strings.Contains(opts.Leaf, "/") || opts.Leaf == "." || opts.Leaf == ".." {
		return Result{}, fmt.Errorf("--cgroup-v2-leaf %q is not a single cgroup name", opts.Leaf)
	}

	layout, err := ReadLayout("/")
	if err != nil {
		return Result{}, failure(opts.Require, err)
	}
	var res Result
	evacuate := EvacuateByDefault(os.Getpid(), layout)
	if opts.Evacuate != nil {
		evacuate = *opts.Evacuate
	}
	if evacuate {
		if err := evacuateRoot(layout); err != nil {
			klog.Warningf("cgroup v2 root evacuation: %v", err)
		} else {
			res.Evacuated = true
			// This process moved too: what follows must see /init.
			if moved, err := ReadLayout("/"); err == nil {
				layout = moved
			}
		}
	}

	target, err := Discover(opts.Parent, opts.Prefix, opts.Getenv)
	if err != nil {
		return res, failure(opts.Require, err)
	}
	res.Cgroup, res.ContainerID = target.Cgroup, target.ContainerID
	if target.Cgroup == "" {
		klog.Infof("no cgroup to join (neither --cgroup-parent nor %s nor %s is set): staying in %s",
			EnvMesosDirectory, EnvMesosContainerName, describe(layout, nil))
		return res, nil
	}
	klog.Infof("cgroup %s (from %s) on %s", target.Cgroup, target.Source, layout.Mode())
	res.Joined, err = join(layout, target.Cgroup, opts.Leaf)
	if err != nil {
		return res, failure(opts.Require, err)
	}
	return res, nil
}

// failure turns err into Setup's error with Require, or into a warning.
func failure(require bool, err error) error {
	if require {
		return fmt.Errorf("cgroup: %w", err)
	}
	klog.Warningf("cgroup: %v; carrying on in the current cgroups", err)
	return nil
}

// join moves this process into cgroup in every hierarchy where it exists,
// then verifies the move in /proc/self/cgroup. It tries every hierarchy even
// when one fails, so that the error can say where nodeinit is now.
func join(l Layout, cgroup, leaf string) (map[string]string, error) {
	if l.Mode() == NoCgroups {
		return nil, errors.New("no cgroup filesystem is mounted (no cgroup or cgroup2 line in /proc/self/mountinfo)")
	}
	steps := PlanJoin(l, "/", cgroup, leaf)
	var found, missing []Step
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
	for _, s := range missing {
		// Mesos on a hybrid host makes its cgroups in v1 only: not
		// finding it in the unified hierarchy there is expected.
		if s.Hierarchy.Unified && l.Mode() == Hybrid {
			klog.Infof("%s; joining the v1 hierarchies only", s.Missing)
		} else {
			klog.Warningf("%s; staying in %s there", s.Missing, s.Hierarchy.Current)
		}
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
func enter(s Step, pid int) error {
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

// EvacuateByDefault is the auto value of --cgroup-v2-evacuate: true when
// nodeinit is PID 1 on a pure v2 host at the root of its cgroup namespace,
// where the kubelet could not create pod cgroups beside it.
func EvacuateByDefault(pid int, l Layout) bool {
	h, ok := l.Unified()
	return pid == 1 && ok && l.Mode() == V2 && h.Current == "/"
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
	dest := filepath.Join(root, EvacuationCgroup)
	if err := os.Mkdir(dest, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		if errors.Is(err, unix.EROFS) {
			return fmt.Errorf("the cgroup filesystem at %s is read-only, so the processes of the root stay there and the kubelet may fail to create pod cgroups (mount it read-write)", h.Mountpoint)
		}
		return fmt.Errorf("create %s: %w", EvacuationCgroup, err)
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
		moved, EvacuationCgroup, strings.Join(enabled, " "))
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
				return moved, fmt.Errorf("move pid %d into %s: %w", pid, EvacuationCgroup, err)
			}
			moved++
		}
		if outside == len(pids) {
			return moved, fmt.Errorf("%d processes of the root cgroup are outside nodeinit's pid namespace and cannot be moved into %s", outside, EvacuationCgroup)
		}
	}
	return moved, fmt.Errorf("the root cgroup still has processes after moving %d of them into %s", moved, EvacuationCgroup)
}

// plural names the items of list with the noun that fits their number:
// "cpu hierarchy", "cpu memory hierarchies".
func plural(list []string, one, many string) string {
	if len(list) == 1 {
		return list[0] + " " + one
	}
	return strings.Join(list, " ") + " " + many
}

// names lists the hierarchies of l for a message.
func names(l Layout) string {
	var n []string
	for _, h := range l.Hierarchies {
		n = append(n, h.Name())
	}
	return strings.Join(n, " ")
}

// describe lists every hierarchy with this process's cgroup in it: from now
// where it has the hierarchy, else from l.
func describe(l Layout, now map[string]string) string {
	var parts []string
	for _, h := range l.Hierarchies {
		p, ok := now[h.Name()]
		if !ok {
			p = h.Current
		}
		parts = append(parts, h.Name()+":"+p)
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return "no cgroup hierarchy"
	}
	return strings.Join(parts, " ")
}
