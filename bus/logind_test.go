package bus

import (
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/nodeinit/nodeinit/logind"
)

// The bus is tested as the kubelet meets it: with logind, its one service,
// plugged in. These are logind's names as a client sees them.
const (
	logindName   = "org.freedesktop.login1"
	logindPath   = dbus.ObjectPath("/org/freedesktop/login1")
	logindOwner  = localPrefix + "0"
	managerIface = "org.freedesktop.login1.Manager"
	systemdName  = "org.freedesktop.systemd1"
	systemdPath  = dbus.ObjectPath("/org/freedesktop/systemd1")
	systemdIface = "org.freedesktop.systemd1.Manager"

	// logind's limits on delay locks: per process, and in all.
	maxInhibitorsPerPeer = 4
	maxInhibitors        = 64

	errOperationInProgress = "org.freedesktop.login1.OperationInProgress"
	errNoSuchUnit          = "org.freedesktop.systemd1.NoSuchUnit"
	errNoSuchProc          = "org.freedesktop.systemd1.NoSuchProcess"
)

// testOptions configure the bus and its logind in a test.
type testOptions struct {
	InhibitDelayMax time.Duration
	// ConfigRoot is logind's configuration root and the bus's Root.
	ConfigRoot string
	Upstream   string
}

// newTestBus is newBus with logind as its service.
func newTestBus(path string, opts testOptions, tun tunables) *Bus {
	return newBus(path, Options{Root: opts.ConfigRoot, Upstream: opts.Upstream}, tun, newLogind(opts))
}

// listenTest is listenWith with logind as its service.
func listenTest(path string, opts testOptions, tun tunables) (*Bus, error) {
	return listenWith(path, Options{Root: opts.ConfigRoot, Upstream: opts.Upstream}, tun, newLogind(opts))
}

func newLogind(opts testOptions) *logind.Logind {
	return logind.New(logind.Options{InhibitDelayMax: opts.InhibitDelayMax, ConfigRoot: opts.ConfigRoot})
}

// loginOf is the logind that b serves.
func loginOf(b *Bus) *logind.Logind { return b.services[0].Service.(*logind.Logind) }
