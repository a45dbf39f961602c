// Command pause is the sandbox container of the real-node tests' pods, in
// an image built from scratch: it holds the pod's namespaces, reaps the
// zombies the pod's processes leave it as their PID 1, and exits 0 on TERM
// or INT.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 && err != syscall.EINTR {
				break
			}
		}
	}
}
