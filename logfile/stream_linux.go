package logfile

import (
	"bytes"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
)

// bufferSize is how much of a task's output the pump reads at once, and
// holds while it waits for the end of a line: all that a pipe of pipeSize
// holds, so that a task that writes in large blocks is copied in as few
// reads and writes as it made. Its pages are touched only as far as the
// largest read has reached.
const bufferSize = pipeSize

// stream is one task's pipe and log file, and the unfinished line between
// them.
type stream struct {
	name string
	file *rotatingFile
	rfd  int      // read end, non-blocking, close-on-exec
	w    *os.File // write end, blocking, handed to every process of the task
	eof  bool

	buf []byte
	n   int // bytes of buf that hold a line not yet ended

	lost       loss      // dropped and not yet reported as such
	lastReport time.Time // when a loss was last logged

	// Coalescing (see coalesceFor).
	coalesce bool // the pipe holds pipeSize: reads may wait for more
	lastRead int  // bytes the last read took
	lastFull bool // and they filled the room in buf
	reads    int  // reads that took output: what coalescing saves

	// A call into the file that has not returned: when it began (Unix
	// nanoseconds; 0 when there is none) and how many bytes it writes (0:
	// it closes the file). A Close that gives up on a hung volume reads them
	// to say what was not written.
	busySince atomic.Int64
	busyBytes atomic.Int64
}

func newStream(name string, file *rotatingFile) *stream {
	return &stream{name: name, file: file, buf: make([]byte, bufferSize)}
}

// loss is output that failed writes dropped: counted, and reported at
// most every lossReportEvery, however the disk comes and goes.
type loss struct {
	since  time.Time // the first drop counted
	last   time.Time // the last drop counted
	writes int64
	lines  int64 // complete lines; a line too long for the buffer is written, and dropped, in pieces
	bytes  int64
	told   bool // its start has been logged
}

// lossReportEvery bounds how often a task's lost output is logged. A full
// disk can have room for one write in many (a line that fits in the last
// page of the file, a page freed elsewhere): that must not make every write
// a line of nodeinit's log. So a loss is logged when it starts and when
// writes work again, and a loss that starts within lossReportEvery of the
// last report is told when it has lasted that long, with what was dropped
// meanwhile. A write that works while the file system still has no free
// block fitted in the file's last page: the loss goes on, until a write
// works with room, or writes have worked for lossReportEvery since the
// last drop.
const lossReportEvery = time.Minute

// complete takes n new bytes at buf[s.n:] and writes everything up to the
// last newline; a buffer full of one unfinished line is written as it is.
func (s *stream) complete(n int) {
	fresh := s.buf[s.n : s.n+n]
	s.n += n
	if i := bytes.LastIndexByte(fresh, '\n'); i >= 0 {
		end := s.n - n + i + 1
		s.write(s.buf[:end])
		s.n = copy(s.buf, s.buf[end:s.n])
		return
	}
	if s.n == len(s.buf) {
		s.write(s.buf)
		s.n = 0
	}
}

// flush writes the last unfinished line, once the task can write no more.
func (s *stream) flush() {
	if s.n > 0 {
		s.write(s.buf[:s.n])
		s.n = 0
	}
}

// write hands p to the file in one call, so a rotation comes before or
// after it, never inside. An error drops p: the pump must go on reading, or
// the tasks would block on their full pipes.
func (s *stream) write(p []byte) {
	s.busyBytes.Store(int64(len(p)))
	s.busySince.Store(time.Now().UnixNano())
	err := s.file.Write(p)
	s.busySince.Store(0)
	now := s.file.now()
	if err != nil {
		s.drop(now, p, err)
		return
	}
	if s.lost.writes > 0 && (s.lost.told || now.Sub(s.lastReport) >= lossReportEvery) &&
		(now.Sub(s.lost.last) >= lossReportEvery || s.file.hasRoom()) {
		klog.InfoS("Writing a task's output to its log file works again", append([]any{"task", s.name, "file", s.file.path()}, s.lost.report(now)...)...)
		s.lost, s.lastReport = loss{}, now
	}
}

// drop counts p as lost, and logs that output is lost where that is news.
func (s *stream) drop(now time.Time, p []byte, err error) {
	if s.lost.writes == 0 {
		s.lost.since = now
	}
	s.lost.last = now
	s.lost.writes++
	s.lost.lines += int64(bytes.Count(p, []byte{'\n'}))
	s.lost.bytes += int64(len(p))
	if s.lost.told || now.Sub(s.lastReport) < lossReportEvery {
		return
	}
	kv := []any{"task", s.name}
	if s.lost.writes > 1 {
		// Since the last report writes have failed, and some worked.
		kv = append(kv, s.lost.report(now)...)
	}
	klog.ErrorS(err, "Writing a task's output to its log file failed; its output is dropped, and counted, until a write succeeds", kv...)
	s.lost.told, s.lastReport = true, now
}

// report is the loss for the log, at now.
func (l loss) report(now time.Time) []any {
	return []any{"droppedLines", l.lines, "droppedBytes", l.bytes, "droppedWrites", l.writes,
		"since", l.since.UTC().Format(time.RFC3339Nano), "for", now.Sub(l.since).Round(time.Millisecond)}
}

// reportLoss logs output lost and not yet reported, once the task can
// write no more: with the reports before it, every dropped line is counted
// once.
func (s *stream) reportLoss() {
	if s.lost.writes > 0 {
		klog.InfoS("Closing a task's log file with output dropped since the last report", append([]any{"task", s.name, "file", s.file.path()}, s.lost.report(s.file.now())...)...)
		s.lost = loss{}
	}
}

// closeFile closes the log file.
func (s *stream) closeFile() error {
	s.busyBytes.Store(0)
	s.busySince.Store(time.Now().UnixNano())
	defer s.busySince.Store(0)
	return s.file.close()
}

// stuck says what a call into the file that has not returned leaves
// unwritten, or "" when there is none.
func (s *stream) stuck() string {
	since, n := s.busySince.Load(), s.busyBytes.Load()
	if since == 0 {
		return ""
	}
	at := time.Unix(0, since).Format("15:04:05.000")
	if n == 0 {
		return fmt.Sprintf("closing %s has not returned since %s", s.file.path(), at)
	}
	return fmt.Sprintf("a write of %d bytes to %s has not returned since %s: it and what %s wrote after it are not in the file",
		n, s.file.path(), at, s.name)
}
