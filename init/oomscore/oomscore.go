// Package oomscore owns nodeinit's own OOM score adjustment
// (/proc/self/oom_score_adj) and what its children start with.
//
// The kernel never lets the OOM killer choose the host's init, but it
// does choose the init of a pid namespace, and that death kills every
// process of the namespace: the whole node container, with no drain and no
// exit status of the executor's. Nothing is gained by it either: nodeinit
// holds a few MiB. So nodeinit takes the minimum, -1000, which exempts it
// from the killer. -999, the kubelet's own value, would not make it the
// last choice: the kernel weighs a process by its size plus oom_score_adj
// thousandths of the memory at stake (the cgroup's limit, or the
// machine's), so a -999 process is chosen before a -998 one (a pod's pause
// process) that is smaller by more than a thousandth of it: 1 MiB of a
// 1 GiB limit.
//
// Lowering it needs CAP_SYS_RESOURCE. Its children are not to inherit
// -1000: each starts at the value nodeinit started with, as it would
// without nodeinit, and the kubelet and kube-proxy lower their own (to
// -999, their --oom-score-adj). A process has one value for all its
// threads, and a child takes it from its parent at fork, before it runs
// any code of its own; so nodeinit goes back to its start value for the
// fork of each child and takes -1000 again as soon as the child has
// started (Score.Fork). The child also gets Start as the floor below which
// only a process with CAP_SYS_RESOURCE may set it, as without nodeinit.
package oomscore

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Min is the lowest adjustment: a process at Min is never the OOM
// killer's choice.
const Min = -1000

// selfPath is the calling process's adjustment.
const selfPath = "/proc/self/oom_score_adj"

// Score is the process's adjustment as nodeinit keeps it.
type Score struct {
	path string
	// Start is the value the process started with, the one its children
	// start with.
	Start int
	// Lowered says that the process is at Min now, lowered from Start.
	Lowered bool
}

// ErrNotPermitted is Lower's error where the process may not lower its
// adjustment: it lacks CAP_SYS_RESOURCE over the host (in a user namespace,
// say, or a container that drops it).
var ErrNotPermitted = errors.New("lowering it needs CAP_SYS_RESOURCE, which nodeinit lacks")

// Lower reads the process's adjustment and sets it to Min. Its error (one
// wrapping ErrNotPermitted, most often) leaves the process as it was, at
// Start.
func Lower() (*Score, error) { return lower(selfPath) }

func lower(path string) (*Score, error) {
	start, err := read(path)
	if err != nil {
		return nil, err
	}
	s := &Score{path: path, Start: start}
	if start == Min {
		return s, nil
	}
	if err := write(path, Min); err != nil {
		return s, err
	}
	s.Lowered = true
	return s, nil
}

// Fork calls fork, which starts a child, with the process at Start, so
// that the child starts there; and then lowers the process to Min again.
// It returns what failed around the fork: then the child started at Min,
// or nodeinit is at Start until the next Fork. A Score that did not lower
// the process calls fork alone.
func (s *Score) Fork(fork func()) error {
	if s == nil || !s.Lowered {
		fork()
		return nil
	}
	if err := write(s.path, s.Start); err != nil {
		fork()
		return fmt.Errorf("the child started at %d, not at nodeinit's start value %d: %w", Min, s.Start, err)
	}
	fork()
	if err := write(s.path, Min); err != nil {
		return fmt.Errorf("nodeinit stays at %d until its next child starts: %w", s.Start, err)
	}
	return nil
}

func read(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	return v, nil
}

// write sets the adjustment. The kernel refuses a value below the lowest
// the process has been given by one with CAP_SYS_RESOURCE with EACCES.
func write(path string, v int) error {
	err := os.WriteFile(path, []byte(strconv.Itoa(v)), 0)
	if errors.Is(err, unix.EACCES) {
		return fmt.Errorf("set %s to %d: %w", path, v, ErrNotPermitted)
	}
	return err
}
