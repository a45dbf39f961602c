package notify

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/internal/linux"
)

// Probe asks an HTTP endpoint (the kubelet's healthz) whether the node is
// ready.
//
// HTTP has no way to be told when an endpoint starts to answer, so the probe
// asks again and again: this is the one retry loop of nodeinit, and it is
// kept small. It runs in one goroutine, asks at most once per interval (which
// doubles from Interval to MaxInterval), bounds every request with Timeout,
// and ends for good on the first 200 or when its context is cancelled at
// shutdown. It has no limit of its own on the number of attempts: how long a
// node may take to become ready is the manager's to decide (systemd's
// TimeoutStartSec, podman's health settings).
type Probe struct {
	// URL is asked with GET; only 200 means ready.
	URL string
	// Interval is the wait after the first failure (default 100ms).
	Interval time.Duration
	// MaxInterval caps the doubling waits (default 2s).
	MaxInterval time.Duration
	// Timeout bounds each request, connection included (default 1s).
	Timeout time.Duration
}

// Defaults of a Probe.
const (
	defaultInterval    = 100 * time.Millisecond
	defaultMaxInterval = 2 * time.Second
	defaultTimeout     = time.Second
)

// withDefaults fills the zero fields.
func (p Probe) withDefaults() Probe {
	if p.Interval <= 0 {
		p.Interval = defaultInterval
	}
	if p.MaxInterval < p.Interval {
		p.MaxInterval = max(defaultMaxInterval, p.Interval)
	}
	if p.Timeout <= 0 {
		p.Timeout = defaultTimeout
	}
	return p
}

// nextInterval doubles the wait up to the maximum.
func nextInterval(d, maxInterval time.Duration) time.Duration {
	return min(2*d, maxInterval)
}

// Wait returns nil once p.URL answers 200, or ctx's error when ctx ends
// first, or at once an error for a URL that cannot be parsed. The URL's
// form (http, a host) is the config package's to check.
func (p Probe) Wait(ctx context.Context) error {
	u, err := url.Parse(p.URL)
	if err != nil {
		return fmt.Errorf("readiness URL %q: %w", p.URL, err)
	}
	p = p.withDefaults()
	wait := p.Interval
	for attempt := 1; ; attempt++ {
		status, err := get(ctx, u, p.Timeout)
		if err == nil && status == 200 {
			klog.InfoS("Readiness URL answered 200", "url", p.URL, "attempts", attempt)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		klog.V(2).InfoS("Readiness URL not ready yet", "url", p.URL, "status", status, "err", err, "retryIn", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = nextInterval(wait, p.MaxInterval)
	}
}

// get asks u once with a plain HTTP/1.1 GET and returns the status code.
// A health endpoint needs no more of HTTP than the status line; asking it
// over a bare connection keeps net/http and crypto/tls — several MiB — out
// of a binary that runs on every node. The connection is direct (never
// through a proxy named in the environment) and closed after one answer.
func get(ctx context.Context, u *url.URL, timeout time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	if err := conn.SetDeadline(deadline); err != nil {
		return 0, err
	}
	req := "GET " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host + "\r\nUser-Agent: nodeinit\r\nConnection: close\r\n\r\n"
	if err := sendNoSignal(conn, []byte(req)); err != nil {
		return 0, err
	}
	line, err := bufio.NewReaderSize(conn, 512).ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("reading the status line: %w", err)
	}
	return statusCode(line)
}

// statusCode parses an HTTP/1.x status line: "HTTP/1.1 200 OK".
func statusCode(line string) (int, error) {
	proto, rest, _ := strings.Cut(strings.TrimRight(line, "\r\n"), " ")
	code, _, _ := strings.Cut(rest, " ")
	n, err := strconv.Atoi(code)
	if !strings.HasPrefix(proto, "HTTP/1.") || err != nil || len(code) != 3 {
		return 0, fmt.Errorf("not an HTTP/1.x status line: %q", line)
	}
	return n, nil
}

// sendNoSignal writes p to a connected socket with MSG_NOSIGNAL: a peer
// that has gone makes the write fail with EPIPE without raising SIGPIPE in
// nodeinit, which would pass it on to the executor.
func sendNoSignal(conn net.Conn, p []byte) error {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return fmt.Errorf("%T has no file descriptor", conn)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	return linux.SendAll(raw, p, nil)
}
