// Package procstatus reads a process's /proc/PID/status: its "Key:\tvalue"
// fields, and whether its effective capability set holds a capability,
// which is what nodeinit asks when it explains a refused mount or decides
// whether it may remount a cgroupfs.
package procstatus

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// Status is the fields of /proc/PID/status, by key, their values with the
// spaces around them trimmed.
type Status map[string]string

// Read reads the status file at path (/proc/self/status, or one below a
// root directory).
func Read(path string) (Status, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(b), nil
}

// Parse takes the fields of a status file's contents.
func Parse(b []byte) Status {
	s := Status{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok {
			s[k] = strings.TrimSpace(v)
		}
	}
	return s
}

// Effective says whether capability c (a unix.CAP_* number) is in the
// effective set, CapEff; known is false when the status has no CapEff the
// kernel's hexadecimal mask reads from.
func (s Status) Effective(c int) (has, known bool) {
	eff, err := strconv.ParseUint(s["CapEff"], 16, 64)
	if err != nil || c < 0 || c > 63 {
		return false, false
	}
	return eff&(1<<c) != 0, true
}
