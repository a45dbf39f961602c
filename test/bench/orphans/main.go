// Command orphans is the executor of the reaping workload. It makes -n orphans
// that exit at once (each double-forked, so the init of its pid namespace
// inherits it), then waits until the init has reaped every one of them and
// exits. It needs a /proc of its own pid namespace: the processes listed there
// are exactly the ones not yet reaped.
package main

import (
	"flag"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/nodeinit/nodeinit/test/helpers/ownflags"
	"golang.org/x/sys/unix"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "orphans:", err)
		os.Exit(1)
	}
}

func run() error {
	n := flag.Int("n", 5000, "orphans to make")
	timeout := flag.Duration("timeout", 60*time.Second, "give up when the init has not reaped them all by then")
	ownflags.Parse()

	before, err := countProcesses()
	if err != nil {
		return err
	}
	for i := range *n {
		pid, errno := forkOrphan()
		if errno != 0 {
			return fmt.Errorf("fork orphan %d: %w", i, errno)
		}
		// Reaping the middle process is what hands its child to the init.
		var ws unix.WaitStatus
		for {
			_, err := unix.Wait4(int(pid), &ws, 0, nil)
			if err != unix.EINTR {
				if err != nil {
					return fmt.Errorf("wait for the parent of orphan %d: %w", i, err)
				}
				break
			}
		}
	}
	// No notification exists for "a process was reaped by someone else", so
	// this waits by looking; 500µs between looks keeps it off the CPU that
	// the init needs for reaping.
	deadline := time.Now().Add(*timeout)
	for {
		now, err := countProcesses()
		if err != nil {
			return err
		}
		if now <= before {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d orphans still unreaped after %s", now-before, *timeout)
		}
		time.Sleep(500 * time.Microsecond)
	}
}

// forkOrphan forks a process that forks the orphan and exits at once; the
// orphan exits at once too. Both children run only raw system calls on the
// copied stack (no Go runtime work is safe after a bare fork), hence nosplit.
//
//go:nosplit
func forkOrphan() (uintptr, syscall.Errno) {
	pid, _, errno := syscall.RawSyscall(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0)
	if errno != 0 {
		return 0, errno
	}
	if pid == 0 {
		syscall.RawSyscall(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0)
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 0, 0, 0)
	}
	return pid, 0
}

// countProcesses counts the processes (live or zombie) of this pid namespace.
func countProcesses() (int, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return 0, fmt.Errorf("list processes: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return 0, fmt.Errorf("list processes: %w", err)
	}
	n := 0
	for _, name := range names {
		if name[0] >= '0' && name[0] <= '9' {
			n++
		}
	}
	return n, nil
}
