// Command task is the project's stand-in for an executor or a proxy in
// tests: it reports where it runs, records the signals it gets, makes
// orphans, ignores TERM, and ends with a chosen code or signal.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/init/signals"
	"github.com/nodeinit/nodeinit/internal/procstatus"
	"github.com/nodeinit/nodeinit/test/helpers/ownflags"
)

// recorded is every signal nodeinit may pass on: all it catches but the
// SIGCHLD this helper's own children send it.
func recorded() []os.Signal {
	var out []os.Signal
	for _, sig := range signals.Caught() {
		if sig != unix.SIGCHLD {
			out = append(out, sig)
		}
	}
	return out
}

func main() {
	// Roles reached by re-executing ourselves.
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "orphan-parent": // fork the orphans, then exit so they are re-parented
			orphanParent(os.Args[2])
			return
		case "hold": // fork this many children that wait until killed
			hold(os.Args[2])
			return
		case "grandchild": // ignore TERM and sleep
			signal.Ignore(unix.SIGTERM, unix.SIGINT)
			d, _ := time.ParseDuration(os.Args[2])
			time.Sleep(d)
			return
		}
	}
	report := flag.String("report", "", "write a JSON report of pid, namespaces, cgroup, args and env to this file")
	record := flag.String("record", "", "append a line per signal received to this file")
	ready := flag.String("ready", "", "create this file once signal handlers are installed")
	starts := flag.String("starts", "", "append a line with the start time (unix nanoseconds) to this file")
	exitCode := flag.Int("exit", 0, "exit code when ending")
	lifetime := flag.Duration("lifetime", 0, "end by itself after this long (0: run until TERM or INT)")
	dieBy := flag.String("die-by", "", "end by raising this signal (KILL, SEGV, TERM...) instead of exiting")
	ignoreTerm := flag.Bool("ignore-term", false, "record TERM and INT but keep running")
	orphans := flag.Int("orphans", 0, "make this many orphans that exit at once")
	lines := flag.Int("lines", 0, "write this many numbered lines to stdout at start")
	fill := flag.Int("fill-stdout", 0, "write this many bytes to stdout in the background (blocks there when nobody reads)")
	inhibit := flag.Duration("inhibit", -1, "take a delay lock on shutdown from the system bus, and release it this long after PrepareForShutdown(true)")
	grandchild := flag.Duration("grandchild", 0, "start a TERM-ignoring grandchild in its own session that sleeps this long")
	// nodeinit adds flags of its own to the executor's and the proxy's
	// command lines (--cgroup-root, --v, --proxy-mode, ...).
	ownflags.Parse()

	sigs := make(chan os.Signal, 1024)
	signal.Notify(sigs, recorded()...)
	var rec *os.File
	if *record != "" {
		f, err := os.OpenFile(*record, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		check(err)
		rec = f
	}
	if *starts != "" {
		f, err := os.OpenFile(*starts, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		check(err)
		fmt.Fprintf(f, "%d\n", time.Now().UnixNano())
		check(f.Close())
	}
	if *report != "" {
		writeReport(*report)
	}
	if *inhibit >= 0 {
		inhibitShutdown(rec, *inhibit)
	}
	if *grandchild > 0 {
		cmd := exec.Command("/proc/self/exe", "grandchild", grandchild.String())
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		check(cmd.Start())
		_ = cmd.Process.Release()
	}
	if *orphans > 0 {
		cmd := exec.Command("/proc/self/exe", "orphan-parent", strconv.Itoa(*orphans))
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		check(cmd.Run())
	}
	if *lines > 0 {
		w := bufio.NewWriterSize(os.Stdout, 64<<10)
		for n := 0; n < *lines; n++ {
			fmt.Fprintf(w, "line %08d of the task's output, padded to be a little longer\n", n)
		}
		check(w.Flush())
	}
	if *fill > 0 {
		go func() { _, _ = os.Stdout.Write(make([]byte, *fill)) }()
	}
	if *ready != "" {
		check(os.WriteFile(*ready, nil, 0o644))
	}

	var timeout <-chan time.Time
	if *lifetime > 0 {
		timeout = time.After(*lifetime)
	}
loop:
	for {
		select {
		case s := <-sigs:
			sig := s.(syscall.Signal)
			if rec != nil {
				fmt.Fprintf(rec, "%s %d\n", signals.Name(sig), time.Now().UnixNano())
			}
			if (sig == unix.SIGTERM || sig == unix.SIGINT) && !*ignoreTerm {
				break loop
			}
		case <-timeout:
			break loop
		}
	}
	if *dieBy != "" {
		sig := unix.SignalNum("SIG" + strings.TrimPrefix(*dieBy, "SIG"))
		if sig == 0 {
			check(fmt.Errorf("unknown signal %q", *dieBy))
		}
		restoreDefaultAction(sig)
		_ = unix.Kill(os.Getpid(), sig)
		time.Sleep(time.Minute) // the signal ends us before this does
	}
	os.Exit(*exitCode)
}

// orphanParent forks n children that exit at once, and exits without waiting
// for them: they become orphans of the nearest subreaper, or of PID 1.
func orphanParent(arg string) {
	forkRaw(arg, "orphan", func() { unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0) })
	os.Exit(0)
}

