// Command demo-executor plays the kubelet in `make demo`: it logs a
// heartbeat, leaves an orphan behind now and then for nodeinit to reap, and
// on TERM or INT "drains its pods" for a moment and exits 0.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/nodeinit/nodeinit/test/helpers/ownflags"
)

func main() {
	interval := flag.Duration("interval", 3*time.Second, "time between heartbeats")
	drain := flag.Duration("drain", time.Second, "how long draining takes after TERM")
	// Like the real one, it takes the flags nodeinit passes (--v,
	// --proxy-mode, --cgroup-root, ...); this stand-in ignores them.
	ownflags.Parse()

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	say("demo executor running as pid %d; a heartbeat every %v", os.Getpid(), *interval)
	for n := 1; ; n++ {
		select {
		case <-tick.C:
			// A short-lived grandchild whose parent does not wait: an orphan.
			cmd := exec.Command("/bin/sh", "-c", "sleep 0.1 &")
			_ = cmd.Run()
			say("heartbeat %d: node healthy (left an orphan for nodeinit to reap)", n)
		case s := <-sigs:
			if s == syscall.SIGHUP {
				say("got SIGHUP: reloading configuration")
				continue
			}
			say("got %v: draining pods for %v", s, *drain)
			time.Sleep(*drain)
			say("drained; exiting 0")
			return
		}
	}
}

func say(format string, a ...any) {
	fmt.Printf("[demo-executor] "+format+"\n", a...)
}
