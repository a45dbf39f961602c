package footprint

// Transparent huge pages.
//
// Where the kernel backs every anonymous mapping with 2 MiB pages when it
// can (/sys/kernel/mm/transparent_hugepage/enabled set to "always", as
// Debian's kernels ship), the Go runtime's heap, whose ranges are reserved
// large and aligned, is backed so from its first use: a nodeinit idling
// with a few hundred KB of heap was seen holding 6.0 of its 6.5 MiB of
// anonymous memory in huge pages. A PID 1 that does almost nothing gains
// nothing from them, and every node container pays for them. So nodeinit
// turns them off for its own memory, with prctl(PR_SET_THP_DISABLE); the
// Go runtime's own switch, GODEBUG=disablethp=1, would have to be in the
// environment that nodeinit's children inherit.
//
// The setting is not nodeinit's to give the node: the kernel copies it to
// a child at fork and keeps it across execve, and the kubelet and the
// container runtime are to run as they would without nodeinit. A process
// has one setting for all its threads, so nodeinit lifts it for the fork
// of each child and sets it again as soon as the child has started
// (HugePages.Fork), as package oomscore does with the OOM score.

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// HugePages is nodeinit's huge-page setting as it keeps it.
type HugePages struct {
	// Disabled says that transparent huge pages are off for nodeinit's
	// memory now.
	Disabled bool
}

// DisableHugePages turns transparent huge pages off for the process's
// memory from now on. Its error (EINVAL from a kernel built without them)
// leaves the process as it was.
func DisableHugePages() (*HugePages, error) {
	if err := setTHPDisable(true); err != nil {
		return &HugePages{}, err
	}
	return &HugePages{Disabled: true}, nil
}

// Fork calls fork, which starts a child, with huge pages allowed again, so
// that the child starts as it would without nodeinit; and then disables
// them for the process again. It returns what failed around the fork: then
// the child started with them disabled, or nodeinit has them until the
// next Fork. A HugePages that did not disable them calls fork alone.
func (s *HugePages) Fork(fork func()) error {
	if s == nil || !s.Disabled {
		fork()
		return nil
	}
	if err := setTHPDisable(false); err != nil {
		fork()
		return fmt.Errorf("the child started with transparent huge pages disabled, as nodeinit has them: %w", err)
	}
	fork()
	if err := setTHPDisable(true); err != nil {
		return fmt.Errorf("nodeinit has transparent huge pages until its next child starts: %w", err)
	}
	return nil
}

func setTHPDisable(disabled bool) error {
	var v uintptr
	if disabled {
		v = 1
	}
	if err := unix.Prctl(unix.PR_SET_THP_DISABLE, v, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_THP_DISABLE, %d): %w", v, err)
	}
	return nil
}
