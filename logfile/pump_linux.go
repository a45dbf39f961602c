package logfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"gopkg.in/natefinch/lumberjack.v2"
	"k8s.io/klog/v2"
)

// bufferSize is how much of a task's output the pump holds while it waits
// for the end of a line: the default capacity of a Linux pipe.
const bufferSize = 64 << 10

// Pump copies every task's output from its pipe to its rotating file, in one
// goroutine for all tasks. Add every task, then Start, then Close once every
// child has exited. A Pump takes no lock that its caller holds: Add, Start and
// Close are called from one goroutine (the one that sets nodeinit up and
// shuts it down), and the copying goroutine shares nothing else with it.
type Pump struct {
	rot     Rotation
	epfd    int
	wakefd  int // an eventfd that Close writes to end the copying goroutine
	streams map[int32]*stream
	order   []*stream
	started bool
	closed  bool
	done    chan struct{}
	err     error // what closing the files returned, read after done
}

// stream is one task's pipe and file.
type stream struct {
	name string
	path string
	rfd  int      // read end, non-blocking, close-on-exec
	w    *os.File // write end, blocking, handed to every process of the task
	log  *lumberjack.Logger
	max  int64

	buf []byte
	n   int // bytes of buf that hold a line not yet ended

	size         int64     // bytes in the current file, counted as lumberjack does
	lastRotation time.Time // wall time after the last write that rotated
	failing      bool      // the last write failed (logged once)
	eof          bool
}

// NewPump creates rot.Dir and prepares a pump that writes there. An error
// names the directory.
func NewPump(rot Rotation) (*Pump, error) {
	if err := rot.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(rot.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("create log dir %s: %w", rot.Dir, err)
	}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	wakefd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, os.NewSyscallError("eventfd", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wakefd)}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wakefd, &ev); err != nil {
		unix.Close(epfd)
		unix.Close(wakefd)
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	return &Pump{
		rot:     rot,
		epfd:    epfd,
		wakefd:  wakefd,
		streams: map[int32]*stream{},
		done:    make(chan struct{}),
	}, nil
}

// Add opens the log file of the task named name (DIR/name.log) and returns
// the write end of its pipe, to be the Stdout and Stderr of every process of
// that task, first start and respawns alike. The pump keeps it open until
// Close, so a respawned task writes on where the previous one stopped. The
// caller must not close it. Add must be called before Start.
func (p *Pump) Add(name string) (*os.File, error) {
	if p.started || p.closed {
		return nil, fmt.Errorf("add log file %q: the pump has already started", name)
	}
	if name == "" || strings.ContainsRune(name, '/') {
		return nil, fmt.Errorf("add log file %q: not a task name", name)
	}
	for _, s := range p.order {
		if s.name == name {
			return nil, fmt.Errorf("add log file %q: already added", name)
		}
	}

	s := &stream{name: name, path: p.rot.Path(name), log: p.rot.logger(name),
		max: int64(p.rot.MaxSizeMiB) << 20, buf: make([]byte, bufferSize)}
	// Open the file now, so that a log dir that cannot be written is an
	// error at start, not a line lost later. A file already at its maximum
	// size is rotated by this open.
	s.lastRotation = time.Now()
	if _, err := s.log.Write(nil); err != nil {
		return nil, fmt.Errorf("open log file %s: %w", s.path, err)
	}
	s.lastRotation = time.Now()
	s.resync()

	var fds [2]int
	// Close-on-exec on both ends: only the task's own processes get the
	// write end, as their fd 1 and 2, and none gets the read end.
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		s.log.Close()
		return nil, os.NewSyscallError("pipe2", err)
	}
	// Only the read end is non-blocking: a writer blocks on a full pipe
	// instead of seeing EAGAIN, which most programs treat as fatal.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		s.log.Close()
		return nil, os.NewSyscallError("fcntl", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fds[0])}
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, fds[0], &ev); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		s.log.Close()
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	s.rfd = fds[0]
	s.w = os.NewFile(uintptr(fds[1]), "|"+s.path)
	p.streams[int32(s.rfd)] = s
	p.order = append(p.order, s)
	return s.w, nil
}

// Start starts the one goroutine that copies every task's output.
func (p *Pump) Start() {
	if p.started || p.closed {
		return
	}
	p.started = true
	go p.run()
}

