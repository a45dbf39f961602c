package logfile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/internal/linux"
)

// Coalescing. A task that logs line by line, as klog does, makes a write(2)
// per line; a pump that woke for each would spend about half as much CPU
// as the task.
// So after a round that read less than coalesceBelow from every pipe, the
// pump waits coalesceFor before it looks again, and then takes all that
// came meanwhile in one read. While it waits nothing sleeps on the pipes,
// so the task's writes wake no one; a pipe of pipeSize holds what a task
// writes meanwhile, up to 1 GiB/s. A round that read more does not wait:
// then the pump is behind, and reads on.
const (
	coalesceBelow = 16 << 10
	coalesceFor   = time.Millisecond
	// pipeSize is the capacity asked for each pipe: also the largest an
	// unprivileged process gets by default (/proc/sys/fs/pipe-max-size). A
	// pipe the kernel will not enlarge is read at once, every time.
	pipeSize = 1 << 20
)

// Pump copies every task's output from its pipe to its rotating file, in one
// goroutine for all tasks. Add every task, then Start, then Close once every
// child has exited. A Pump takes no lock that its caller holds: Add, Start and
// Close are called from one goroutine (the one that sets nodeinit up and
// shuts it down), and the copying goroutine shares nothing else with it.
type Pump struct {
	dir      *logDir
	rot      Rotation
	epfd     int
	wakefd   int // an eventfd that Close writes to end the copying goroutine
	streams  map[int32]*stream
	order    []*stream
	started  bool
	closed   bool
	done     chan struct{}
	err      error // what closing the files returned, read after done
	closeErr error // what Close returned
}

// NewPump creates rot.Dir if it is missing, checks that no one but its owner
// can write to it (the error for an unsafe one says which rule it breaks,
// on one line), holds it open and prepares a pump that writes there. An
// error names the directory.
func NewPump(rot Rotation) (*Pump, error) {
	if err := rot.validate(); err != nil {
		return nil, err
	}
	dir, err := openDir(rot.Dir)
	if err != nil {
		return nil, err
	}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		dir.close()
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	wakefd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		dir.close()
		unix.Close(epfd)
		return nil, os.NewSyscallError("eventfd", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wakefd)}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wakefd, &ev); err != nil {
		dir.close()
		unix.Close(epfd)
		unix.Close(wakefd)
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	return &Pump{
		dir:     dir,
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
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return nil, fmt.Errorf("add log file %q: not a task name", name)
	}
	for _, s := range p.order {
		if s.name == name {
			return nil, fmt.Errorf("add log file %q: already added", name)
		}
	}
	// Open the file now, so that a log dir that cannot be written is an
	// error at start, not a line lost later.
	file, err := openFile(p.dir, name, p.rot)
	if err != nil {
		return nil, err
	}
	var fds [2]int
	// Close-on-exec on both ends: only the task's own processes get the
	// write end, as their fd 1 and 2, and none gets the read end.
	if err := linux.Pipe2(&fds, 0); err != nil {
		file.close()
		return nil, err
	}
	// Only the read end is non-blocking: a writer blocks on a full pipe
	// instead of seeing EAGAIN, which most programs treat as fatal.
	err = linux.SetNonblock(fds[0], true)
	if err == nil {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fds[0])}
		if e := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, fds[0], &ev); e != nil {
			err = os.NewSyscallError("epoll_ctl", e)
		}
	}
	if err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		file.close()
		return nil, err
	}
	s := newStream(name, file)
	s.rfd = fds[0]
	if _, err := linux.SetPipeSize(fds[0], pipeSize); err != nil {
		klog.V(2).InfoS("Cannot enlarge a task's log pipe; its output is read as it comes", "task", name, "err", err)
	} else {
		s.coalesce = true
	}
	s.w = os.NewFile(uintptr(fds[1]), "|"+file.path())
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
// task) cannot hold nodeinit's exit; what it writes later is lost.
//
// Close waits at most bound: a write to a hung log volume does not return,
// and nodeinit must exit all the same. It then returns an error that says
// which write has not returned and what is therefore not in the files, and
// leaves the copying goroutine, and the descriptors it may still use, to
// the process's exit. Otherwise it returns the errors from closing the
// files. Close is not safe to call concurrently with Add or Start.
//
// What the bound cannot shorten is the kernel's own wait: a write blocked
// killably (a hard NFS mount, a FUSE server, dirty-page throttling) ends
// when the process exits, but one in uninterruptible sleep (a file system
// frozen with fsfreeze) keeps the exiting process until it returns.
func (p *Pump) Close(bound time.Duration) error {
	if p.closed {
		return p.closeErr
	}
	p.closed = true
	for _, s := range p.order {
		s.w.Close()
	}
	if !p.started {
		p.finish()
		p.release()
		p.closeErr = p.err
		return p.closeErr
	}
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	if _, err := linux.Write(p.wakefd, one[:]); err != nil {
		// The eventfd cannot be full after one write; a failure here
		// means the pump would never end.
		p.closeErr = err
		return err
	}
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case <-p.done:
		p.release()
		p.closeErr = p.err
	case <-timer.C:
		p.closeErr = p.gaveUp(bound)
	}
	return p.closeErr
}

