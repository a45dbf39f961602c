package reaper

import (
	"os"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestCodeIsShellStyle(t *testing.T) {
	for _, tc := range []struct {
		name string
		ws   unix.WaitStatus
		want int
	}{
		{"exit 0", unix.WaitStatus(0), 0},
		{"exit 3", unix.WaitStatus(3 << 8), 3},
		{"exit 255", unix.WaitStatus(255 << 8), 255},
		{"SIGKILL", unix.WaitStatus(unix.SIGKILL), 137},
		{"SIGTERM", unix.WaitStatus(unix.SIGTERM), 143},
		{"SIGSEGV with core", unix.WaitStatus(unix.SIGSEGV) | 0x80, 139},
	} {
		if got := Code(tc.ws); got != tc.want {
			t.Errorf("%s: Code = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestDescribeNamesSignal(t *testing.T) {
	if got := Describe(unix.WaitStatus(unix.SIGKILL)); got != "killed by signal SIGKILL" {
		t.Errorf("Describe = %q", got)
	}
	if got := Describe(unix.WaitStatus(7 << 8)); got != "exit code 7" {
		t.Errorf("Describe = %q", got)
	}
}

// A tracked child's status comes back from Reap, even when it has exited
// before Reap is called; an untracked child is reaped as an orphan.
func TestReapReturnsTrackedExitsAndCountsOrphans(t *testing.T) {
	r := New()
	attr := &syscall.ProcAttr{Files: []uintptr{0, 1, 2}}
	pid, err := r.Start("/bin/sh", []string{"sh", "-c", "exit 7"}, attr)
	if err != nil {
		t.Fatal(err)
	}
	// An untracked child: started behind the reaper's back.
	p, err := os.StartProcess("/bin/sh", []string{"sh", "-c", "exit 0"}, &os.ProcAttr{Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}})
	if err != nil {
		t.Fatal(err)
	}
	_ = p.Release()

	var exits []Exit
	for {
		e, none, err := r.Reap()
		if err != nil {
			t.Fatal(err)
		}
		exits = append(exits, e...)
		if none {
			break
		}
		// Block until some child changes state, without reaping it.
		var info unix.Siginfo
		_ = unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOWAIT, nil)
	}
	if len(exits) != 1 || exits[0].Pid != pid || exits[0].Code() != 7 {
		t.Fatalf("exits = %+v, want one exit of pid %d with code 7", exits, pid)
	}
	if r.Orphans() != 1 {
		t.Errorf("orphans = %d, want 1", r.Orphans())
	}
}
