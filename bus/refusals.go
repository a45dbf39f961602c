package bus

import (
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// refusals counts the connections the bus refuses and logs them, off the
// accept loops: a loop only counts (a lock and an increment), and a
// goroutine of its own logs. Of each kind of refusal (its message), the
// first is logged at Info at once, with who and why; the rest are counted,
// and one line at Info says how many every interval for as long as they
// go on. Never one line per refusal, at any verbosity: a process that
// connects in a loop is refused tens of thousands of times a second, and a
// line each would cost PID 1 more than the refusals do, and a log write
// that waits (a full pipe on stdout) would stop the accept loop that made
// it.
type refusals struct {
	interval time.Duration
	wake     chan struct{} // a first refusal to log; never blocks the sender

	mu    sync.Mutex
	total uint64
	kinds map[string]*refusalKind // by message
}

// refusalKind is the interval of one kind of refusal.
type refusalKind struct {
	first   []any     // the first refusal's details, until it is logged
	opened  time.Time // when its first was logged; zero before
	counted int       // refused since, not logged yet
	why     string    // the last one's reason, for the count's line
}

func newRefusals(interval time.Duration) *refusals {
	return &refusals{interval: interval, wake: make(chan struct{}, 1), kinds: make(map[string]*refusalKind)}
}

// add counts a refusal of the kind msg; kv say who and why (pid, uid,
// "reason", why). It does not log, and never waits for the log.
func (r *refusals) add(msg, why string, kv ...any) {
	r.mu.Lock()
	r.total++
	k := r.kinds[msg]
	if k == nil {
		k = &refusalKind{first: append(kv, "reason", why)}
		r.kinds[msg] = k
		r.mu.Unlock()
		select {
		case r.wake <- struct{}{}:
		default:
		}
		return
	}
	k.counted++
	k.why = why
	r.mu.Unlock()
}

// Total is the count of every refusal so far.
func (r *refusals) Total() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

// report logs the refusals until done is closed, then what is left.
func (r *refusals) report(done <-chan struct{}) {
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		closing := false
		select {
		case <-r.wake:
		case <-t.C:
		case <-done:
			closing = true
		}
		next := r.flush(time.Now(), closing)
		if closing {
			return
		}
		if next > 0 {
			t.Reset(next)
		}
	}
}

// flush logs the first refusals not logged yet and the counts of the
// intervals that are over (all of them when closing), and says how long
// until the next interval ends (0: none open).
func (r *refusals) flush(now time.Time, closing bool) time.Duration {
	type line struct {
		msg string
		kv  []any
	}
	var lines []line
	var next time.Duration
	r.mu.Lock()
	for msg, k := range r.kinds {
		if k.first != nil {
			lines = append(lines, line{msg, k.first})
			k.first, k.opened = nil, now
		}
		if left := k.opened.Add(r.interval).Sub(now); left > 0 && !closing {
			if next == 0 || left < next {
				next = left
			}
			continue
		}
		if k.counted == 0 {
			// A quiet interval ends the kind: its next refusal is a
			// first again.
			delete(r.kinds, msg)
			continue
		}
		lines = append(lines, line{msg, []any{"repeated", k.counted, "within", r.interval, "lastReason", k.why}})
		k.counted, k.opened = 0, now
		if next == 0 || r.interval < next {
			next = r.interval
		}
	}
	r.mu.Unlock()
	for _, l := range lines {
		klog.InfoS(l.msg, l.kv...)
	}
	return next
}
