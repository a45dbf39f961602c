// Package integration runs the built nodeinit binary for real — as PID 1 of
// a new pid namespace and as a child subreaper — with the project's task
// helper as executor and proxy, and checks what a node operator would see:
// exit codes, signals delivered, zombies reaped, processes ended.
package integration

import (
	"os"
	"testing"

	"github.com/nodeinit/nodeinit/test/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// mode is how nodeinit runs: as PID 1 of a new pid namespace, or as an
// ordinary child that registers as subreaper.
type mode string

const (
	asPID1      mode = "pid1"
	asSubreaper mode = "subreaper"
)

var modes = []mode{asPID1, asSubreaper}

// forEachMode runs a subtest in each mode. PID 1 needs root.
func forEachMode(t *testing.T, f func(t *testing.T, m mode)) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			if m == asPID1 {
				testenv.RequireRoot(t)
			}
			f(t, m)
		})
	}
}

// binaries builds nodeinit and the task helper.
func binaries(t *testing.T) (nodeinit, task string) {
	t.Helper()
	return testenv.BuildRaced(t, "./cmd/nodeinit"), testenv.Build(t, "./test/helpers/task")
}

// start runs nodeinit with args in the given mode.
func start(t *testing.T, m mode, args ...string) *testenv.Node {
	t.Helper()
	return testenv.Launch(t, testenv.Options{PID1: m == asPID1}, args...)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
