package main

import (
	"debug/elf"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
)

// elfArch is the GOARCH of an ELF binary's machine.
func elfArch(f *elf.File) string {
	switch f.Machine {
	case elf.EM_X86_64:
		return "amd64"
	case elf.EM_386:
		return "386"
	case elf.EM_AARCH64:
		return "arm64"
	case elf.EM_ARM:
		return "arm"
	case elf.EM_S390:
		return "s390x"
	case elf.EM_PPC64:
		if f.Data == elf.ELFDATA2LSB {
			return "ppc64le"
		}
		return "ppc64"
	case elf.EM_RISCV:
		return "riscv64"
	case elf.EM_LOONGARCH:
		return "loong64"
	}
	return f.Machine.String()
}

// kernelRuns are the machines (uname -m) whose kernel runs a GOARCH's
// binaries itself.
var kernelRuns = map[string][]string{
	"amd64": {"x86_64"}, "386": {"x86_64", "i686"}, "arm64": {"aarch64"}, "arm": {"aarch64", "armv7l", "armv8l"},
	"s390x": {"s390x"}, "ppc64le": {"ppc64le"}, "ppc64": {"ppc64"}, "riscv64": {"riscv64"}, "loong64": {"loongarch64"},
}

// platform names what a benchmark measures: nodeinit's architecture and
// the kernel's machine, as the report's header says them. It fails when
// either nodeinit or this harness would run under a user-mode emulator
// (binfmt_misc): an emulator's times are no measure of any architecture.
func platform(nodeinit string) (string, error) {
	f, err := elf.Open(nodeinit)
	if err != nil {
		return "", fmt.Errorf("nodeinit: %w", err)
	}
	arch := elfArch(f)
	f.Close()
	// The kernel's own machine: an emulator answers uname(2) with its own.
	b, err := os.ReadFile("/proc/sys/kernel/arch")
	if err != nil {
		return "", fmt.Errorf("the kernel's architecture: %w", err)
	}
	machine := strings.TrimSpace(string(b))
	for _, a := range []string{arch, runtime.GOARCH} {
		if !slices.Contains(kernelRuns[a], machine) {
			return "", fmt.Errorf("a linux/%s binary on an %s kernel would run under an emulator, whose times say nothing of linux/%s's: measure on an %s machine (docs/arch.md)", a, machine, a, a)
		}
	}
	return fmt.Sprintf("nodeinit linux/%s on %s", arch, machine), nil
}
