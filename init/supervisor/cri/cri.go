// Package cri tells whether a container runtime answers on its socket as
// the kubelet needs it to: a CRI Version call
// (runtime.v1.RuntimeService/Version), the first call the kubelet makes and
// one it does not start without. A socket that accepts connections is not
// enough: containerd listens before its CRI plugin is ready and answers
// "server is not initialized yet" until it is.
//
// The call is gRPC over unencrypted HTTP/2 on a unix socket, made with the
// standard library's HTTP/2 client: an empty VersionRequest, whose answer
// counts by its grpc-status alone.
package cri

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// versionPath is the CRI's Version method as gRPC names it.
const versionPath = "/runtime.v1.RuntimeService/Version"

// emptyMessage is a gRPC message frame holding an empty protobuf message:
// uncompressed (0), length 0.
var emptyMessage = []byte{0, 0, 0, 0, 0}

// Version calls the CRI's Version method on the unix socket at socket and
// returns nil when the runtime answers with status OK, else why not.
func Version(ctx context.Context, socket string) error {
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{
		Protocols: protocols,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://localhost"+versionPath, bytes.NewReader(emptyMessage))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return op // "dial unix /run/...: connect: no such file or directory"
		}
		return fmt.Errorf("CRI Version call: %w", err)
	}
	defer resp.Body.Close()
	// The answer's message is of no interest; its trailers come after it.
	// A runtime sends a few dozen bytes: more is not a runtime.
	if _, err := io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16)); err != nil {
		return fmt.Errorf("CRI Version call: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("CRI Version call: HTTP status %d", resp.StatusCode)
	}
	status, message := grpcStatus(resp)
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

// grpcStatus is the answer's grpc-status and grpc-message: in its trailers,
// or in its headers for a trailers-only answer (an error without a body).
func grpcStatus(resp *http.Response) (status, message string) {
	if s := resp.Trailer.Get("Grpc-Status"); s != "" {
		return s, resp.Trailer.Get("Grpc-Message")
	}
	return resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message")
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
