package supervisor

import (
	"testing"
	"time"
)

func TestBackoffDoublesToTheCapAndResetsAfterAHealthyRun(t *testing.T) {
	b := Backoff{Initial: time.Second, Max: 30 * time.Second, Reset: time.Minute}
	short := 10 * time.Millisecond
	steps := []struct {
		ran  time.Duration
		want time.Duration
	}{
		{short, 1 * time.Second},
		{short, 2 * time.Second},
		{short, 4 * time.Second},
		{short, 8 * time.Second},
		{short, 16 * time.Second},
		{short, 30 * time.Second},
		{short, 30 * time.Second},
		{59 * time.Second, 30 * time.Second},
		{time.Minute, 1 * time.Second},
		{short, 2 * time.Second},
		{2 * time.Hour, 1 * time.Second},
	}
	for i, s := range steps {
		if got := b.next(s.ran); got != s.want {
			t.Fatalf("step %d (ran %v): Next = %v, want %v", i, s.ran, got, s.want)
		}
		if b.Current() != s.want {
			t.Fatalf("step %d: Current = %v, want %v", i, b.Current(), s.want)
		}
	}
}
