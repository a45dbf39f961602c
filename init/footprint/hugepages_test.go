package footprint

import (
	"os"
	"os/exec"
	"testing"

	"github.com/nodeinit/nodeinit/internal/procstatus"
	"github.com/nodeinit/nodeinit/test/testenv"
)

// thpEnabled is the THP_enabled field of a /proc/PID/status text: "1" or
// "0". The kernel shows it since Linux 5.0.
func thpEnabled(t *testing.T, status string) string {
	t.Helper()
	v, ok := procstatus.Parse([]byte(status))["THP_enabled"]
	testenv.Require(t, ok, "THP_enabled in /proc/PID/status (Linux 5.0 and later)")
	return v
}

func selfStatus(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The test process itself is changed: every test here leaves it with huge
// pages allowed again.
func allowAgain(t *testing.T) {
	t.Cleanup(func() {
		if err := setTHPDisable(false); err != nil {
			t.Error(err)
		}
	})
}

func TestDisableTurnsThemOffForTheProcessAndForkNotForTheChild(t *testing.T) {
	testenv.Require(t, thpEnabled(t, selfStatus(t)) == "1",
		"transparent huge pages allowed for the test process (they are off for it already: nothing to tell apart)")
	allowAgain(t)
	s, err := DisableHugePages()
	if err != nil {
		t.Fatalf("DisableHugePages: %v", err)
	}
	if !s.Disabled {
		t.Fatal("DisableHugePages returned a setting that is not Disabled, without an error")
	}
	if got := thpEnabled(t, selfStatus(t)); got != "0" {
		t.Fatalf("THP_enabled of the process after DisableHugePages = %s; want 0", got)
	}

	// A child started through Fork reads its own status: the kernel's
	// setting, as without nodeinit, after its execve.
	var out []byte
	var runErr error
	if err := s.Fork(func() { out, runErr = exec.Command("cat", "/proc/self/status").Output() }); err != nil {
		t.Fatalf("Fork: %v", err)
	}
	if runErr != nil {
		t.Fatalf("cat /proc/self/status: %v", runErr)
	}
	if got := thpEnabled(t, string(out)); got != "1" {
		t.Errorf("THP_enabled of a child started through Fork = %s; want 1, the kernel's own", got)
	}
	if got := thpEnabled(t, selfStatus(t)); got != "0" {
		t.Errorf("THP_enabled of the process after Fork = %s; want 0 again", got)
	}

	// Without Fork the child inherits the process's setting: what Fork is
	// there for.
	out, err = exec.Command("cat", "/proc/self/status").Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := thpEnabled(t, string(out)); got != "0" {
		t.Errorf("THP_enabled of a child started without Fork = %s; want 0, inherited (else this test proves nothing)", got)
	}
}

func TestASettingThatDisabledNothingForksAlone(t *testing.T) {
	allowAgain(t)
	before := thpEnabled(t, selfStatus(t))
	for _, s := range []*HugePages{nil, {}} {
		called := false
		if err := s.Fork(func() { called = true }); err != nil || !called {
			t.Errorf("Fork of %+v: called %v, error %v; want the fork called, no error", s, called, err)
		}
		if got := thpEnabled(t, selfStatus(t)); got != before {
			t.Errorf("Fork of %+v changed the process's THP_enabled from %s to %s", s, before, got)
		}
	}
}