// Close ends the pump once every child has exited: it closes the write ends,
// drains what is left in the pipes into the files (a last line without a
// newline included), and closes the files. It does not wait for the pipes'
// end of file, so a process that still holds a write end (an orphan of a
// task) cannot hold nodeinit's exit; what it writes later is lost. Close
// returns the first error from closing the files. Close is not safe to call
// concurrently with Add or Start.
func (p *Pump) Close() error {
	if p.closed {
		return p.err
	}
	p.closed = true
	for _, s := range p.order {
		s.w.Close()
	}
	if p.started {
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		if _, err := unix.Write(p.wakefd, one[:]); err != nil {
			// The eventfd cannot be full after one write; a failure here
			// means the pump would never end.
			return os.NewSyscallError("write eventfd", err)
		}
		<-p.done
	} else {
		p.finish()
	}
	unix.Close(p.epfd)
	unix.Close(p.wakefd)
	return p.err
}

// run is the copying goroutine: it waits for any pipe to be readable, reads
// once from each readable pipe (so one busy task cannot starve the other),
// and writes whole lines to the files, until Close wakes it.
func (p *Pump) run() {
	defer close(p.done)
	events := make([]unix.EpollEvent, len(p.order)+1)
	for {
		n, err := unix.EpollWait(p.epfd, events, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			klog.ErrorS(os.NewSyscallError("epoll_wait", err), "Copying the tasks' output to their log files stopped")
			p.finish()
			return
		}
		closing := false
		for _, ev := range events[:n] {
			if ev.Fd == int32(p.wakefd) {
				closing = true
				continue
			}
			s := p.streams[ev.Fd]
			if s == nil || s.eof {
				continue
			}
			if !s.readOnce() && s.eof {
				// End of file before Close cannot happen while the pump
				// holds the write end, nor can a read error on a pipe;
				// stop watching it rather than spin.
				unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, s.rfd, nil)
			}
		}
		if closing {
			p.finish()
			return
		}
	}
}

// finish drains every pipe, writes a last unfinished line, and closes the
// files and the read ends.
func (p *Pump) finish() {
	var errs []error
	for _, s := range p.order {
		for !s.eof && s.readOnce() {
		}
		if s.n > 0 {
			s.write(s.buf[:s.n])
			s.n = 0
		}
		if err := s.log.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close log file %s: %w", s.path, err))
		}
		unix.Close(s.rfd)
	}
	p.err = errors.Join(errs...)
}

// readOnce reads once from the pipe and writes the lines it completed. It
// reports whether more may come now: false on end of file, on an empty pipe,
// and on a read error (logged).
func (s *stream) readOnce() bool {
	for {
		n, err := unix.Read(s.rfd, s.buf[s.n:])
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN):
			return false
		case err != nil:
			klog.ErrorS(os.NewSyscallError("read", err), "Reading a task's output failed", "task", s.name)
			s.eof = true
			return false
		case n == 0:
			s.eof = true
			return false
		}
		s.complete(n)
		return true
	}
}

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

// write hands p to lumberjack in one call, so a rotation comes before or
// after it, never inside. An error drops p: the pump must go on reading, or
// the tasks would block on their full pipes.
func (s *stream) write(p []byte) {
	rotates := s.size+int64(len(p)) > s.max
	if rotates {
		distinctBackupName(s.lastRotation)
	}
	_, err := s.log.Write(p)
	if rotates {
		s.lastRotation = time.Now()
	}
	if err != nil {
		if !s.failing {
			klog.ErrorS(err, "Writing a task's output to its log file failed; output is dropped until a write succeeds", "task", s.name, "file", s.path)
		}
		s.failing = true
		s.lastRotation = time.Now()
		s.resync()
		return
	}
	if s.failing {
		klog.InfoS("Writing a task's output to its log file works again", "task", s.name, "file", s.path)
		s.failing = false
	}
	if rotates {
		s.size = int64(len(p))
	} else {
		s.size += int64(len(p))
	}
}

// resync takes the size of the current file from the file system, after an
// open or a failed write left the count unknown.
func (s *stream) resync() {
	s.size = 0
	if fi, err := os.Stat(s.path); err == nil {
		s.size = fi.Size()
	}
}
