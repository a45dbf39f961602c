package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestZombiesFindsAnUnwaitedChild(t *testing.T) {
	// The test binary itself, running no test, exits at once.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Contains(Zombies(os.Getpid()), cmd.Process.Pid) {
		if time.Now().After(deadline) {
			t.Fatalf("child %d exited but is not among the zombies %v", cmd.Process.Pid, Zombies(os.Getpid()))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestTailKeepsTheLastLines(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"a\nb\nc\n", 2, "b\nc"},
		{"a\nb\nc", 5, "a\nb\nc"},
		{"", 3, ""},
	} {
		if got := Tail(tc.in, tc.n); got != tc.want {
			t.Errorf("Tail(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestReadStartsAndRecordParseTheTaskHelpersFiles(t *testing.T) {
	dir := t.TempDir()
	starts, rec := filepath.Join(dir, "starts"), filepath.Join(dir, "rec")
	if err := os.WriteFile(starts, []byte("1000\n3000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rec, []byte("HUP 1000\nTERM 2000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if at := ReadStarts(t, starts); len(at) != 2 || at[1].Sub(at[0]) != 2*time.Microsecond {
		t.Errorf("ReadStarts = %v, want two starts 2µs apart", at)
	}
	r := ReadRecord(t, rec)
	if r.Signals() != "HUP,TERM" || !r[1].At.Equal(time.Unix(0, 2000)) {
		t.Errorf("ReadRecord = %v, want HUP then TERM at 2000ns", r)
	}
}
