package main

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// elfHeader writes the 64-byte header of a little-endian 64-bit ELF
// executable for machine, which is all of a file debug/elf needs.
func elfHeader(t *testing.T, machine uint16) string {
	t.Helper()
	h := make([]byte, 64)
	copy(h, "\x7fELF\x02\x01\x01")
	binary.LittleEndian.PutUint16(h[16:], 2) // ET_EXEC
	binary.LittleEndian.PutUint16(h[18:], machine)
	binary.LittleEndian.PutUint32(h[20:], 1)  // EV_CURRENT
	binary.LittleEndian.PutUint16(h[52:], 64) // e_ehsize
	p := filepath.Join(t.TempDir(), "nodeinit")
	if err := os.WriteFile(p, h, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// The report names nodeinit's architecture and the kernel's; a binary the
// kernel would hand to an emulator is not measured.
func TestTheReportNamesThePlatformAndNoEmulatedOne(t *testing.T) {
	machine, err := os.ReadFile("/proc/sys/kernel/arch")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	got, err := platform(self)
	want := "nodeinit linux/" + runtime.GOARCH + " on " + strings.TrimSpace(string(machine))
	switch {
	case testenv.Emulated() && (err == nil || !strings.Contains(err.Error(), "emulator")):
		t.Errorf("platform of the emulated test binary: %q, %v; want an error naming the emulator", got, err)
	case !testenv.Emulated() && (err != nil || got != want):
		t.Errorf("platform of the test binary: %q, %v; want %q", got, err, want)
	}
	foreign := uint16(183) // EM_AARCH64
	if runtime.GOARCH == "arm64" {
		foreign = 62 // EM_X86_64
	}
	got, err = platform(elfHeader(t, foreign))
	if err == nil || !strings.Contains(err.Error(), "emulator") {
		t.Errorf("platform of a foreign binary: %q, %v; want an error naming the emulator", got, err)
	}
}
