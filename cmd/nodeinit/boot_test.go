package main

import (
	"slices"
	"testing"
)

// The start's order is a contract (see phases): each pair is a phase that
// must come before another, with the reason it must.
func TestPhasesKeepTheirOrder(t *testing.T) {
	names := make([]string, len(phases))
	for i, p := range phases {
		names[i] = p.name
	}
	if names[0] != "mount namespace" {
		t.Errorf("the first phase is %q; want the mount namespace's re-exec, which nothing started before survives", names[0])
	}
	for _, tc := range []struct{ before, after, why string }{
		{"log", "identity", "every later phase logs through the queue"},
		{"log", "oom score", "where nodeinit may not lower its OOM score, a line says so"},
		{"oom score", "tasks", "the tasks hand each child the OOM score nodeinit started with"},
		{"huge pages", "tasks", "the tasks hand each child the kernel's huge-page setting, not nodeinit's"},
		{"identity", "rshared", "the node's id is mounted where it cannot propagate"},
		{"container", "cgroup", "a read-only cgroupfs is remounted before the join"},
		{"cgroup", "sizing", "the node is sized to the cgroup it joined"},
		{"sizing", "tasks", "the kubelet's flags carry the sizing"},
		{"tasks", "notify", "the notifier hooks into the executor's start"},
		{"notify", "graceful shutdown", "the bus admits the executor before the notifier is told"},
		{"notify", "binary pages", "the executor's start hook that notify sets is chained, not replaced"},
	} {
		b, a := slices.Index(names, tc.before), slices.Index(names, tc.after)
		if b < 0 || a < 0 {
			t.Errorf("no phase %q or %q in %q", tc.before, tc.after, names)
			continue
		}
		if b > a {
			t.Errorf("phase %q runs after %q; want it before: %s", tc.before, tc.after, tc.why)
		}
	}
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			t.Errorf("phase %q twice", n)
		}
		seen[n] = true
	}
}
