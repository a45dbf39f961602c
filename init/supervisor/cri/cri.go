// Package cri tells whether a container runtime answers on its socket as
// the kubelet needs it to: a CRI Version call
// (runtime.v1.RuntimeService/Version), the first call the kubelet makes and
// one it does not start without. A socket that accepts connections is not
// enough: containerd listens before its CRI plugin is ready and answers
// "server is not initialized yet" until it is.
//
// The call is gRPC over unencrypted HTTP/2 on a unix socket: an empty
// VersionRequest, whose answer counts by its grpc-status alone. It is made
// by a client of the package's own (h2.go) that knows this one unary call and
// nothing more: net/http's HTTP/2 client would make nodeinit's binary half
// again as large, and the kubelet's first call needs none of it.
package cri

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"
)

// versionPath is the CRI's Version method as gRPC names it.
const versionPath = "/runtime.v1.RuntimeService/Version"

// Version calls the CRI's Version method on the unix socket at socket and
// returns nil when the runtime answers with status OK, else why not. Every
// step, the dial included, ends at ctx's deadline or when ctx is canceled.
func Version(ctx context.Context, socket string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return err // "dial unix /run/...: connect: no such file or directory"
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	// A cancel wakes the reads and writes below as a deadline would.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	a, err := call(conn, versionPath)
	if err != nil {
		// conn's deadline is ctx's: it may pass a moment before ctx
		// knows it has.
		if ctx.Err() != nil {
			err = ctx.Err()
		} else if errors.Is(err, os.ErrDeadlineExceeded) {
			err = context.DeadlineExceeded
		}
		return fmt.Errorf("CRI Version call: %w", err)
	}
	if a.status == "" {
		return errors.New("CRI Version call: the answer has no :status: not an HTTP/2 server")
	}
	if a.status != "200" {
		return fmt.Errorf("CRI Version call: HTTP status %s", a.status)
	}
	status, message := a.grpcStatus()
	switch status {
	case "0":
		return nil
	case "":
		return errors.New("CRI Version call: the answer has no grpc-status: not a gRPC server")
	}
	code, _ := strconv.Atoi(status)
	if m, err := url.PathUnescape(message); err == nil {
		message = m
	}
	return fmt.Errorf("CRI Version call: %s: %s", codeName(code), message)
}

// codeName is a gRPC status code's name, as grpc-go writes it.
func codeName(code int) string {
	names := []string{"OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound", "AlreadyExists",
		"PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted", "OutOfRange", "Unimplemented",
		"Internal", "Unavailable", "DataLoss", "Unauthenticated"}
	if code >= 0 && code < len(names) {
		return names[code]
	}
	return "code " + strconv.Itoa(code)
}

// Probe asks a runtime whether it answers, again and again, until it does.
// Its methods are safe to call from the supervisor's loop: none blocks.
type Probe struct {
	// Socket is the runtime's unix socket.
	Socket string
	// Attempt bounds each call (default 2s); First and Max space the
	// calls: First after the first failure, doubling up to Max (defaults
	// 20ms and 500ms).
	Attempt, First, Max time.Duration

	mu     sync.Mutex
	why    string
	cancel context.CancelFunc
}

// Answered begins asking and returns a channel closed once the runtime has
// answered. It asks until then or until Stop.
func (p *Probe) Answered() <-chan struct{} {
	ctx, cancel := context.WithCancel(context.Background())
	p.mu.Lock()
	p.cancel = cancel
	p.mu.Unlock()
	done := make(chan struct{})
	go p.ask(ctx, done)
	return done
}

func (p *Probe) ask(ctx context.Context, done chan struct{}) {
	attempt, delay, most := orDefault(p.Attempt, 2*time.Second), orDefault(p.First, 20*time.Millisecond), orDefault(p.Max, 500*time.Millisecond)
	for {
		actx, cancel := context.WithTimeout(ctx, attempt)
		err := Version(actx, p.Socket)
		cancel()
		if err == nil {
			close(done)
			return
		}
		if ctx.Err() != nil {
			return
		}
		p.mu.Lock()
		p.why = err.Error()
		p.mu.Unlock()
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		delay = min(2*delay, most)
	}
}

// Why is the last reason the runtime did not answer, "" before the first.
func (p *Probe) Why() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.why
}

// Stop ends the asking.
func (p *Probe) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cancel != nil {
		p.cancel()
	}
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
