// Command pid1 prepares what surrounds an init under benchmark and then
// becomes it. The harness starts it as PID 1 of a fresh pid and mount
// namespace; it mounts a /proc of that pid namespace (as a container runtime
// would), writes the CLOCK_MONOTONIC time to file descriptor 3 and closes it,
// then execs the init, which keeps PID 1. The harness times the init from that
// stamp, so this program's own start-up is not part of any measurement and is
// the same for every init.
//
//	pid1 INIT [ARG...]
package main

import (
	"encoding/binary"
	"fmt"
	"os"

	"github.com/nodeinit/nodeinit/test/bench/stamp"
	"golang.org/x/sys/unix"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "pid1:", err)
		os.Exit(1)
	}
}

func run(argv []string) error {
	if len(argv) == 0 {
		return fmt.Errorf("usage: pid1 INIT [ARG...]")
	}
	// Slave propagation keeps host mounts visible but stops the /proc mount
	// below from reaching the host's namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("make / rslave: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc of the new pid namespace: %w", err)
	}
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], uint64(stamp.Now()))
	if _, err := unix.Write(3, buf[:]); err != nil {
		return fmt.Errorf("write start stamp to fd 3: %w", err)
	}
	// Closing it here, not at exec, keeps the init from inheriting it.
	unix.Close(3)
	err := unix.Exec(argv[0], argv, os.Environ())
	return fmt.Errorf("exec %s: %w", argv[0], err)
}
