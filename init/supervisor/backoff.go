package supervisor

import "time"

// Backoff spaces out the restarts of a respawned task so that a crash loop
// is never a fork storm: the delay starts at Initial, doubles after each run
// shorter than Reset, and never exceeds Max. A run that lasted Reset or
// longer counts as healthy and starts the sequence over.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
	Reset   time.Duration

	current time.Duration
}

// next returns the delay before the next start, given how long the run that
// just ended lasted.
func (b *Backoff) next(ran time.Duration) time.Duration {
	if b.current == 0 || ran >= b.Reset {
		b.current = b.Initial
	} else {
		b.current = min(2*b.current, b.Max)
	}
	return b.current
}

// Current is the delay last returned by Next, or zero before the first.
func (b *Backoff) Current() time.Duration { return b.current }
