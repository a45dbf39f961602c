package bus

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/bus/service"
)

// writeConf writes files under root, making their directories.
func writeConf(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// kubeletDropIn is the drop-in the kubelet writes (its
// OverrideInhibitDelay), for a shutdownGracePeriod of seconds.
func kubeletDropIn(seconds string) string {
	return "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=" + seconds + "\n"
}

// With a delay shorter than its shutdownGracePeriod, the kubelet writes
// /etc/systemd/logind.conf.d/99-kubelet.conf, asks systemd to send logind
// SIGHUP, and reads the delay again: it must have changed, or the kubelet
// turns graceful node shutdown off. The drain then waits that long.
func TestKubeletsReloadOfLogindRaisesTheDelay(t *testing.T) {
	root := t.TempDir()
	b := listen(t, testOptions{InhibitDelayMax: 10 * time.Second, ConfigRoot: root})
	k := kubelet{connect(t, b)}
	if delay, err := k.currentInhibitDelay(); err != nil || delay != 10*time.Second {
		t.Fatalf("InhibitDelayMaxUSec = %v, %v; want 10s", delay, err)
	}
	writeConf(t, root, map[string]string{"etc/systemd/logind.conf.d/99-kubelet.conf": kubeletDropIn("30")})
	if err := k.reloadLogindConf(); err != nil {
		t.Fatalf("KillUnit: %v", err)
	}
	if delay, err := k.currentInhibitDelay(); err != nil || delay != 30*time.Second {
		t.Fatalf("InhibitDelayMaxUSec after the reload = %v, %v; want 30s", delay, err)
	}
	if loginOf(b).InhibitDelayMax() != 30*time.Second {
		t.Errorf("the bus's delay is %v, want 30s", loginOf(b).InhibitDelayMax())
	}
	// A reload without the drop-in goes back to the delay nodeinit was
	// given, as logind goes back to its defaults.
	if err := os.Remove(filepath.Join(root, "etc/systemd/logind.conf.d/99-kubelet.conf")); err != nil {
		t.Fatal(err)
	}
	if err := k.reloadLogindConf(); err != nil {
		t.Fatal(err)
	}
	if delay, err := k.currentInhibitDelay(); err != nil || delay != 10*time.Second {
		t.Errorf("InhibitDelayMaxUSec after the drop-in is gone = %v, %v; want 10s", delay, err)
	}
}

func TestKillUnitAnswersAsSystemdWould(t *testing.T) {
	b := listen(t, testOptions{ConfigRoot: t.TempDir()})
	conn := connect(t, b)
	systemd := conn.Object(systemdName, systemdPath)
	for _, tc := range []struct {
		name    string
		obj     dbus.BusObject
		method  string
		args    []any
		errName string
	}{
		{"another unit", systemd, systemdIface + ".KillUnit", []any{"containerd.service", "all", int32(1)}, errNoSuchUnit},
		{"an unknown whom", systemd, systemdIface + ".KillUnit", []any{"systemd-logind.service", "everyone", int32(1)}, service.InvalidArgs},
		{"signal 0", systemd, systemdIface + ".KillUnit", []any{"systemd-logind.service", "all", int32(0)}, service.InvalidArgs},
		{"signal 65", systemd, systemdIface + ".KillUnit", []any{"systemd-logind.service", "all", int32(65)}, service.InvalidArgs},
		{"logind's control process", systemd, systemdIface + ".KillUnit", []any{"systemd-logind.service", "control", int32(1)}, errNoSuchProc},
		{"TERM to logind", systemd, systemdIface + ".KillUnit", []any{"systemd-logind.service", "all", int32(15)}, service.NotSupported},
		{"KillUnit with two arguments", systemd, systemdIface + ".KillUnit", []any{"systemd-logind.service", "all"}, service.InvalidArgs},
		{"another method", systemd, systemdIface + ".StartUnit", []any{"systemd-logind.service", "replace"}, service.UnknownMethod},
		{"another object", conn.Object(systemdName, "/org/freedesktop/systemd1/unit/x"), systemdIface + ".KillUnit", []any{"x", "all", int32(1)}, service.UnknownObject},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.obj.Call(tc.method, 0, tc.args...).Err
			if got := dbusErrorName(err); got != tc.errName {
				t.Errorf("%s: %v (%s), want %s", tc.method, err, got, tc.errName)
			}
		})
	}
	// The alias of logind's unit reloads it too, and so does whom "main".
	if err := systemd.Call(systemdIface+".KillUnit", 0, "dbus-org.freedesktop.login1.service", "main", int32(1)).Err; err != nil {
		t.Errorf("KillUnit of logind's alias: %v", err)
	}
}

// A delay raised in the files is the one in force: InhibitDelayMax, which
// bounds the drain, follows the reload.
func TestTheDelayInForceFollowsAReload(t *testing.T) {
	root := t.TempDir()
	b := listen(t, testOptions{InhibitDelayMax: time.Minute, ConfigRoot: root})
	k := kubelet{connect(t, b)}
	writeConf(t, root, map[string]string{"etc/systemd/logind.conf.d/99-kubelet.conf": kubeletDropIn("90")})
	if got := loginOf(b).InhibitDelayMax(); got != time.Minute {
		t.Fatalf("before the reload: %v, want the configured 1m", got)
	}
	if err := k.reloadLogindConf(); err != nil {
		t.Fatal(err)
	}
	if got := loginOf(b).InhibitDelayMax(); got != 90*time.Second {
		t.Errorf("after the reload: %v, want the drop-in's 90s", got)
	}
}

// Peer.GetMachineId reads etc/machine-id as a regular file: a FIFO there
// does not hold the client's reader, and /var/lib/dbus/machine-id answers.
func TestGetMachineIdDoesNotWaitOnAFIFO(t *testing.T) {
	root := t.TempDir()
	writeConf(t, root, map[string]string{"var/lib/dbus/machine-id": "0123456789abcdef0123456789abcdef\n"})
	must(t, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	must(t, unix.Mkfifo(filepath.Join(root, "etc/machine-id"), 0o644))
	b := listen(t, testOptions{ConfigRoot: root})
	conn := connect(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var id string
	if err := conn.Object(logindName, logindPath).CallWithContext(ctx, service.PeerIface+".GetMachineId", 0).Store(&id); err != nil ||
		id != "0123456789abcdef0123456789abcdef" {
		t.Errorf("GetMachineId = %q, %v", id, err)
	}
}

// GetMachineId answers only what identity.Valid takes for a machine-id
// (32 lowercase hex digits, not all zero), the rule nodeinit's identity
// holds /etc/machine-id to: anything else there is passed over for
// /var/lib/dbus/machine-id, as a file that is not a machine-id.
func TestGetMachineIdAnswersOnlyAValidMachineID(t *testing.T) {
	const good = "0123456789abcdef0123456789abcdef"
	for _, etc := range []string{"0123456789ABCDEF0123456789ABCDEF", "00000000000000000000000000000000", "0123456789abcdef", "uninitialized"} {
		root := t.TempDir()
		writeConf(t, root, map[string]string{"etc/machine-id": etc + "\n", "var/lib/dbus/machine-id": good + "\n"})
		if id, err := machineID(root); err != nil || id != good {
			t.Errorf("etc/machine-id %q: machineID = %q, %v; want /var/lib/dbus's %q", etc, id, err, good)
		}
	}
	root := t.TempDir()
	writeConf(t, root, map[string]string{"etc/machine-id": "0123456789ABCDEF0123456789ABCDEF\n"})
	if id, err := machineID(root); err == nil {
		t.Errorf("an upper-case machine-id alone: machineID = %q, want an error", id)
	}
}
