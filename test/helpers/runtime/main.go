// Command runtime is the project's stand-in for a container runtime in
// tests: it serves the CRI's Version call on a unix socket (after a delay,
// and answering "not initialized" for a while, as containerd does while its
// CRI plugin starts), forks "shims" that leave it for nodeinit as
// containerd's do, and records what happens to it and its shims.
//
// Each line of --record is "<event> <unix nanoseconds> <pid>", the pid as
// the runtime's own pid namespace numbers it: start, listen, answered (the
// first OK answer), TERM; shim-start, shim-TERM for each shim.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "shim-parent": // start the shim and leave it: it is reparented
			cmd := exec.Command("/proc/self/exe", append([]string{"shim"}, os.Args[2:]...)...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			check(cmd.Start())
			return
		case "shim": // RECORD IGNORE-TERM
			shim(os.Args[2], os.Args[3] == "true")
			return
		}
	}
	socket := flag.String("socket", "", "serve the CRI's Version call on this unix socket")
	listenAfter := flag.Duration("listen-after", 0, "listen only this long after starting")
	readyAfter := flag.Duration("ready-after", 0, "answer \"server is not initialized yet\" until this long after starting")
	shims := flag.Int("shims", 0, "start this many shims that leave the runtime (reparented to nodeinit)")
	shimIgnoreTerm := flag.Bool("shim-ignore-term", false, "the shims record TERM but keep running")
	record := flag.String("record", "", "append a line per event to this file")
	flag.Parse()

	started := time.Now()
	// TERM is caught before the start is recorded: a test that has seen
	// the start may stop it.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	rec := recorder(*record)
	rec("start")

	for range *shims {
		check(exec.Command("/proc/self/exe", "shim-parent", *record, strconv.FormatBool(*shimIgnoreTerm)).Run())
	}

	listen := time.After(*listenAfter)
	for {
		select {
		case <-sigs:
			rec("TERM")
			_ = os.Remove(*socket)
			os.Exit(0)
		case <-listen:
			listen = nil
			serve(*socket, started.Add(*readyAfter), rec)
			rec("listen")
		}
	}
}

// serve answers Version on socket: "not initialized" before ready, OK after.
func serve(socket string, ready time.Time, rec func(string)) {
	_ = os.Remove(socket) // a socket left by the runtime that died
	l, err := net.Listen("unix", socket)
	check(err)
	var once sync.Once
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: protocols, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		if r.URL.Path != "/runtime.v1.RuntimeService/Version" {
			w.Header().Set("Grpc-Status", "12")
			w.WriteHeader(http.StatusOK)
			return
		}
		if time.Now().Before(ready) {
			w.Header().Set("Grpc-Status", "2")
			w.Header().Set("Grpc-Message", "server is not initialized yet")
			w.WriteHeader(http.StatusOK)
			return
		}
		once.Do(func() { rec("answered") })
		w.Header().Set("Trailer", "Grpc-Status")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte{0, 0, 0, 0, 0})
		w.Header().Set("Grpc-Status", "0")
	})}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			check(err)
		}
	}()
}

// shim records its start and its TERM, and ends on TERM unless told not to.
func shim(record string, ignoreTerm bool) {
	rec := recorder(record)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	rec("shim-start")
	for range sigs {
		rec("shim-TERM")
		if !ignoreTerm {
			return
		}
	}
}

// recorder appends "<event> <unix ns> <pid>" lines to path, one write each.
func recorder(path string) func(string) {
	if path == "" {
		return func(string) {}
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	check(err)
	return func(event string) {
		_, err := fmt.Fprintf(f, "%s %d %d\n", event, time.Now().UnixNano(), os.Getpid())
		check(err)
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "runtime:", err)
		os.Exit(3)
	}
}
