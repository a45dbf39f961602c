// Package proctree reads the process tree from a proc filesystem. nodeinit
// uses it when it is a child subreaper rather than PID 1: it cannot signal
// "every process of the namespace" with kill(-1), so at shutdown it signals
// the descendants it finds here instead.
package proctree

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// Descendants returns the pids of every process below pid, read from the
// proc filesystem mounted at procRoot ("/proc"). A process that ends while
// the tree is read is simply missing from the result.
func Descendants(procRoot string, pid int) ([]int, error) {
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
