package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// systemBusConfig is dbus-daemon's system bus: its type, authentication
// and the stock system bus's default policy (anyone may send a signal to
// anyone, and a method call only where a service's policy allows it), then
// a policy with the holes the test's services' own policy files would make
// (%s).
const systemBusConfig = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <deny send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Introspectable"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Properties"/>
    <deny send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus" send_member="UpdateActivationEnvironment"/>
    <deny send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Debug.Stats"/>
    <deny send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.systemd1.Activator"/>
  </policy>
  <policy context="default">%s
  </policy>
</busconfig>
`

// SystemBus runs a real dbus-daemon with the system bus's policy on a
// socket in a temporary directory, where each of services may be owned
// and called, and returns its address. It is stopped when the test ends,
// or earlier by calling stop. It needs dbus-daemon (package dbus).
func SystemBus(tb testing.TB, services ...string) (address string, stop func()) {
	tb.Helper()
	daemon := RequireTool(tb, "dbus-daemon")
	dir := tb.TempDir()
	conf := filepath.Join(dir, "system.conf")
	address = "unix:path=" + dbus.EscapeBusAddressValue(filepath.Join(dir, "system_bus_socket"))
	var holes strings.Builder
	for _, s := range services {
		fmt.Fprintf(&holes, "\n    <allow own=%q/>\n    <allow send_destination=%q/>", s, s)
	}
	if err := os.WriteFile(conf, fmt.Appendf(nil, systemBusConfig, address, holes.String()), 0o644); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(daemon, "--config-file="+conf, "--nofork", "--nopidfile", "--nosyslog")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = cmd.Process.Kill() // ours, by pid
			<-exited
		})
	}
	tb.Cleanup(stop)
	// dbus-daemon has no readiness notification without systemd: connect
	// until it answers, bounded.
	deadline := time.After(10 * time.Second)
	for {
		if c, err := dbus.Connect(address); err == nil {
			c.Close()
			return address, stop
		}
		select {
		case err := <-exited:
			exited <- err // for stop
			tb.Fatalf("dbus-daemon exited: %v", err)
		case <-deadline:
			tb.Fatal("dbus-daemon did not answer within 10s")
		case <-time.After(20 * time.Millisecond):
		}
	}
}
