// Package arch_test checks what differs from one architecture to another in
// the binary itself: --version names the platform it was built for, and a
// 32-bit build (arm/v7, 386) holds the sizes a 64-bit one does. make
// test-arm64 and make test-s390x run the first under the emulator, where the
// platform it names is the emulated one.
package arch_test

import (
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/nodeinit/nodeinit/test/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestVersionNamesThePlatform(t *testing.T) {
	nodeinit := testenv.Build(t, "./cmd/nodeinit")
	out, err := exec.Command(nodeinit, "--version").Output()
	if err != nil {
		t.Fatalf("nodeinit --version: %v", err)
	}
	want := " linux/" + runtime.GOARCH + "\n"
	if !strings.HasPrefix(string(out), "nodeinit ") || !strings.HasSuffix(string(out), want) {
		t.Errorf("nodeinit --version printed %q, want \"nodeinit <version>%s\"", out, want)
	}
}
