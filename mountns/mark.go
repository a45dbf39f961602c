package mountns

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// ProcessMark names this process in a way an execve keeps: its pid, its
// start time (in clock ticks since boot, field 22 of /proc/self/stat) and
// the device and inode of its executable.
func ProcessMark() (string, error) {
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return "", fmt.Errorf("read this process's start time: %w", err)
	}
	// The command name, in parentheses, may hold spaces: count fields
	// after its closing one, which is field 2.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return "", fmt.Errorf("read this process's start time: /proc/self/stat: %q", stat)
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 20 {
		return "", fmt.Errorf("read this process's start time: /proc/self/stat: %q", stat)
	}
	var exe unix.Stat_t
	if err := unix.Stat("/proc/self/exe", &exe); err != nil {
		return "", fmt.Errorf("stat this process's executable: %w", &os.PathError{Op: "stat", Path: "/proc/self/exe", Err: err})
	}
	return fmt.Sprintf("%d/%s/%d:%d", os.Getpid(), fields[19], exe.Dev, exe.Ino), nil
}

// marker is MarkerEnv's value for a re-exec from the namespace current: the
// namespace left and the process's mark.
func marker(current string) (string, error) {
	mark, err := ProcessMark()
	if err != nil {
		return "", err
	}
	return current + ";self=" + mark, nil
}

// ValidMarker says whether v, a value of MarkerEnv, is this process's own
// re-exec's: it names a mount namespace other than the current one (the
// one Enter left) and carries this process's mark. A marker in the
// environment nodeinit was started with, stale or set by hand, fails one
// or the other: it could name this process only by guessing its start
// time to the clock tick.
func ValidMarker(v string) bool {
	from, self, ok := strings.Cut(v, ";self=")
	if !ok {
		return false
	}
	current, err := Current()
	if err != nil || current == from {
		return false
	}
	mark, err := ProcessMark()
	return err == nil && self == mark
}

// ForgetMarker removes MarkerEnv from the environment without looking at
// it: where Enter is not called, a marker nodeinit was started with must
// not reach a child.
func ForgetMarker() error {
	if err := os.Unsetenv(MarkerEnv); err != nil {
		return fmt.Errorf("remove %s from the environment: %w", MarkerEnv, err)
	}
	return nil
}
