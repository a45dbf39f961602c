package supervisor

import (
	"os"

	"golang.org/x/sys/unix"
)

// ControllingTerminal reports whether f is nodeinit's controlling terminal,
// whose foreground process group nodeinit may then hand to the executor
// (Task.Foreground), as tini does. A terminal that is not the controlling
// one (nodeinit started with setsid, or its stdin redirected from another
// terminal) cannot be handed over: asking the kernel for its foreground
// group fails with ENOTTY, as would handing it over.
func ControllingTerminal(f *os.File) bool {
	_, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCGPGRP)
	return err == nil
}
