// Package stamp owns the clock and the line protocol that the benchmark
// harness and its helper programs share: CLOCK_MONOTONIC nanoseconds (one
// clock for every process, whatever its namespace) sent as short tagged lines
// over a FIFO, so the harness blocks on a read instead of polling.
package stamp

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Now returns CLOCK_MONOTONIC in nanoseconds.
func Now() int64 {
	var ts unix.Timespec
	// CLOCK_MONOTONIC cannot fail with a valid pointer.
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// Pipe is the writing end of the harness's FIFO.
type Pipe struct{ f *os.File }

// Open opens the FIFO at path for writing. The harness holds it open for
// reading and writing, so this never blocks.
func Open(path string) (*Pipe, error) {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("open stamp pipe: %w", err)
	}
	return &Pipe{f: f}, nil
}

// Send writes one line "TAG NANOSECONDS". A line is far below PIPE_BUF, so
// lines of several writers never interleave.
func (p *Pipe) Send(tag string, ns int64) error {
	if p == nil {
		return nil
	}
	if _, err := p.f.Write([]byte(tag + " " + strconv.FormatInt(ns, 10) + "\n")); err != nil {
		return fmt.Errorf("write stamp %s: %w", tag, err)
	}
	return nil
}

// Parse splits a line written by Send.
func Parse(line string) (tag string, ns int64, err error) {
	tag, num, ok := strings.Cut(strings.TrimSpace(line), " ")
	if !ok {
		return "", 0, fmt.Errorf("stamp line %q: want \"TAG NANOSECONDS\"", line)
	}
	ns, err = strconv.ParseInt(num, 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("stamp line %q: %w", line, err)
	}
	return tag, ns, nil
}
