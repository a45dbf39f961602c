//go:build long

// The long runs: the same behaviours as the fast suite's, at the counts that
// catch a rare race, each taking from several seconds to a minute. They
// carry the build tag long, so `go test ./...` and `make test` leave them
// out; `make test-long` runs them (every TestLong of the tree), and CI
// does after `make test`.

package integration

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// A thousand runs in which the executor, the proxy and a hundred orphans
// all end in the same instant: the exit code is never wrong or lost.
func TestLongExitStatusSurvivesSimultaneousDeaths(t *testing.T) {
	exitStatusSurvivesSimultaneousDeaths(t, 1000)
}

// Five runs in each mode of a leftover that ignores TERM and forks all the
// time: none of them holds the shutdown past its bound.
func TestLongAForkingLeftoverCannotHoldTheShutdown(t *testing.T) {
	aForkingLeftoverCannotHoldTheShutdown(t, 5)
}

// 20,000 orphans made as fast as possible while the executor runs: none is
// left as a zombie, and the executor's status still comes through. The fast
// suite's TestReapsTwoThousandOrphans makes 2,000.
func TestLongForkStormLeavesNoZombie(t *testing.T) {
	testenv.RequireRoot(t)
	_, task := binaries(t)
	ready := filepath.Join(t.TempDir(), "ready")
	i := start(t, asPID1, "--run-proxy=false", "--", task, "--orphans=20000", "--ready="+ready, "--exit=4")
	testenv.WaitFor(t, 60*time.Second, "orphans made", func() bool { return exists(ready) })
	testenv.WaitFor(t, 10*time.Second, "no zombie left", func() bool { return len(testenv.Zombies(i.Pid())) == 0 })
	i.Signal(syscall.SIGTERM)
	if got := i.Wait(10 * time.Second); got != 4 {
		t.Fatalf("exit %d, want 4", got)
	}
}
