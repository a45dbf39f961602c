// Command logwriter is the child of the log-throughput workload: it writes
// numbered lines of a fixed length, each with its own write(2) as a logger
// such as klog does (or -batch lines per write, as a buffered writer does),
// to its stdout or, with -o, to a file it opens itself.
// Before it exits it stamps its own CPU time (user and system, in
// nanoseconds) on the harness's FIFO, so that the harness can take it out
// of the rusage of the init that reaped it.
//
// Line i is "%011d " (i), then 'x' up to the line length, then a newline:
// a reader that checks the number of every line finds a line lost, split,
// doubled or out of order.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"github.com/nodeinit/nodeinit/test/bench/stamp"
	"github.com/nodeinit/nodeinit/test/helpers/ownflags"
)

// numberWidth is the width of the line number at the start of a line.
const numberWidth = 11

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "logwriter:", err)
		os.Exit(1)
	}
}

func run() error {
	total := flag.Int64("bytes", 1<<30, "bytes to write, in whole lines")
	length := flag.Int("line", 200, "length of a line, newline included")
	out := flag.String("o", "", "write to this file (created or truncated) instead of stdout")
	batch := flag.Int("batch", 1, "lines per write(2)")
	pipePath := flag.String("stamp", "", "FIFO to write the \"writer-cpu\" stamp to")
	ownflags.Parse()
	if *length < numberWidth+2 {
		return fmt.Errorf("-line %d: a line needs at least %d bytes", *length, numberWidth+2)
	}
	if *batch < 1 {
		return fmt.Errorf("-batch %d: at least one line per write", *batch)
	}
	fd := 1
	if *out != "" {
		f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		fd = int(f.Fd())
	}
	buf := make([]byte, *length**batch)
	for i := range buf {
		buf[i] = 'x'
	}
	for k := range *batch {
		line := buf[k**length : (k+1)**length]
		line[numberWidth] = ' '
		line[len(line)-1] = '\n'
	}
	lines := *total / int64(*length)
	for i := int64(0); i < lines; i += int64(*batch) {
		n := min(int64(*batch), lines-i)
		for k := range n {
			number(buf[k*int64(*length):][:numberWidth], i+k)
		}
		if err := writeAll(fd, buf[:n*int64(*length)]); err != nil {
			return fmt.Errorf("write line %d: %w", i, err)
		}
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return err
	}
	if *pipePath == "" {
		return nil
	}
	pipe, err := stamp.Open(*pipePath)
	if err != nil {
		return err
	}
	return pipe.Send("writer-cpu", ru.Utime.Nano()+ru.Stime.Nano())
}

// number writes i in decimal into b, right-aligned and zero-padded.
func number(b []byte, i int64) {
	s := strconv.AppendInt(make([]byte, 0, numberWidth), i, 10)
	pad := len(b) - len(s)
	for k := range pad {
		b[k] = '0'
	}
	copy(b[pad:], s)
}

func writeAll(fd int, p []byte) error {
	for len(p) > 0 {
		n, err := syscall.Write(fd, p)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}
