package testenv

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// An emulator answers uname(2) with the machine it emulates, while
// /proc/sys/kernel/arch is the kernel's own: they differ exactly when the
// test runs emulated (make test-arm64), and Emulated says so.
func TestEmulatedWhenUnameIsNotTheKernelsMachine(t *testing.T) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/sys/kernel/arch")
	if err != nil {
		t.Fatal(err)
	}
	uname, kernel := unix.ByteSliceToString(u.Machine[:]), strings.TrimSpace(string(b))
	if want := uname != kernel; Emulated() != want {
		t.Errorf("Emulated() = %v with uname -m %s on a %s kernel", Emulated(), uname, kernel)
	}
}