// hold forks n children that pause until a signal ends them, and waits
// for ever itself: processes that are not nodeinit's, for a host that is
// busy. Kill its process group to end them; they also die with it, so that
// a test killed midway leaves none behind.
func hold(arg string) {
	parent := os.Getpid()
	n := forkRaw(arg, "holder", func() {
		unix.RawSyscall(unix.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0)
		if ppid, _, _ := unix.RawSyscall(unix.SYS_GETPPID, 0, 0, 0); int(ppid) != parent {
			unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0) // the parent died before the line above
		}
		for {
			// ppoll with nothing to wait for is pause(2), which arm64,
			// riscv64 and loong64 lack.
			unix.RawSyscall6(unix.SYS_PPOLL, 0, 0, 0, 0, 0, 0)
		}
	})
	fmt.Println("holding", n)
	for {
		time.Sleep(time.Hour)
	}
}

// forkRaw forks arg (a number) children with a raw clone, cheaper than
// fork and exec; each runs child, which must make raw system calls only
// and never return. It returns how many it forked.
func forkRaw(arg, what string, child func()) int {
	n, err := strconv.Atoi(arg)
	check(err)
	for i := 0; i < n; i++ {
		pid, errno := rawFork()
		if errno != 0 {
			check(fmt.Errorf("fork %s %d: %w", what, i, errno))
		}
		if pid == 0 {
			child()
		}
	}
	return n
}

// rawFork is fork(2) as clone(2) with SIGCHLD and no new stack, straight
// from the kernel: the child runs on the parent's stack, so it may only
// make raw system calls. s390x takes clone's first two arguments, the
// flags and the stack, the other way round.
func rawFork() (pid uintptr, errno syscall.Errno) {
	if runtime.GOARCH == "s390x" {
		pid, _, errno = unix.RawSyscall(unix.SYS_CLONE, 0, uintptr(unix.SIGCHLD), 0)
		return pid, errno
	}
	pid, _, errno = unix.RawSyscall(unix.SYS_CLONE, uintptr(unix.SIGCHLD), 0, 0)
	return pid, errno
}

// restoreDefaultAction sets sig's action to SIG_DFL in the kernel. The Go
// runtime keeps its own handler for SEGV, ABRT and the like even after
// signal.Reset, and would exit 2 instead of dying by the signal.
func restoreDefaultAction(sig syscall.Signal) {
	if sig == unix.SIGKILL || sig == unix.SIGSTOP {
		return // their action cannot be changed
	}
	var act [4]uint64 // struct kernel_sigaction: handler (SIG_DFL = 0), flags, restorer, mask
	_, _, errno := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
	if errno != 0 {
		check(fmt.Errorf("rt_sigaction(%v): %w", sig, errno))
	}
}

type reportJSON struct {
	Pid        int      `json:"pid"`
	Ppid       int      `json:"ppid"`
	Pgid       int      `json:"pgid"`
	MountNS    string   `json:"mountns"`
	Cgroup     string   `json:"cgroup"`
	Stdin      string   `json:"stdin"`
	Foreground int      `json:"foreground"`
	Args       []string `json:"args"`
	Env        []string `json:"env"`
	// OOMScoreAdj is the OOM score adjustment it started with.
	OOMScoreAdj int `json:"oomScoreAdj"`
	// THPEnabled is its THP_enabled in /proc/self/status: "1" when
	// transparent huge pages may back its memory, "0" when they are off
	// for it, "" on a kernel that does not show it.
	THPEnabled string `json:"thpEnabled"`
}

func writeReport(path string) {
	pgid, _ := unix.Getpgid(0)
	mnt, _ := os.Readlink("/proc/self/ns/mnt")
	cg, _ := os.ReadFile("/proc/self/cgroup")
	stdin, _ := os.Readlink("/proc/self/fd/0")
	fg, _ := unix.IoctlGetInt(1, unix.TIOCGPGRP)
	adj, err := os.ReadFile("/proc/self/oom_score_adj")
	check(err)
	oom, err := strconv.Atoi(strings.TrimSpace(string(adj)))
	check(err)
	status, err := procstatus.Read("/proc/self/status")
	check(err)
	data, err := json.Marshal(reportJSON{
		Pid: os.Getpid(), Ppid: os.Getppid(), Pgid: pgid, MountNS: mnt,
		Cgroup: string(cg), Stdin: stdin, Foreground: fg, Args: os.Args[1:], Env: os.Environ(),
		OOMScoreAdj: oom, THPEnabled: status["THP_enabled"],
	})
	check(err)
	check(os.WriteFile(path+".tmp", data, 0o644))
	check(os.Rename(path+".tmp", path))
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "task:", err)
		os.Exit(99)
	}
}
