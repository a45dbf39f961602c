//go:build long

package arch_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
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

// A 32-bit int cannot hold 8Ei in MiB: there the largest log size is 1Pi,
// and both builds compile. The 386 binary runs on an amd64 kernel as it is.
func TestThirtyTwoBitBuildsHoldTheLargestLogSize(t *testing.T) {
	dir := t.TempDir()
	crossBuild(t, dir, "arm", "7")
	testenv.Require(t, runtime.GOARCH == "amd64", "runs a 386 binary, which needs an amd64 kernel")
	bin := crossBuild(t, dir, "386", "")
	for _, c := range []struct {
		size    string
		code    int
		message string
	}{
		{"1Pi", 0, "nodeinit "},
		{"2Pi", 2, "must be at most 1Pi"},
		{"8Ei", 2, "must be at most 1Pi"},
	} {
		out, err := exec.Command(bin, "--max-log-size="+c.size, "--version").CombinedOutput()
		code := 0
		if e, ok := err.(*exec.ExitError); ok {
			code = e.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != c.code || !strings.Contains(string(out), c.message) {
			t.Errorf("386 nodeinit --max-log-size=%s: exit %d, %q; want exit %d and %q", c.size, code, out, c.code, c.message)
		}
	}
	if out, _ := exec.Command(bin, "--version").Output(); !strings.HasSuffix(string(out), " linux/386\n") {
		t.Errorf("386 nodeinit --version: %q", out)
	}
}