// gaveUp is Close's error when the copying goroutine has not finished
// within bound.
func (p *Pump) gaveUp(bound time.Duration) error {
	var stuck []string
	for _, s := range p.order {
		if m := s.stuck(); m != "" {
			stuck = append(stuck, m)
		}
	}
	if len(stuck) == 0 {
		stuck = append(stuck, "the copying goroutine has not finished")
	}
	return fmt.Errorf("log files not closed within %s: %s; the tasks' output still in their pipes is not written either",
		bound, strings.Join(stuck, "; "))
}

// release closes what only Close and the ended copying goroutine used.
func (p *Pump) release() {
	unix.Close(p.epfd)
	unix.Close(p.wakefd)
	p.dir.close()
}

// run is the copying goroutine: it waits for any pipe to be readable, reads
// once from each readable pipe (so one busy task cannot starve the other),
// and writes whole lines to the files, until Close wakes it.
func (p *Pump) run() {
	defer close(p.done)
	events := make([]unix.EpollEvent, len(p.order)+1)
	for {
		n, err := linux.EpollWait(p.epfd, events, -1)
		if err != nil {
			klog.ErrorS(err, "Copying the tasks' output to their log files stopped")
			p.finish()
			return
		}
		closing, busy := false, false
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
			busy = busy || s.behind()
		}
		if closing {
			p.finish()
			return
		}
		if !busy {
			time.Sleep(coalesceFor)
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
		s.flush()
		s.reportLoss()
		if err := s.closeFile(); err != nil {
			errs = append(errs, err)
		}
		unix.Close(s.rfd)
	}
	p.err = errors.Join(errs...)
}

// behind reports whether the last read says the pump should read on at
// once rather than coalesce: it took much, or all there was room for, or
// the pipe is too small to hold what comes while the pump waits.
func (s *stream) behind() bool {
	return s.lastRead > 0 && (!s.coalesce || s.lastRead >= coalesceBelow || s.lastFull)
}

// readOnce reads once from the pipe and writes the lines it completed. It
// reports whether more may come now: false on end of file, on an empty pipe,
// and on a read error (logged).
func (s *stream) readOnce() bool {
	room := len(s.buf) - s.n
	n, err := linux.Read(s.rfd, s.buf[s.n:])
	s.lastRead, s.lastFull = max(n, 0), n == room
	switch {
	case errors.Is(err, unix.EAGAIN):
		return false
	case err != nil:
		klog.ErrorS(err, "Reading a task's output failed", "task", s.name)
		s.eof = true
		return false
	case n == 0:
		s.eof = true
		return false
	}
	s.reads++
	s.complete(n)
	return true
}
