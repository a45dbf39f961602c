//go:build long

package arch_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// crossBuild compiles nodeinit for GOARCH arch (and GOARM goarm) into dir.
func crossBuild(t *testing.T, dir, arch, goarm string) string {
	t.Helper()
	out := filepath.Join(dir, "nodeinit-"+arch+goarm)
	cmd := exec.Command("go", "build", "-o", out, "./cmd/nodeinit")
	cmd.Dir = testenv.ModuleRoot(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOARM="+goarm)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("GOARCH=%s GOARM=%s go build ./cmd/nodeinit: %v\n%s", arch, goarm, err, msg)
	}
	return out
}

// A 32-bit int cannot hold 8Ei in MiB: there the largest log size is 1Pi.
// Both 32-bit builds compile; the arm/v7 one runs under Debian's
// qemu-arm-static (no binfmt_misc entry needed), the 386 one on the
// amd64 kernel itself where the kernel runs 32-bit x86 programs
// (CONFIG_IA32_EMULATION; not every cloud kernel does). qemu-i386 is no
// stand-in for the latter: Go's 386 threads crash under it.
func TestThirtyTwoBitBuildsHoldTheLargestLogSize(t *testing.T) {
	dir := t.TempDir()
	arm := crossBuild(t, dir, "arm", "7")
	qemu, err := exec.LookPath("qemu-arm-static")
	testenv.Require(t, err == nil, "runs the arm/v7 build under qemu-arm-static (qemu-user-static)")
	checkLargestLogSize(t, "linux/arm", qemu, arm)
	if runtime.GOARCH != "amd64" {
		return
	}
	i386 := crossBuild(t, dir, "386", "")
	if err := exec.Command(i386, "--version").Run(); errors.Is(err, syscall.ENOEXEC) {
		t.Logf("this kernel runs no 32-bit x86 program (exec format error): the 386 build compiled, the arm/v7 run is the 32-bit check")
		return
	}
	checkLargestLogSize(t, "linux/386", i386)
}

// checkLargestLogSize runs nodeinit (the command cmd) with log sizes at
// and past a 32-bit build's largest, and its --version.
func checkLargestLogSize(t *testing.T, platform string, cmd ...string) {
	t.Helper()
	run := func(args ...string) *exec.Cmd {
		return exec.Command(cmd[0], append(slices.Clone(cmd[1:]), args...)...)
	}
	for _, c := range []struct {
		size    string
		code    int
		message string
	}{
		{"1Pi", 0, "nodeinit "},
		{"2Pi", 2, "must be at most 1Pi"},
		{"8Ei", 2, "must be at most 1Pi"},
	} {
		out, err := run("--max-log-size="+c.size, "--version").CombinedOutput()
		code := 0
		if e, ok := err.(*exec.ExitError); ok {
			code = e.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != c.code || !strings.Contains(string(out), c.message) {
			t.Errorf("%s nodeinit --max-log-size=%s: exit %d, %q; want exit %d and %q", platform, c.size, code, out, c.code, c.message)
		}
	}
	if out, _ := run("--version").Output(); !strings.HasSuffix(string(out), " "+platform+"\n") {
		t.Errorf("%s nodeinit --version: %q", platform, out)
	}
}
