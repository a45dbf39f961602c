// Package proctree reads trees of processes from a proc filesystem. nodeinit
// uses it when it is a child subreaper rather than PID 1: it cannot signal
// "every process of the namespace" with kill(-1), so at shutdown it signals
// the descendants it finds here instead (docs/design.md, rule 9). The
// login1 bus asks it whether a client is in the executor's tree (Within).
//
// The walk follows the kernel's own lists of each process's children
// (/proc/PID/task/TID/children, one per thread, since a child belongs to
// the thread that forked it), so its cost grows with nodeinit's subtree, not
// with the number of processes on the host. On a kernel built without those
// lists (CONFIG_PROC_CHILDREN) it falls back to reading the parent of every
// process in /proc.
package proctree

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// Descendants returns the pids of every process below pid, parents before
// their children, read from the proc filesystem at procRoot ("/proc"). A
// process that ends while the tree is read is missing from the result, and
// one forked meanwhile may be: callers that must catch every descendant walk
// again until none is left.
func Descendants(procRoot string, pid int) ([]int, error) {
	children, err := Children(procRoot, pid)
	if errors.Is(err, errNoChildLists) {
		return scan(procRoot, pid)
	}
	if err != nil {
		return nil, err
	}
	var out []int
	for len(children) > 0 {
		p := children[0]
		children = children[1:]
		out = append(out, p)
		// A child that is gone has no children left to list.
		more, _ := Children(procRoot, p)
		children = append(children, more...)
	}
	return out, nil
}

// errNoChildLists says the kernel keeps no /proc/PID/task/TID/children.
var errNoChildLists = errors.New("the kernel lists no children in /proc (CONFIG_PROC_CHILDREN)")

// Children returns the children of pid, from the children list of each of
// its threads.
func Children(procRoot string, pid int) ([]int, error) {
	taskDir := filepath.Join(procRoot, strconv.Itoa(pid), "task")
	tasks, err := os.ReadDir(taskDir)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join(taskDir, t.Name(), "children"))
		if errors.Is(err, fs.ErrNotExist) {
			if _, statErr := os.Stat(filepath.Join(taskDir, t.Name())); statErr == nil {
				return nil, errNoChildLists
			}
			continue // the thread ended meanwhile
		}
		if err != nil {
			continue
		}
		for f := range bytes.FieldsSeq(b) {
			if c, err := strconv.Atoi(string(f)); err == nil {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

// scan finds the descendants of pid from the parent of every process in
// /proc: the way that works on every kernel, at a cost that grows with the
// host's process count.
func scan(procRoot string, pid int) ([]int, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, err
	}
	children := make(map[int][]int)
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		ppid, err := ParentPid(stat)
		if err != nil {
			continue
		}
		children[ppid] = append(children[ppid], p)
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out, nil
}

// maxDepth bounds a walk up a process's parents: deeper than any tree the
// kubelet makes, and a bound on what one question costs, whatever a process
// does to make its chain long.
const maxDepth = 64

// Within reports whether pid is root or one of root's descendants, by
// walking up pid's parents in the proc filesystem at procRoot. It reads one
// stat per generation, at most maxDepth of them, never the host's process
// list. A process that ends during the walk ends it with an error. It
// answers from pids alone: a caller that must not be fooled by a pid reused
// meanwhile checks, after the walk, that the process it asked about still
// lives (a pidfd does that).
func Within(procRoot string, pid, root int) (bool, error) {
	for range maxDepth {
		if pid == root {
			return true, nil
		}
		if pid <= 1 {
			// Init, or 0: the parent of a pid namespace's init.
			return false, nil
		}
		stat, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
		if err != nil {
			return false, err
		}
		ppid, err := ParentPid(stat)
		if err != nil {
			return false, fmt.Errorf("process %d: %w", pid, err)
		}
		pid = ppid
	}
	return false, fmt.Errorf("more than %d generations above the process", maxDepth)
}

// ParentPid parses the ppid out of the text of /proc/PID/stat. The command
// name in parentheses may itself hold spaces and parentheses, so the fields
// are counted from the last ')'.
func ParentPid(stat []byte) (int, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed stat: no ')'")
	}
	fields := bytes.Fields(stat[i+1:])
	// fields[0] is the state, fields[1] the ppid.
	if len(fields) < 2 {
		return 0, fmt.Errorf("malformed stat: too few fields")
	}
	return strconv.Atoi(string(fields[1]))
}

// Describe names a process for the log: "1234 (sleep) S". A process that is
// gone is "1234 (gone)".
func Describe(procRoot string, pid int) string {
	stat, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	open, end := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if err != nil || open < 0 || end < open {
		return strconv.Itoa(pid) + " (gone)"
	}
	state := ""
	if f := bytes.Fields(stat[end+1:]); len(f) > 0 {
		state = " " + string(f[0])
	}
	return fmt.Sprintf("%d %s%s", pid, stat[open:end+1], state)
}
