// Package testenv gives the project's tests what they share: building the
// real binaries once per test process; requiring root or a tool in a way
// that skips on a developer's machine that lacks it but fails under CI=true,
// where every prerequisite must be present; and reading what a run leaves
// behind: zombies in /proc, the task helper's files, the end of a log.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// InCI reports whether the tests run in CI, where nothing may be skipped for
// a missing prerequisite.
func InCI() bool { return os.Getenv("CI") == "true" }

// Require skips the test when ok is false, naming what is missing, or fails it
// under CI=true.
func Require(tb testing.TB, ok bool, what string) {
	tb.Helper()
	if ok {
		return
	}
	if InCI() {
		tb.Fatalf("prerequisite missing in CI: %s", what)
	}
	tb.Skipf("skipped: %s", what)
}

// RequireRoot requires an effective uid of 0.
func RequireRoot(tb testing.TB) {
	tb.Helper()
	Require(tb, os.Geteuid() == 0, "needs root")
}

// RequireTool requires an executable in PATH and returns its path.
func RequireTool(tb testing.TB, name string) string {
	tb.Helper()
	p, err := exec.LookPath(name)
	Require(tb, err == nil, fmt.Sprintf("needs %s in PATH", name))
	return p
}

var (
	buildMu  sync.Mutex
	buildDir string
	built    = map[string]string{}
)

// ModuleRoot returns the directory that holds go.mod.
func ModuleRoot(tb testing.TB) string {
	tb.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		tb.Fatalf("go env GOMOD: %v", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		tb.Fatal("not inside the nodeinit module")
	}
	return filepath.Dir(mod)
}

// Build compiles the main package pkg (a path relative to the module root,
// such as "./cmd/nodeinit") once per test process, statically, and returns
// the path of the binary. It builds with -trimpath, as make build does: the
// same source makes the same bytes in any checkout, so a cache keyed on a
// binary (the e2e suite's images) is shared by every clone. Binaries live
// in a temporary directory that Cleanup removes; call it from TestMain.
func Build(tb testing.TB, pkg string) string {
	tb.Helper()
	return build(tb, pkg, false)
}

// BuildRaced is Build with the race detector compiled in when the tests run
// with NODEINIT_RACE=1 (make test-race), so that the binary under test is
// checked too, not only the test process. Such a binary needs cgo and is not
// static: use Build for anything copied into an image.
func BuildRaced(tb testing.TB, pkg string) string {
	tb.Helper()
	return build(tb, pkg, os.Getenv("NODEINIT_RACE") == "1")
}

func build(tb testing.TB, pkg string, race bool) string {
	tb.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	key := fmt.Sprintf("%s race=%v", pkg, race)
	if p, ok := built[key]; ok {
		return p
	}
	if buildDir == "" {
		d, err := os.MkdirTemp("", "nodeinit-test-bin-")
		if err != nil {
			tb.Fatal(err)
		}
		buildDir = d
	}
	out := filepath.Join(buildDir, filepath.Base(pkg))
	args := []string{"build", "-trimpath"}
	env := append(os.Environ(), "CGO_ENABLED=0")
	if race {
		out += "-race"
		args = append(args, "-race")
		env = append(os.Environ(), "CGO_ENABLED=1")
	}
	cmd := exec.Command("go", append(args, "-o", out, pkg)...)
	cmd.Dir = ModuleRoot(tb)
	cmd.Env = env
	if msg, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build %s: %v\n%s", pkg, err, msg)
	}
	built[key] = out
	return out
}

// Cleanup removes the binaries that Build made.
func Cleanup() {
	buildMu.Lock()
	defer buildMu.Unlock()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}

// Main runs a package's tests and then removes what Build left behind; a
// test package's TestMain is this call.
func Main(m *testing.M) {
	code := m.Run()
	Cleanup()
	os.Exit(code)
}
