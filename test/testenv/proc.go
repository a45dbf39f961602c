package testenv

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Stat is what the tests read of /proc/PID/stat (proc(5)).
type Stat struct {
	Pid     int
	Comm    string
	State   string // R, S, D, Z, T ...
	Ppid    int
	Pgrp    int
	Session int
	TTYNr   int
	Tpgid   int // the foreground process group of the process's terminal, -1 without one
	Utime   uint64
	Stime   uint64 // clock ticks
	Threads int
	RSS     int64 // pages
}

// ReadStat reads /proc/PID/stat.
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(b)
}

// ParseStat parses the text of /proc/PID/stat. The command name, in
// parentheses, may itself hold spaces and parentheses, so the fields are
// counted from the last ')'.
func ParseStat(b []byte) (Stat, error) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return Stat{}, fmt.Errorf("malformed stat %q", b)
	}
	f := bytes.Fields(b[end+1:])
	// f[0] is field 3 (state) of proc(5); RSS is field 24.
	if len(f) < 22 {
		return Stat{}, fmt.Errorf("malformed stat %q: %d fields", b, len(f)+2)
	}
	num := func(i int) int64 {
		n, _ := strconv.ParseInt(string(f[i-3]), 10, 64)
		return n
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return Stat{}, fmt.Errorf("malformed stat %q", b)
	}
	return Stat{
		Pid: pid, Comm: string(b[open+1 : end]), State: string(f[0]),
		Ppid: int(num(4)), Pgrp: int(num(5)), Session: int(num(6)), TTYNr: int(num(7)), Tpgid: int(num(8)),
		Utime: uint64(num(14)), Stime: uint64(num(15)), Threads: int(num(20)), RSS: num(24),
	}, nil
}

// Program is the path of the program pid runs: /proc/PID/exe, except under
// an emulator (Emulated), which the kernel runs in the program's place
// through binfmt_misc and which is then /proc/PID/exe: there the program is
// the emulator's first argument (with binfmt_misc's P flag, as Debian
// registers qemu-user-static, the second word of the command line).
func Program(pid int) (string, error) {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil || !Emulated() || !strings.HasPrefix(filepath.Base(exe), "qemu-") {
		return exe, err
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return "", err
	}
	args := strings.Split(string(b), "\x00")
	if len(args) < 2 {
		return "", fmt.Errorf("pid %d runs %s with the command line %q: no program to emulate", pid, exe, b)
	}
	return args[1], nil
}
