package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nodeinit/nodeinit/test/bench/stamp"
)

// The workloads, in table order. Times are in nanoseconds, sizes in bytes.
const (
	wStart        = "start-to-exit"
	wReap         = "reaping"
	wSignal       = "signal latency"
	wShutdown     = "shutdown (executor exit → init exit)"
	wShutdownLast = "shutdown (last child exit → init exit)"
	wIdleCPU      = "idle CPU per minute"
	wRSS          = "idle VmRSS"
	wHWM          = "idle VmHWM"
	wAnon         = "idle RssAnon"
	wSize         = "binary size"
)

var workloads = []string{wStart, wReap, wSignal, wShutdown, wShutdownLast, wIdleCPU, wRSS, wHWM, wAnon, wSize}

// runLimit bounds any single run, so a hung init fails the harness instead
// of stalling it.
const runLimit = 2 * time.Minute

// startToExit times INIT -- /bin/true from the exec of the init to its exit.
func (b *bench) startToExit(c *contender) error {
	for range b.cfg.starts {
		ns, err := b.startOnce(c)
		if err != nil {
			return err
		}
		b.add(wStart, c, ns)
	}
	return nil
}

// startOnce runs INIT -- /bin/true once and returns its time in
// nanoseconds.
func (b *bench) startOnce(c *contender) (float64, error) {
	r, err := b.h.start(c, b.h.fifoPath(), []string{"/bin/true"}, nil, runLimit)
	if err != nil {
		return 0, err
	}
	err = r.waitOK()
	r.close()
	if err != nil {
		return 0, err
	}
	return float64(r.end - r.start), nil
}

// reaping times INIT -- orphans: the helper makes the orphans and exits once
// the init has reaped them all.
func (b *bench) reaping(c *contender) error {
	child := []string{b.h.orphans, "-n=" + strconv.Itoa(b.cfg.orphans)}
	r, err := b.h.start(c, b.h.fifoPath(), child, nil, runLimit)
	if err != nil {
		return err
	}
	err = r.waitOK()
	r.close()
	if err != nil {
		return err
	}
	b.add(wReap, c, float64(r.end-r.start))
	return nil
}

// signalLatency sends a train of SIGTERMs to the init and takes, for each,
// the time until its child stamps the receipt.
func (b *bench) signalLatency(c *contender) error {
	if c.noSignals {
		return nil
	}
	fifo := b.h.fifoPath()
	r, err := b.h.start(c, fifo, []string{b.h.sigstamp, "-stamp=" + fifo}, nil, runLimit)
	if err != nil {
		return err
	}
	defer r.close()
	defer r.kill()
	if _, err := r.expect("ready", 30*time.Second); err != nil {
		return err
	}
	pid := r.cmd.Process.Pid
	for range b.cfg.signals {
		sent := stamp.Now()
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			return fmt.Errorf("signal %s: %w", c.name, err)
		}
		got, err := r.expect("TERM", 10*time.Second)
		if err != nil {
			return err
		}
		b.add(wSignal, c, float64(got-sent))
		// A pause lets the init settle back into waiting, as between the
		// rare signals of real life.
		time.Sleep(time.Millisecond)
	}
	return nil
}

// shutdown has the executor exit once everything is up and times how long
// the init takes to follow; with a proxy, the proxy exits as soon as it gets
// TERM. The harness tells the executor when, through a second FIFO, so that a
// slow start on a busy machine cannot cut the proxy's start short.
func (b *bench) shutdown(c *contender) error {
	for range b.cfg.shutdowns {
		execExit, last, err := b.shutdownOnce(c)
		if err != nil {
			return err
		}
		b.add(wShutdown, c, execExit)
		b.add(wShutdownLast, c, last)
	}
	return nil
}

// shutdownOnce runs one shutdown and returns the time from the executor's
// exit, and from the last child's, to the init's, in nanoseconds.
func (b *bench) shutdownOnce(c *contender) (execExit, last float64, err error) {
	fifo, ctlPath := b.h.fifoPath(), b.h.fifoPath()
	if err := syscall.Mkfifo(ctlPath, 0o600); err != nil {
		return 0, 0, fmt.Errorf("make exit FIFO: %w", err)
	}
	defer os.Remove(ctlPath)
	ctl, err := os.OpenFile(ctlPath, os.O_RDWR, 0)
	if err != nil {
		return 0, 0, fmt.Errorf("open exit FIFO: %w", err)
	}
	defer ctl.Close()
	child := []string{b.h.sleeper, "-stamp=" + fifo, "-tag=executor", "-exit-when=" + ctlPath}
	proxy := []string{"-stamp=" + fifo, "-tag=proxy"}
	r, err := b.h.start(c, fifo, child, proxy, runLimit)
	if err != nil {
		return 0, 0, err
	}
	defer r.close()
	ready := []string{"executor-ready"}
	if c.proxy {
		ready = append(ready, "proxy-ready")
	}
	for _, tag := range ready {
		if _, err := r.expect(tag, 30*time.Second); err != nil {
			r.kill()
			return 0, 0, err
		}
	}
	if _, err := ctl.Write([]byte{'x'}); err != nil {
		r.kill()
		return 0, 0, fmt.Errorf("tell the executor to exit: %w", err)
	}
	if err := r.waitOK(); err != nil {
		return 0, 0, err
	}
	exited, err := r.expect("executor-exit", time.Second)
	if err != nil {
		return 0, 0, err
	}
	lastExit := exited
	if c.proxy {
		if lastExit, err = r.expect("proxy-exit", time.Second); err != nil {
			return 0, 0, err
		}
	}
	return float64(r.end - exited), float64(r.end - lastExit), nil
}

