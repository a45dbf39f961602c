package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// helperEnv runs the test binary as a test process started ignoring HUP,
// INT and TSTP (by a shell's trap ”): it prints the SigIgn of a program it
// starts, after defaultSignalsForChildren when the value is "default".
const helperEnv = "TESTENV_SIGNALS_HELPER"

func TestMain(m *testing.M) {
	if how, ok := os.LookupEnv(helperEnv); ok {
		if how == "default" {
			defaultSignalsForChildren()
		}
		out, err := exec.Command("grep", "^SigIgn:", "/proc/self/status").Output()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Print(string(out))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Started from a shell that ignores signals (nohup, a background job), the
// test process gives what it launches the default actions; without that,
// the programs it starts would inherit the ignores.
func TestLaunchedProgramsGetTheDefaultActions(t *testing.T) {
	for how, wantIgnored := range map[string]bool{"inherit": true, "default": false} {
		cmd := exec.Command("/bin/sh", "-c", `trap "" HUP INT TSTP; exec "$0" -test.run=^$`, os.Args[0])
		cmd.Env = append(os.Environ(), helperEnv+"="+how)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v", how, err)
		}
		var mask uint64
		if _, err := fmt.Sscanf(strings.TrimPrefix(strings.TrimSpace(string(out)), "SigIgn:"), "%x", &mask); err != nil {
			t.Fatalf("%s: %q: %v", how, out, err)
		}
		for _, sig := range []uint{1, 2, 20} { // HUP, INT, TSTP
			if got := mask&(1<<(sig-1)) != 0; got != wantIgnored {
				t.Errorf("%s: signal %d ignored in the child: %v, want %v (SigIgn %016x)", how, sig, got, wantIgnored, mask)
			}
		}
	}
}
