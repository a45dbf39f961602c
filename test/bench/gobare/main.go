// Command gobare is the barest Go program that can stand in for an init: it
// forks its command, waits for it, and exits with its status. It forwards no
// signal, so it is no init at all; it is the floor the benchmark's issue
// calibrates start-to-exit against ("a bare Go program that forks /bin/true"):
// the Go runtime's own start-up and exit, and nothing else.
//
//	gobare CMD [ARG...]
package main

import (
	"os"
	"syscall"
)

func main() {
	argv := os.Args[1:]
	if len(argv) == 0 {
		os.Stderr.WriteString("usage: gobare CMD [ARG...]\n")
		os.Exit(2)
	}
	pid, err := syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{0, 1, 2}})
	if err != nil {
		os.Stderr.WriteString("gobare: " + err.Error() + "\n")
		os.Exit(127)
	}
	// Blocking wait4(-1) reaps the orphans that a PID 1 inherits, too.
	for {
		var ws syscall.WaitStatus
		p, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			os.Exit(1)
		}
		if p != pid {
			continue
		}
		if ws.Signaled() {
			os.Exit(128 + int(ws.Signal()))
		}
		os.Exit(ws.ExitStatus())
	}
}