// idle runs every init at once, each with two sleeping children, and takes
// the CPU each init uses over the window and its memory at the end. Running
// them side by side gives each the same machine for the same minute.
func (b *bench) idle(cs []*contender) error {
	var runs []*run
	defer func() {
		for _, r := range runs {
			r.kill()
			r.close()
		}
	}()
	for _, c := range cs {
		fifo := b.h.fifoPath()
		children := "1"
		if c.proxy {
			children = "0"
		}
		child := []string{b.h.sleeper, "-stamp=" + fifo, "-tag=executor", "-children=" + children}
		r, err := b.h.start(c, fifo, child, []string{"-stamp=" + fifo, "-tag=proxy"}, b.cfg.idle+runLimit)
		if err != nil {
			return err
		}
		runs = append(runs, r)
	}
	for _, r := range runs {
		if _, err := r.expect("executor-ready", 30*time.Second); err != nil {
			return err
		}
		if r.who.proxy {
			if _, err := r.expect("proxy-ready", 30*time.Second); err != nil {
				return err
			}
		}
	}
	// Start-up is not idle: let every init finish it first.
	time.Sleep(b.cfg.settle)
	before := make([]int64, len(runs))
	for i, r := range runs {
		ns, err := cpuTime(r.cmd.Process.Pid)
		if err != nil {
			return err
		}
		before[i] = ns
	}
	time.Sleep(b.cfg.idle)
	for i, r := range runs {
		ns, err := cpuTime(r.cmd.Process.Pid)
		if err != nil {
			return err
		}
		b.add(wIdleCPU, r.who, float64(ns-before[i])*float64(time.Minute)/float64(b.cfg.idle))
		mem, err := memory(r.cmd.Process.Pid)
		if err != nil {
			return err
		}
		b.add(wRSS, r.who, float64(mem["VmRSS"]))
		b.add(wHWM, r.who, float64(mem["VmHWM"]))
		b.add(wAnon, r.who, float64(mem["RssAnon"]))
	}
	return nil
}

// size records the size of each init's binary on disk.
func (b *bench) size(c *contender) error {
	p := b.h.bin[c.binary]
	if c.reference != "" {
		p = filepath.Join(b.h.dir, c.reference)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("size of %s: %w", c.name, err)
	}
	b.add(wSize, c, float64(fi.Size()))
	b.notes[c.name] = binaryKind(p)
	return nil
}

// cpuTime returns the CPU time of every thread of pid, in nanoseconds, from
// /proc/PID/task/*/schedstat: /proc/PID/stat has the same sum in clock ticks
// of 10 ms, too coarse for an idle minute. Threads of the Go runtime do not
// exit, so the sum over live threads is the process's total.
func cpuTime(pid int) (int64, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		return 0, fmt.Errorf("read CPU time of pid %d: no tasks", pid)
	}
	var total int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			return 0, fmt.Errorf("read CPU time of pid %d: %w", pid, err)
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return 0, fmt.Errorf("read CPU time of pid %d: empty %s", pid, t)
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("read CPU time of pid %d: %w", pid, err)
		}
		total += ns
	}
	return total, nil
}

// memory returns VmRSS, VmHWM and RssAnon of pid in bytes. RssAnon is the
// init's private memory; the rest of VmRSS is its binary's pages from the
// page cache, which the kernel may map whole (large folios), so that VmRSS
// grows with the binary's size more than with anything the init does.
func memory(pid int) (map[string]int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, fmt.Errorf("read memory of pid %d: %w", pid, err)
	}
	mem := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM" && k != "RssAnon") {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return nil, fmt.Errorf("read memory of pid %d: unexpected %q", pid, sc.Text())
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("read memory of pid %d: %w", pid, err)
		}
		mem[k] = kb << 10
	}
	if len(mem) != 3 {
		return nil, fmt.Errorf("read memory of pid %d: want VmRSS, VmHWM and RssAnon, got %v", pid, mem)
	}
	return mem, nil
}
