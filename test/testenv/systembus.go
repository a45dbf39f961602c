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
	b := NewSystemBus(tb, services...)
	return b.Address, b.Stop
}

// Bus is a dbus-daemon run as a system bus, which a test may stop and
// start again on the same socket (the host's bus lost and regained) and
// whose policy it may change.
type Bus struct {
	// Address is the bus's D-Bus address, the same across restarts.
	Address string

	tb       testing.TB
	daemon   string
	conf     string
	services []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan error
}

// NewSystemBus starts a Bus (SystemBus has the rules); it is stopped
// when the test ends.
func NewSystemBus(tb testing.TB, services ...string) *Bus {
	tb.Helper()
	dir := tb.TempDir()
	b := &Bus{tb: tb, daemon: RequireTool(tb, "dbus-daemon"), conf: filepath.Join(dir, "system.conf"), services: services,
		Address: "unix:path=" + dbus.EscapeBusAddressValue(filepath.Join(dir, "system_bus_socket"))}
	b.writeConfig("")
	tb.Cleanup(b.Stop)
	b.Start()
	return b
}

// writeConfig writes the bus's configuration with the services' holes
// and the extra policy rules extra.
func (b *Bus) writeConfig(extra string) {
	var holes strings.Builder
	for _, s := range b.services {
		fmt.Fprintf(&holes, "\n    <allow own=%q/>\n    <allow send_destination=%q/>", s, s)
	}
	holes.WriteString(extra)
	if err := os.WriteFile(b.conf, fmt.Appendf(nil, systemBusConfig, b.Address, holes.String()), 0o644); err != nil {
		b.tb.Fatal(err)
	}
}

// Start starts dbus-daemon, when it is not running, and returns once it
// answers.
func (b *Bus) Start() {
	b.tb.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd != nil {
		return
	}
	cmd := exec.Command(b.daemon, "--config-file="+b.conf, "--nofork", "--nopidfile", "--nosyslog")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		b.tb.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	b.cmd, b.exited = cmd, exited
	// dbus-daemon has no readiness notification without systemd: connect
	// until it answers, bounded.
	deadline := time.After(10 * time.Second)
	for {
		if c, err := dbus.Connect(b.Address); err == nil {
			c.Close()
			return
		}
		select {
		case err := <-exited:
			exited <- err // for Stop
			b.tb.Fatalf("dbus-daemon exited: %v", err)
		case <-deadline:
			b.tb.Fatal("dbus-daemon did not answer within 10s")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Stop kills dbus-daemon, if it runs, and waits for it; every connection
// to the bus ends.
func (b *Bus) Stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil {
		return
	}
	_ = b.cmd.Process.Kill() // ours, by pid
	<-b.exited
	b.cmd = nil
}

// SetPolicy replaces the rules added to the default policy (after the
// services' holes: a deny there wins) and has the running bus reload its
// configuration; it returns once the bus has.
func (b *Bus) SetPolicy(rules string) {
	b.tb.Helper()
	b.writeConfig(rules)
	conn, err := dbus.Connect(b.Address)
	if err != nil {
		b.tb.Fatal(err)
	}
	defer conn.Close()
	if err := conn.BusObject().Call("org.freedesktop.DBus.ReloadConfig", 0).Err; err != nil {
		b.tb.Fatalf("ReloadConfig: %v", err)
	}
}
