package oomscore

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// adjFile is a file that stands in for /proc/self/oom_score_adj, at v.
func adjFile(t *testing.T, v string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "oom_score_adj")
	if err := os.WriteFile(path, []byte(v+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func readAdj(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// A lowered process forks at its start value, every time, and is at Min
// again once the child has started.
func TestForkHappensAtTheStartValueAndMinComesBack(t *testing.T) {
	path := adjFile(t, "500")
	s, err := lower(path)
	if err != nil || !s.Lowered || s.Start != 500 {
		t.Fatalf("lower = %+v, %v; want lowered from 500", s, err)
	}
	if got := readAdj(t, path); got != "-1000" {
		t.Fatalf("after lower the process is at %s, want -1000", got)
	}
	for range 2 {
		var atFork string
		if err := s.Fork(func() { atFork = readAdj(t, path) }); err != nil {
			t.Fatal(err)
		}
		if after := readAdj(t, path); atFork != "500" || after != "-1000" {
			t.Errorf("forked at %s and %s after; want 500 at the fork and -1000 after", atFork, after)
		}
	}
}

// A process that starts at Min has nothing to lend: it forks as it is.
func TestAProcessAtMinForksAsItIs(t *testing.T) {
	path := adjFile(t, "-1000")
	s, err := lower(path)
	if err != nil || s.Lowered {
		t.Fatalf("lower = %+v, %v; want nothing lowered", s, err)
	}
	forked := false
	if err := s.Fork(func() { forked = true }); err != nil || !forked || readAdj(t, path) != "-1000" {
		t.Errorf("Fork = %v, forked %v, at %s; want a plain fork at -1000", err, forked, readAdj(t, path))
	}
	var none *Score // Lower failed: no Score
	if err := none.Fork(func() { forked = false }); err != nil || forked {
		t.Errorf("a nil Score's Fork = %v and did not fork", err)
	}
}
