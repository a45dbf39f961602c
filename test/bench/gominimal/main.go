// Command gominimal is the smallest correct PID 1 written in Go: it starts
// its command, forwards TERM and INT to it, reaps every child on SIGCHLD and
// exits with the command's status. It is a reference, not a contender: the
// distance from it to the C inits is what the Go runtime costs, and the
// distance from nodeinit to it is what nodeinit's own work costs.
//
//	gominimal CMD [ARG...]
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(argv []string) int {
	if len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "usage: gominimal CMD [ARG...]")
		return 2
	}
	sig := make(chan os.Signal, 64)
	signal.Notify(sig, unix.SIGCHLD, unix.SIGTERM, unix.SIGINT)
	// StartProcess, not exec.Cmd: nothing but the loop below may wait.
	p, err := os.StartProcess(argv[0], argv, &os.ProcAttr{
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "gominimal:", err)
		return 127
	}
	for s := range sig {
		if s != unix.SIGCHLD {
			unix.Kill(-p.Pid, s.(unix.Signal))
			continue
		}
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if err == unix.EINTR {
				continue
			}
			if pid <= 0 || err != nil {
				break
			}
			if pid == p.Pid {
				if ws.Signaled() {
					return 128 + int(ws.Signal())
				}
				return ws.ExitStatus()
			}
		}
	}
	return 1
}
