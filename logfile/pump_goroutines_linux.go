//go:build goroutinepump

package logfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/internal/linux"
)

const (
	coalesceBelow = 16 << 10
	coalesceFor   = time.Millisecond
	pipeSize      = 1 << 20
)

// goStream is a stream with its read end on the runtime's poller.
type goStream struct {
	*stream
	r        *os.File
	closeErr error
}

// Pump is, for a measurement against the epoll pump, a goroutine per task
// that reads its pipe through the Go runtime's poller.
type Pump struct {
	dir      *logDir
	rot      Rotation
	order    []*goStream
	started  bool
	closed   bool
	wg       sync.WaitGroup
	done     chan struct{}
	closeErr error
}

func NewPump(rot Rotation) (*Pump, error) {
	if err := rot.validate(); err != nil {
		return nil, err
	}
	dir, err := openDir(rot.Dir)
	if err != nil {
		return nil, err
	}
	return &Pump{dir: dir, rot: rot, done: make(chan struct{})}, nil
}

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
	file, err := openFile(p.dir, name, p.rot)
	if err != nil {
		return nil, err
	}
	var fds [2]int
	if err := linux.Pipe2(&fds, 0); err != nil {
		file.close()
		return nil, err
	}
	if err := linux.SetNonblock(fds[0], true); err != nil {
		os.NewFile(uintptr(fds[0]), "").Close()
		os.NewFile(uintptr(fds[1]), "").Close()
		file.close()
		return nil, err
	}
	s := &goStream{stream: newStream(name, file)}
	s.rfd = fds[0]
	if _, err := linux.SetPipeSize(fds[0], pipeSize); err == nil {
		s.coalesce = true
	}
	s.r = os.NewFile(uintptr(fds[0]), "|"+file.path())
	s.w = os.NewFile(uintptr(fds[1]), "|"+file.path())
	p.order = append(p.order, s)
	return s.w, nil
}

func (p *Pump) Start() {
	if p.started || p.closed {
		return
	}
	p.started = true
	for _, s := range p.order {
		p.wg.Go(s.copy)
	}
	go func() {
		p.wg.Wait()
		close(p.done)
	}()
}

func (p *Pump) Close(bound time.Duration) error {
	if p.closed {
		return p.closeErr
	}
	p.closed = true
	for _, s := range p.order {
		s.w.Close()
	}
	if !p.started {
		for _, s := range p.order {
			s.drain()
			s.end()
		}
		p.dir.close()
		p.closeErr = p.joined()
		return p.closeErr
	}
	for _, s := range p.order {
		s.r.SetReadDeadline(time.Now())
	}
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case <-p.done:
		p.dir.close()
		p.closeErr = p.joined()
	case <-timer.C:
		var stuck []string
		for _, s := range p.order {
			if m := s.stuck(); m != "" {
				stuck = append(stuck, m)
			}
		}
		p.closeErr = fmt.Errorf("log files not closed within %s: %s", bound, strings.Join(stuck, "; "))
	}
	return p.closeErr
}

func (p *Pump) joined() error {
	var errs []error
	for _, s := range p.order {
		errs = append(errs, s.closeErr)
	}
	return errors.Join(errs...)
}

func (s *goStream) copy() {
	for {
		n, err := s.r.Read(s.buf[s.n:])
		if n > 0 {
			s.reads++
			s.complete(n)
		}
		if err == nil {
			if s.coalesce && n < coalesceBelow {
				time.Sleep(coalesceFor)
			}
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			s.drain()
		} else if err != io.EOF {
			klog.ErrorS(err, "Reading a task's output failed", "task", s.name)
		}
		break
	}
	s.end()
}

func (s *goStream) end() {
	s.flush()
	s.closeErr = s.closeFile()
	s.r.Close()
}

func (s *goStream) drain() {
	rc, err := s.r.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) {
		for {
			n, err := linux.Read(int(fd), s.buf[s.n:])
			if err != nil || n <= 0 {
				return
			}
			s.complete(n)
		}
	})
}
