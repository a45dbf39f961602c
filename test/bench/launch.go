package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nodeinit/nodeinit/test/bench/stamp"
)

// helpers are the harness's own programs, built into a temporary directory,
// and the resolved paths of the inits.
type helpers struct {
	dir       string
	pid1      string
	orphans   string
	sigstamp  string
	sleeper   string
	logwriter string
	task      string // test/helpers/task, whose hold mode fills the host with processes
	bin       map[string]string
	seq       atomic.Int64
}

// buildHelpers compiles the helper programs next to this package into dir.
func buildHelpers(dir string) (*helpers, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	names := []string{"pid1", "orphans", "sigstamp", "sleeper", "gominimal", "gobare", "logwriter"}
	args := []string{"build", "-trimpath", "-ldflags=-s -w", "-o", dir + "/"}
	for _, n := range names {
		args = append(args, "./test/bench/"+n)
	}
	args = append(args, "./test/helpers/task")
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build the helper programs: %w\n%s", err, out)
	}
	return &helpers{
		dir:       dir,
		pid1:      filepath.Join(dir, "pid1"),
		orphans:   filepath.Join(dir, "orphans"),
		sigstamp:  filepath.Join(dir, "sigstamp"),
		sleeper:   filepath.Join(dir, "sleeper"),
		logwriter: filepath.Join(dir, "logwriter"),
		task:      filepath.Join(dir, "task"),
	}, nil
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("find the module root with go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("run the harness inside the nodeinit module")
	}
	return filepath.Dir(mod), nil
}

// A run is one init running as PID 1 of its own pid namespace.
type run struct {
	who   *contender
	cmd   *exec.Cmd
	start int64 // CLOCK_MONOTONIC just before the init was exec'd
	end   int64 // CLOCK_MONOTONIC when the harness saw it exit
	fifo  string
	pipe  *os.File
	lines *bufio.Reader
	seen  map[string]int64
	log   *os.File
	timer *time.Timer
}

// fifoPath returns the FIFO a run's children stamp on; child and proxy
// arguments are built with it before the run starts.
func (h *helpers) fifoPath() string {
	return filepath.Join(h.dir, "stamps-"+strconv.FormatInt(h.seq.Add(1), 10))
}

// start runs c as PID 1 of a new pid and mount namespace with child as its
// executor, through pid1, which mounts the namespace's /proc and stamps the
// moment it execs the init; a notPID1 contender gets a new mount namespace
// only, and runs in the harness's pid namespace. The run is killed after
// limit.
func (h *helpers) start(c *contender, fifo string, child, proxyArgs []string, limit time.Duration) (*run, error) {
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		return nil, fmt.Errorf("make stamp FIFO: %w", err)
	}
	// Read and write: opening never blocks, and the reader never sees EOF
	// between two writers. It is pollable, so reads take deadlines.
	pipe, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		os.Remove(fifo)
		return nil, fmt.Errorf("open stamp FIFO: %w", err)
	}
	log, err := os.CreateTemp(h.dir, "log-")
	if err != nil {
		pipe.Close()
		os.Remove(fifo)
		return nil, fmt.Errorf("create init log: %w", err)
	}
	r := &run{who: c, fifo: fifo, pipe: pipe, lines: bufio.NewReader(pipe), seen: map[string]int64{}, log: log}
	startR, startW, err := os.Pipe()
	if err != nil {
		r.close()
		return nil, fmt.Errorf("make start-stamp pipe: %w", err)
	}
	defer startR.Close()
	argv := c.argv(h, proxyArgs, child)
	r.cmd = exec.Command(h.pid1, argv...)
	r.cmd.Stdout, r.cmd.Stderr = log, log
	r.cmd.ExtraFiles = []*os.File{startW}
	r.cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS,
		Setsid:     true,
		Pdeathsig:  syscall.SIGKILL,
	}
	if c.notPID1 {
		r.cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWNS
	}
	err = r.cmd.Start()
	startW.Close()
	if err != nil {
		r.close()
		return nil, fmt.Errorf("start %s: %w", c.name, err)
	}
	r.timer = time.AfterFunc(limit, func() { r.cmd.Process.Kill() })
	var buf [8]byte
	if _, err := io.ReadFull(startR, buf[:]); err != nil {
		werr := r.cmd.Wait()
		r.close()
		return nil, fmt.Errorf("start %s: pid1 failed (%v): %s", c.name, werr, r.logText())
	}
	r.start = int64(binary.LittleEndian.Uint64(buf[:]))
	return r, nil
}

// wait waits for the init to exit and stamps the moment.
func (r *run) wait() error {
	err := r.cmd.Wait()
	r.end = stamp.Now()
	r.timer.Stop()
	return err
}

// waitOK waits and requires a zero exit status.
func (r *run) waitOK() error {
	if err := r.wait(); err != nil {
		return fmt.Errorf("%s exited with %v: %s", r.who.name, err, r.logText())
	}
	return nil
}

// kill ends the whole pid namespace by killing its init.
func (r *run) kill() {
	r.cmd.Process.Kill()
	r.wait()
}

// expect reads stamps until one tagged tag arrives and returns its time.
// Stamps with other tags are kept for a later expect.
func (r *run) expect(tag string, timeout time.Duration) (int64, error) {
	if ns, ok := r.seen[tag]; ok {
		delete(r.seen, tag)
		return ns, nil
	}
	r.pipe.SetReadDeadline(time.Now().Add(timeout))
	for {
		line, err := r.lines.ReadString('\n')
		if err != nil {
			return 0, fmt.Errorf("%s: no %q stamp from the child (%w): %s", r.who.name, tag, err, r.logText())
		}
		t, ns, err := stamp.Parse(line)
		if err != nil {
			return 0, err
		}
		if t == tag {
			return ns, nil
		}
		r.seen[t] = ns
	}
}

// logText returns the tail of what the init and its children printed.
func (r *run) logText() string {
	b, _ := os.ReadFile(r.log.Name())
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

func (r *run) close() {
	r.pipe.Close()
	os.Remove(r.fifo)
	r.log.Close()
	os.Remove(r.log.Name())
}
