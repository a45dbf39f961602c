package procstatus

import (
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// What /proc/self/status says of CAP_SYS_ADMIN is what capget(2) says of
// this process's effective set.
func TestEffectiveAgreesWithCapget(t *testing.T) {
	s, err := Read("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		t.Fatal(err)
	}
	for _, c := range []int{unix.CAP_SYS_ADMIN, unix.CAP_NET_ADMIN, unix.CAP_CHOWN, unix.CAP_BPF} {
		want := data[c/32].Effective&(1<<(c%32)) != 0
		if has, known := s.Effective(c); !known || has != want {
			t.Errorf("capability %d: Effective = %t, known %t; capget says %t", c, has, known, want)
		}
	}
	if s["Name"] == "" || s["Pid"] == "" {
		t.Errorf("fields %v: want Name and Pid", s)
	}
}

// A process of an unprivileged user has no CAP_SYS_ADMIN, as its own
// status file says.
func TestEffectiveOfAnUnprivilegedProcess(t *testing.T) {
	testenv.RequireRoot(t)
	cmd := exec.Command(testenv.RequireTool(t, "sleep"), "10")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	// Start returns once the child has executed sleep, as uid 65534.
	s, err := Read("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	if uid := strings.Fields(s["Uid"]); len(uid) < 2 || uid[1] != "65534" {
		t.Fatalf("the child's Uid line %q; want effective uid 65534", s["Uid"])
	}
	if has, known := s.Effective(unix.CAP_SYS_ADMIN); has || !known {
		t.Errorf("uid 65534: Effective(CAP_SYS_ADMIN) = %t, known %t; want false, known (CapEff %q)", has, known, s["CapEff"])
	}
}

// A status without a readable CapEff says nothing of any capability.
func TestEffectiveUnknownWithoutCapEff(t *testing.T) {
	for _, b := range []string{"Name:\tx\n", "CapEff:\tzz\n"} {
		if has, known := Parse([]byte(b)).Effective(unix.CAP_SYS_ADMIN); has || known {
			t.Errorf("%q: Effective = %t, known %t; want false, false", b, has, known)
		}
	}
	if has, known := Parse([]byte("CapEff:\t0000000000200000\n")).Effective(unix.CAP_SYS_ADMIN); !has || !known {
		t.Errorf("bit 21 alone: Effective = %t, %t; want true, true", has, known)
	}
}
