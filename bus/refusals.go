package bus

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"
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
	socket   string
	wake     chan struct{} // a first refusal to log; never blocks the sender

	mu    sync.Mutex
	total uint64
	kinds map[string]*refusalKind // by message
}

// refusalKind is the interval of one kind of refusal.
type refusalKind struct {
	first   *refusal  // the first refusal, until it is logged
	opened  time.Time // when its first was logged; zero before
	counted int       // refused since, not logged yet
	why     string    // the last one's reason, for the count's line
}

// refusal is one refusal: why, and of whom when peer is set.
type refusal struct {
	why  string
	peer bool
	cred unix.Ucred
}

// kv are the refusal's details for the log.
func (f *refusal) kv(socket string) []any {
	if f.peer {
		return []any{"pid", f.cred.Pid, "uid", f.cred.Uid, "reason", f.why}
	}
	return []any{"socket", socket, "reason", f.why}
}

func newRefusals(interval time.Duration, socket string) *refusals {
	return &refusals{interval: interval, socket: socket, wake: make(chan struct{}, 1), kinds: make(map[string]*refusalKind)}
}

// add counts a refusal of the kind msg, why, of the peer cred (none when
// peer is false). It does not log, never waits for the log, and on the
// accept loops' path (a kind seen before) allocates nothing: what a loop
// allocates is what makes Go's collector stop it.
func (r *refusals) add(msg, why string, peer bool, cred unix.Ucred) {
	r.mu.Lock()
	r.total++
	k := r.kinds[msg]
	if k == nil {
		k = &refusalKind{first: &refusal{why: why, peer: peer, cred: cred}}
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
			lines = append(lines, line{msg, k.first.kv(r.socket)})
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
