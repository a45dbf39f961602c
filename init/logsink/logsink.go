// Package logsink is the output of nodeinit's own log. Writes never block:
// a line is queued in a bounded buffer and written to stdout by one writer
// goroutine, so that a full or unread stdout pipe can stall the log but never
// the reaper or the signal loop. When the buffer is full, lines are dropped
// and the number dropped is reported once output flows again.
//
// The writer calls write(2) itself rather than os.File.Write: the latter
// turns an EPIPE on stdout into a fatal SIGPIPE, and PID 1 must outlive its
// log reader. It writes with SIGPIPE and SIGTTOU blocked on the writing
// thread, so that its writes raise neither in nodeinit: nodeinit passes on
// every signal it receives, and a SIGPIPE raised by its own write to a
// closed log pipe would reach the executor, which did nothing. A write to a
// terminal from a background process group with TOSTOP set goes through
// instead of raising SIGTTOU, which would stop nodeinit (or, caught, make
// the kernel restart the write forever). The signals are blocked only for
// the time of a write, not on a thread kept for the writer: waking a
// goroutine locked to its own thread hands the processor over to that
// thread and back, two thread switches for every batch of lines, which
// made nodeinit's shutdown and the forwarding of a signal measurably slower.
package logsink

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/internal/linux"
)

// DefaultLimit is how many bytes of log may wait for stdout.
const DefaultLimit = 1 << 20

// Sink queues log lines for one output file.
type Sink struct {
	out   *os.File
	limit int

	mu      sync.Mutex
	pending []byte
	dropped int
	writing bool          // the writer holds a batch outside the lock
	wake    chan struct{} // tells the writer there is work
	idle    chan struct{} // closed and replaced when the writer has emptied the queue
}

// New returns a Sink that writes to out and starts its writer.
func New(out *os.File, limit int) *Sink {
	s := &Sink{out: out, limit: limit, wake: make(chan struct{}, 1), idle: make(chan struct{})}
	go s.writer()
	return s
}

// Write queues p, or drops it when the queue is full. It never blocks on the
// output and always reports success, as a log must not fail its caller.
func (s *Sink) Write(p []byte) (int, error) {
	s.mu.Lock()
	if len(s.pending)+len(p) > s.limit {
		s.dropped++
	} else {
		s.pending = append(s.pending, p...)
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (s *Sink) writer() {
	var batch []byte
	for range s.wake {
		for {
			s.mu.Lock()
			if s.dropped > 0 {
				note := fmt.Sprintf("logsink: %d log lines dropped while stdout was not being read\n", s.dropped)
				s.pending = append(s.pending, note...)
				s.dropped = 0
			}
			if len(s.pending) == 0 {
				s.writing = false
				close(s.idle)
				s.idle = make(chan struct{})
				s.mu.Unlock()
				break
			}
			batch, s.pending = s.pending, batch[:0]
			s.writing = true
			s.mu.Unlock()
			// Errors (EPIPE, EBADF) lose the batch: there is nowhere else
			// to say so.
			_ = writeQuietly(int(s.out.Fd()), batch)
		}
	}
}

// quiet are the signals a write of the sink's must not raise.
var quiet = linux.Sigset(unix.SIGPIPE, unix.SIGTTOU)

// writeQuietly writes b with the quiet signals blocked on the calling
// thread. The kernel sends SIGPIPE to the thread whose write met a closed
// pipe: blocked, it stays pending on that thread, and is taken off again
// before the signals are unblocked. A blocked SIGTTOU is never raised.
func writeQuietly(fd int, b []byte) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old unix.Sigset_t
	if err := unix.PthreadSigmask(unix.SIG_BLOCK, &quiet, &old); err != nil {
		return err
	}
	defer unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil)
	err := writeAll(fd, b)
	if errors.Is(err, unix.EPIPE) {
		pipe := linux.Sigset(unix.SIGPIPE)
		linux.TakePending(&pipe) // a standard signal is pending once at most
	}
	return err
}

// Flush waits until everything queued has been written, or until timeout:
// on exit, a stdout that nobody reads must not keep PID 1 alive.
func (s *Sink) Flush(timeout time.Duration) bool {
	s.mu.Lock()
	if len(s.pending) == 0 && s.dropped == 0 && !s.writing {
		s.mu.Unlock()
		return true
	}
	idle := s.idle
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	select {
	case <-idle:
		return true
	case <-time.After(timeout):
		return false
	}
}

// writeAll writes b to fd, through short writes and interruptions. A
// non-blocking fd (a stdout shared with a process that set O_NONBLOCK) is
// waited on until it takes more.
func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := linux.Write(fd, b)
		switch {
		case errors.Is(err, unix.EAGAIN):
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
			if _, err := linux.Poll(pfd, -1); err != nil {
				return err
			}
			continue
		case err != nil:
			return err
		}
		b = b[n:]
	}
	return nil
}
