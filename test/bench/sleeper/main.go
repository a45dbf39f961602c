// Command sleeper is a child that does nothing: the executor and proxy of the
// idle, shutdown and start-to-exit workloads. It sleeps until TERM or INT (or
// until the harness writes to the -exit-when FIFO) and then exits at once,
// stamping the moment of its exit on the harness's FIFO when -stamp is given.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/nodeinit/nodeinit/test/bench/stamp"
	"github.com/nodeinit/nodeinit/test/helpers/ownflags"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sleeper:", err)
		os.Exit(1)
	}
}

func run() error {
	pipePath := flag.String("stamp", "", "FIFO to write \"ready\" and \"<tag>-exit\" stamps to")
	tag := flag.String("tag", "sleeper", "name used in the stamps")
	children := flag.Int("children", 0, "sleeping child processes to start (they sleep until killed)")
	exitWhen := flag.String("exit-when", "", "FIFO to block on: exit as soon as the harness writes to it")
	ownflags.Parse()

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	for range *children {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find own binary: %w", err)
		}
		if err := exec.Command(self, "-tag="+*tag+"-child").Start(); err != nil {
			return fmt.Errorf("start sleeping child: %w", err)
		}
	}
	var pipe *stamp.Pipe
	if *pipePath != "" {
		var err error
		if pipe, err = stamp.Open(*pipePath); err != nil {
			return err
		}
	}
	if err := pipe.Send(*tag+"-ready", stamp.Now()); err != nil {
		return err
	}
	end := make(chan struct{})
	if *exitWhen != "" {
		ctl, err := os.Open(*exitWhen)
		if err != nil {
			return fmt.Errorf("open exit FIFO: %w", err)
		}
		go func() {
			var b [1]byte
			ctl.Read(b[:])
			close(end)
		}()
	}
	select {
	case <-sig:
	case <-end:
	}
	return pipe.Send(*tag+"-exit", stamp.Now())
}
