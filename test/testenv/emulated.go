package testenv

import (
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
)

// kernelArches are the machines (uname -m) whose kernel runs a GOARCH's
// binaries itself, without an emulator.
var kernelArches = map[string][]string{
	"amd64":    {"x86_64"},
	"386":      {"x86_64", "i386", "i486", "i586", "i686"},
	"arm64":    {"aarch64"},
	"arm":      {"aarch64", "armv7l", "armv8l", "armv6l", "armv5tel"},
	"ppc64le":  {"ppc64le"},
	"ppc64":    {"ppc64"},
	"s390x":    {"s390x"},
	"riscv64":  {"riscv64"},
	"loong64":  {"loongarch64"},
	"mips64le": {"mips64"},
	"mips64":   {"mips64"},
	"mipsle":   {"mips", "mips64"},
	"mips":     {"mips", "mips64"},
}

var emulated = sync.OnceValue(func() bool {
	// The kernel's own machine: qemu-user answers uname(2) with the
	// emulated one, but /proc/sys is the host's.
	b, err := os.ReadFile("/proc/sys/kernel/arch")
	if err != nil {
		return false
	}
	machine := strings.TrimSpace(string(b))
	native, known := kernelArches[runtime.GOARCH]
	if !known {
		return false
	}
	return !slices.Contains(native, machine)
})

// Emulated reports whether the test runs under a user-mode emulator
// (qemu-user through binfmt_misc, as make test-arm64 runs it): built for an
// architecture the kernel does not run itself. The binaries the test builds
// are then that architecture's too, and emulated.
func Emulated() bool { return emulated() }
