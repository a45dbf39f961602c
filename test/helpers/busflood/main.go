// Command busflood plays the two sides of a connect flood on nodeinit's
// bus in tests: the executor's caller, which makes calls on the bus each
// on a connection of its own as busctl does, and a process outside the
// executor's tree that connects to the bus's socket and closes at once, in
// a loop, from several threads.
//
//	busflood call --report=FILE [--calls=10] [--timeout=5s] [--every=0s] [--wait]
//	busflood flood --socket=PATH [--threads=4] [--for=8s] [--nonblock]
//
// call, with --wait, waits for SIGUSR2 before its first call (the test
// sends it once the flood runs); it writes one line per call to the
// report, "ok" or "error: ...", then "done", and exits 0 on TERM. flood prints
// "flooding" when its threads have started and, at the end, the connects
// that succeeded and those that failed.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/test/helpers/ownflags"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: busflood call|flood [flags]")
		os.Exit(2)
	}
	role := os.Args[1]
	os.Args = append(os.Args[:1], os.Args[2:]...)
	switch role {
	case "call":
		os.Exit(call())
	case "flood":
		os.Exit(flood())
	}
	fmt.Fprintln(os.Stderr, "busflood: no role", role)
	os.Exit(2)
}

// call is busctl's get-property of logind's InhibitDelayMaxUSec, calls
// times, each on a new connection (connect, authenticate, Hello, Get) that
// must be done within timeout.
func call() int {
	report := flag.String("report", "", "the file to write one line per call to")
	calls := flag.Int("calls", 10, "how many calls")
	timeout := flag.Duration("timeout", 5*time.Second, "the most each call may take, connection included")
	wait := flag.Bool("wait", false, "wait for SIGUSR2 before the first call")
	every := flag.Duration("every", 0, "start a call at most this often")
	// nodeinit adds flags of its own to the executor's command line.
	ownflags.Parse()
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	var start chan os.Signal
	if *wait {
		start = make(chan os.Signal, 1)
		signal.Notify(start, syscall.SIGUSR2)
	}
	out, err := os.Create(*report + ".tmp")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Fprintln(out, "ready")
	out.Sync()
	if start != nil {
		<-start
	}
	for n := range *calls {
		if n > 0 {
			time.Sleep(*every)
		}
		if err := getProperty(*timeout); err != nil {
			fmt.Fprintln(out, "error:", err)
		} else {
			fmt.Fprintln(out, "ok")
		}
	}
	fmt.Fprintln(out, "done")
	if err := out.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The report appears whole, at once.
	if err := os.Rename(*report+".tmp", *report); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// As the kubelet, it runs on until TERM: the node's shutdown would
	// end the flood before the test has counted it.
	<-term
	return 0
}

func getProperty(timeout time.Duration) error {
	type result struct {
		v   dbus.Variant
		err error
	}
	done := make(chan result, 1)
	var conn *dbus.Conn
	var mu sync.Mutex
	go func() {
		// The system bus's address from DBUS_SYSTEM_BUS_ADDRESS, a
		// private connection: busctl's new connection per call.
		c, err := dbus.SystemBusPrivate()
		if err == nil {
			mu.Lock()
			conn = c
			mu.Unlock()
			if err = c.Auth(nil); err == nil {
				err = c.Hello()
			}
		}
		if err != nil {
			done <- result{err: fmt.Errorf("connect: %w", err)}
			return
		}
		v, err := c.Object("org.freedesktop.login1", "/org/freedesktop/login1").
			GetProperty("org.freedesktop.login1.Manager.InhibitDelayMaxUSec")
		done <- result{v, err}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	var r result
	select {
	case r = <-done:
	case <-t.C:
		r.err = fmt.Errorf("no answer within %v", timeout)
	}
	mu.Lock()
	if conn != nil {
		conn.Close()
	}
	mu.Unlock()
	if r.err != nil {
		return r.err
	}
	if _, ok := r.v.Value().(uint64); !ok {
		return fmt.Errorf("InhibitDelayMaxUSec is %s, not a uint64", r.v.Signature())
	}
	return nil
}

// flood connects to socket and closes at once, in a loop on each of
// threads threads, for the given time, with raw system calls: the fastest
// a process can fill the socket's backlog.
func flood() int {
	socket := flag.String("socket", "", "the bus's socket")
	threads := flag.Int("threads", 4, "how many threads connect at once")
	length := flag.Duration("for", 8*time.Second, "how long")
	nonblock := flag.Bool("nonblock", false, "connect without waiting (EAGAIN on a full backlog, as Go's and sd-bus's dial), not in the kernel's wait for room")
	flag.Parse()
	kind := unix.SOCK_STREAM | unix.SOCK_CLOEXEC
	if *nonblock {
		kind |= unix.SOCK_NONBLOCK
	}
	sa := &unix.SockaddrUnix{Name: *socket}
	var connects, failed atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range *threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				fd, err := unix.Socket(unix.AF_UNIX, kind, 0)
				if err != nil {
					failed.Add(1)
					continue
				}
				if unix.Connect(fd, sa) == nil {
					connects.Add(1)
				} else {
					failed.Add(1)
				}
				unix.Close(fd)
			}
		}()
	}
	fmt.Println("flooding")
	start := time.Now()
	time.Sleep(*length)
	stop.Store(true)
	wg.Wait()
	s := time.Since(start).Seconds()
	fmt.Printf("connects=%d (%.0f/s) failed=%d (%.0f/s)\n", connects.Load(), float64(connects.Load())/s, failed.Load(), float64(failed.Load())/s)
	return 0
}
