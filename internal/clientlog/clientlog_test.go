package clientlog

import (
	"testing"
	"time"
)

// window returns the state of msg's interval: whether there is one, its
// count and whether it has a timer.
func (l *Log) window(msg string) (open bool, repeated int, timed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.windows[msg]
	if w == nil {
		return false, 0, false
	}
	return true, w.repeated, w.timer != nil
}

// A lone event sets no timer, so an idle bus is never woken to summarize
// nothing; a repeat does, and its interval ends on time, counted, with the
// next one kept quiet as before.
func TestClientLogArmsATimerOnlyForARepeat(t *testing.T) {
	// Long enough that a loaded machine's late timer still leaves most of
	// the quiet interval to check.
	const interval = 500 * time.Millisecond
	l := New(interval)
	const msg = "Took a shutdown delay inhibitor"
	if !l.first(msg) {
		t.Fatal("the first event was not logged at Info")
	}
	if open, _, timed := l.window(msg); !open || timed {
		t.Fatalf("after a lone event: interval open %v, timer %v; want open, no timer", open, timed)
	}
	time.Sleep(interval + 50*time.Millisecond)
	// Its interval is over without a timer: the next is a first again.
	if !l.first(msg) {
		t.Fatal("an event one interval after a lone one was not logged at Info")
	}
	for range 2 {
		if l.first(msg) {
			t.Fatal("a repeat within the interval was logged at Info")
		}
	}
	if _, n, timed := l.window(msg); n != 2 || !timed {
		t.Fatalf("after two repeats: %d counted, timer %v; want 2 and a timer", n, timed)
	}
	// The timer ends the interval: the count is logged and zeroed, and
	// the next interval stays quiet.
	// The timer fires one interval after the first repeat; on a loaded
	// machine it may fire late, so wait for it, bounded.
	time.Sleep(interval)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, n, _ := l.window(msg); n == 0 {
			break
		}
	}
	if open, n, _ := l.window(msg); !open || n != 0 {
		t.Fatalf("after the repeats' interval: open %v, %d counted; want a quiet interval open, 0 counted", open, n)
	}
	if l.first(msg) {
		t.Fatal("an event in the quiet interval after repeats was logged at Info")
	}
	l.Stop()
	if open, _, _ := l.window(msg); open {
		t.Fatal("an interval is still open after stop")
	}
	if l.first(msg) {
		t.Fatal("an event after stop was logged at Info")
	}
}
