package notify

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"k8s.io/klog/v2"
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
	DefaultInterval    = 100 * time.Millisecond
	DefaultMaxInterval = 2 * time.Second
	DefaultTimeout     = time.Second
)

// CheckURL tells whether raw can be a readiness URL: absolute, http or https,
// with a host.
func CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("readiness URL %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("readiness URL %q: the scheme must be http or https", raw)
	}
	if u.Host == "" {
		return fmt.Errorf("readiness URL %q: no host", raw)
	}
	return nil
}

// withDefaults fills the zero fields.
func (p Probe) withDefaults() Probe {
	if p.Interval <= 0 {
		p.Interval = DefaultInterval
	}
	if p.MaxInterval < p.Interval {
		p.MaxInterval = max(DefaultMaxInterval, p.Interval)
	}
	if p.Timeout <= 0 {
		p.Timeout = DefaultTimeout
	}
	return p
}

// nextInterval doubles the wait up to the maximum.
func nextInterval(d, maxInterval time.Duration) time.Duration {
	return min(2*d, maxInterval)
}

// Wait returns nil once p.URL answers 200, or ctx's error when ctx ends
// first, or at once an error for a URL that cannot be asked.
func (p Probe) Wait(ctx context.Context) error {
	if err := CheckURL(p.URL); err != nil {
		return err
	}
	p = p.withDefaults()
	client := &http.Client{
		Timeout: p.Timeout,
		Transport: &http.Transport{
			// A node's health endpoint is asked directly, never through a
			// proxy that the environment may name for the children.
			Proxy: nil,
			// One request per interval: a kept connection would only
			// linger after the node is ready.
			DisableKeepAlives: true,
		},
	}
	defer client.CloseIdleConnections()

	wait := p.Interval
	for attempt := 1; ; attempt++ {
		status, err := get(ctx, client, p.URL)
		if err == nil && status == http.StatusOK {
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

// get asks u once and returns the status code.
func get(ctx context.Context, client *http.Client, u string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	// Read a little of the body so the server is not cut off mid-answer.
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	return resp.StatusCode, nil
}

// ReadyWhenHealthy sends READY=1 once the node is ready: at once when p.URL
// is empty, else when p.URL first answers 200. Call it once the executor has
// started; it returns at once (the sending and the probe run in one
// goroutine), so the supervisor's loop can call it. Cancelling ctx when
// shutdown begins ends the probe and keeps READY=1 from following
// STOPPING=1. Without NOTIFY_SOCKET nothing is probed or sent. The returned
// channel is closed when nothing more will be sent.
func ReadyWhenHealthy(ctx context.Context, p Probe) <-chan struct{} {
	done := make(chan struct{})
	if !Enabled() {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		var err error
		if p.URL != "" {
			err = p.Wait(ctx)
		}
		switch {
		case ctx.Err() != nil:
			// Shutdown began: READY=1 would now contradict STOPPING=1.
			klog.V(1).InfoS("Readiness probe ended by shutdown", "url", p.URL)
		case err != nil:
			klog.ErrorS(err, "Readiness is never sent to the service manager")
		default:
			Ready()
		}
	}()
	return done
}
