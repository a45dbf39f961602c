// Command sigstamp is the executor of the signal-latency workload: it stamps
// every SIGTERM it receives on the harness's FIFO and keeps running, so one
// child measures a long train of signals forwarded by its init.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/nodeinit/nodeinit/test/bench/stamp"
	"github.com/nodeinit/nodeinit/test/helpers/ownflags"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sigstamp:", err)
		os.Exit(1)
	}
}

func run() error {
	pipePath := flag.String("stamp", "", "FIFO to write \"ready\" and one \"TERM\" stamp per signal to")
	ownflags.Parse()
	pipe, err := stamp.Open(*pipePath)
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 16)
	signal.Notify(sig, syscall.SIGTERM)
	if err := pipe.Send("ready", stamp.Now()); err != nil {
		return err
	}
	for range sig {
		if err := pipe.Send("TERM", stamp.Now()); err != nil {
			return err
		}
	}
	return nil
}
