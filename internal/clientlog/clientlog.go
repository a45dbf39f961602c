// Package clientlog bounds what a local client can make nodeinit log or
// send back (docs/design.md, rule 10): in size, every string a client
// chose clipped before it goes into a log line or an error reply (Clip);
// in rate, each kind of event logged at Info once per interval and
// counted after (Log). The bus, its services and its pass-through log
// what their clients cause through it.
package clientlog

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

const (
	// MaxClip bounds one client-chosen string in a log line or a reply.
	MaxClip = 128
	// MaxErrorText bounds the text of an error reply, which may quote
	// several.
	MaxErrorText = 512
)

// Clip returns at most MaxClip bytes of s, as valid UTF-8, saying how long
// s was when it cuts.
func Clip(s string) string { return ClipTo(s, MaxClip) }

// ClipTo is Clip to at most n bytes.
func ClipTo(s string, n int) string {
	if len(s) <= n {
		return strings.ToValidUTF8(s, "\uFFFD")
	}
	return strings.ToValidUTF8(s[:n], "\uFFFD") + fmt.Sprintf("...(%d bytes)", len(s))
}

// Log bounds in rate what clients can make nodeinit log. Of each kind
// of event (its message), the first is logged at Info; the ones that follow
// within interval only at V(2), and one line at Info says how many there
// were, at most once per interval, for as long as they go on. So a client
// that connects, fails or drops in a loop costs the log a line per kind and
// interval, whatever its rate, and the operator still sees that it happens.
//
// A lone event arms no timer: only a repeat does, to end its interval. The
// kubelet's own connection and lock are such lone events, and an idle node
// is then never woken to summarize nothing.
type Log struct {
	interval time.Duration

	mu      sync.Mutex
	stopped bool
	windows map[string]*logWindow // by message; the messages are this package's constants
}

// logWindow is an interval in which one kind of event was logged once.
type logWindow struct {
	opened   time.Time
	repeated int
	timer    *time.Timer // nil until the first repeat
}

func New(interval time.Duration) *Log {
	return &Log{interval: interval, windows: make(map[string]*logWindow)}
}

// first reports whether msg is the first of its kind in its interval, and
// opens an interval when it is.
func (l *Log) first(msg string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		// After Stop, a bus that is closing: its last events go to V(2).
		return false
	}
	now := time.Now()
	if w := l.windows[msg]; w != nil && (w.timer != nil || now.Sub(w.opened) < l.interval) {
		w.repeated++
		if w.timer == nil {
			w.timer = time.AfterFunc(w.opened.Add(l.interval).Sub(now), func() { l.summarize(msg, w) })
		}
		return false
	}
	l.windows[msg] = &logWindow{opened: now}
	return true
}

// Info logs an event a client caused: at Info if it is the first of its
// kind in the interval, else at V(2).
func (l *Log) Info(msg string, kv ...any) {
	if l.first(msg) {
		klog.InfoSDepth(1, msg, kv...)
		return
	}
	klog.V(2).InfoSDepth(1, msg, kv...)
}

// Error is Info for an event with an error.
func (l *Log) Error(err error, msg string, kv ...any) {
	if l.first(msg) {
		klog.ErrorSDepth(1, err, msg, kv...)
		return
	}
	klog.V(2).InfoSDepth(1, msg, append(kv, "err", err)...)
}

// summarize ends w's interval: it logs how many events of its kind were
// not logged at Info, and if there were any, keeps the next interval quiet
// too.
func (l *Log) summarize(msg string, w *logWindow) {
	l.mu.Lock()
	n := w.repeated
	w.repeated = 0
	if n == 0 || l.stopped {
		delete(l.windows, msg)
	} else {
		w.opened = time.Now()
		w.timer.Reset(l.interval)
	}
	l.mu.Unlock()
	if n > 0 {
		klog.InfoS(msg, "repeated", n, "within", l.interval)
	}
}

// Stop logs what the open intervals counted, and ends them.
func (l *Log) Stop() {
	l.mu.Lock()
	l.stopped = true
	open := make(map[string]*logWindow, len(l.windows))
	for msg, w := range l.windows {
		switch {
		case w.timer == nil:
			delete(l.windows, msg) // nothing repeated
		case w.timer.Stop():
			open[msg] = w
		}
		// Else its timer has fired: summarize, running, ends it.
	}
	l.mu.Unlock()
	for msg, w := range open {
		l.summarize(msg, w)
	}
}
