// Command demo-proxy plays kube-proxy in `make demo`: it logs that it syncs
// service rules every interval and exits 0 on TERM or INT.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nodeinit/nodeinit/test/helpers/ownflags"
)

func main() {
	interval := flag.Duration("interval", 5*time.Second, "time between rule syncs")
	// Like the real one, it takes the flags nodeinit passes (--v,
	// --proxy-mode, --cgroup-root, ...); this stand-in ignores them.
	ownflags.Parse()

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	fmt.Printf("[demo-proxy] running as pid %d with args %q\n", os.Getpid(), os.Args[1:])
	for {
		select {
		case <-tick.C:
			fmt.Println("[demo-proxy] synced service rules")
		case s := <-sigs:
			if s == syscall.SIGHUP {
				fmt.Println("[demo-proxy] got SIGHUP")
				continue
			}
			fmt.Printf("[demo-proxy] got %v: exiting 0\n", s)
			return
		}
	}
}
