package main

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/bus"
	"github.com/nodeinit/nodeinit/bus/upstream"
	"github.com/nodeinit/nodeinit/config"
	"github.com/nodeinit/nodeinit/hostlogind"
	"github.com/nodeinit/nodeinit/init/supervisor"
	"github.com/nodeinit/nodeinit/logind"
	"github.com/nodeinit/nodeinit/node"
)

// busEnv is the variable through which the kubelet's D-Bus library
// (godbus's SystemBus) finds the system bus.
const busEnv = "DBUS_SYSTEM_BUS_ADDRESS"

// nodeDrain is graceful node shutdown: the login1 bus the executor is given,
// as the supervisor's Drainer, and the lock on the host's logind that
// makes the host's shutdown drain the node too (nil without one).
type nodeDrain struct {
	bus    *bus.Bus
	logind *logind.Logind
	host   *hostlogind.Client
	dir    string // the bus socket's private directory
}

// Drain emits PrepareForShutdown(true); the kubelet ends its pods and
// releases its delay lock, which closes the channel.
func (d *nodeDrain) Drain() <-chan struct{} { return d.logind.PrepareForShutdown() }

// Timeout is the delay in force: what the bus reports as
// InhibitDelayMaxUSec now, which a reload of logind's configuration may
// have changed since start.
func (d *nodeDrain) Timeout() time.Duration { return d.logind.InhibitDelayMax() }

// Status is the bus's state, and whether a lock is held on the host's
// logind.
func (d *nodeDrain) Status() string {
	if d.host == nil {
		return d.bus.Status()
	}
	return fmt.Sprintf("%s hostLock=%t hostDelay=%v", d.bus.Status(), d.host.Held(), d.host.Delay())
}

// Cancel passes a cancelled shutdown of the host on: PrepareForShutdown(false).
func (d *nodeDrain) Cancel() { d.logind.CancelShutdown() }

// close releases the host's lock, ends the bus and removes its directory.
func (d *nodeDrain) close() {
	if d.host != nil {
		d.host.Close()
	}
	if err := d.bus.Close(); err != nil {
		klog.ErrorS(err, "Closing the login1 bus")
	}
	_ = os.RemoveAll(d.dir)
}

// shutdownDelay is how long the drain may take: the configured delay, else
// what the kubelet asks for in its configuration, at least logind's default.
// The kubelet raises a delay shorter than its shutdownGracePeriod by
// writing a logind drop-in into the node's /etc and reloading logind, so a
// shorter configured delay is warned of.
func shutdownDelay(gs config.GracefulNodeShutdown, kubelet node.KubeletConfig) time.Duration {
	wanted := kubelet.ShutdownDelay()
	if gs.Delay.Duration > 0 {
		if gs.Delay.Duration < wanted {
			klog.Warningf("--graceful-node-shutdown-delay %v is shorter than the kubelet's shutdownGracePeriod %v (%s): "+
				"the kubelet will raise it by writing /etc/systemd/logind.conf.d/99-kubelet.conf and reloading logind", gs.Delay.Duration, wanted, strings.Join(kubelet.Files, " "))
		}
		return gs.Delay.Duration
	}
	if len(kubelet.Files) > 0 && wanted == 0 {
		klog.Warningf("the kubelet's configuration %s sets no shutdownGracePeriod, so it will not drain the node: "+
			"nodeinit serves login1 anyway and stops the executor at once", strings.Join(kubelet.Files, " "))
	}
	return max(wanted, logind.DefaultInhibitDelayMax)
}

// startNodeDrain listens on the login1 bus in a private directory and
// returns the drain and the environment entry that points the executor at
// it. It must run before the executor starts: the kubelet looks for the bus
// once, when it starts. driver is the cgroup driver the kubelet will run
// with (cgroups.Result.KubeletCgroupDriver): with systemd it needs the
// container's own system bus.
func startNodeDrain(gs config.GracefulNodeShutdown, kubelet node.KubeletConfig, driver string) (*nodeDrain, string, error) {
	delay := shutdownDelay(gs, kubelet)
	// The executor's system bus is nodeinit's: what is not for logind goes
	// on to the container's own system bus, where it has one, unless the
	// operator turned that off.
	systemBus, noBus := upstream.Address(os.Getenv, "/")
	if !gs.SystemBusPassThrough {
		systemBus, noBus = "", errors.New("--system-bus-pass-through=false")
	}
	if err := node.RequireSystemBus(driver, noBus, upstream.SystemBusSocket); err != nil {
		return nil, "", err
	}
	dir, err := os.MkdirTemp(cmp.Or(runDir(), os.TempDir()), "nodeinit-bus-")
	if err != nil {
		return nil, "", fmt.Errorf("make the login1 bus's directory: %w", err)
	}
	d := &nodeDrain{dir: dir, logind: logind.New(logind.Options{InhibitDelayMax: delay})}
	d.bus, err = bus.Listen(filepath.Join(dir, "system_bus_socket"), bus.Options{Upstream: systemBus}, d.logind)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, "", err
	}
	klog.InfoS("Serving login1 to the executor for graceful node shutdown", "address", d.bus.Address(), "delay", delay)
	d.host = startHostDrain(gs, d.logind)
	if noBus == nil {
		klog.InfoS("The executor's other D-Bus calls pass through to the container's system bus, as nodeinit's connection", "systemBus", systemBus)
	} else {
		klog.InfoS("No system bus for the executor's other D-Bus calls: they get the errors of a bus without their names", "reason", noBus)
	}
	return d, busEnv + "=" + d.bus.Address(), nil
}

// startHostDrain takes a shutdown delay lock on the host's logind, where
// the container has the host's system bus (the host's /run mounted) and
// the operator has not turned it off, so that the host's own shutdown
// drains the node as a stop of the container does. The lock is taken in
// the client's goroutine: a host bus that does not answer delays nothing.
// Where there is none, one line says so.
func startHostDrain(gs config.GracefulNodeShutdown, l *logind.Logind) *hostlogind.Client {
	const no = "The host's shutdown will not drain the node"
	if !gs.DrainOnHostShutdown {
		klog.InfoS(no, "reason", "--drain-on-host-shutdown=false")
		return nil
	}
	address, err := upstream.Address(os.Getenv, "/")
	if err != nil {
		klog.InfoS(no+": the container has no system bus of the host's (mount the host's /run to give it one)", "reason", err)
		return nil
	}
	return hostlogind.Start(hostlogind.Options{Address: address, NodeDelay: l.InhibitDelayMax})
}

// runDir is /run where it exists: the bus is a runtime file.
func runDir() string {
	if fi, err := os.Stat("/run"); err == nil && fi.IsDir() {
		return "/run"
	}
	return ""
}

// wire makes the supervisor drain through d, bounded by the delay in force
// (Timeout), on a stop and on the host's shutdown, and admits the
// executor's processes to the bus once it runs.
func (d *nodeDrain) wire(sc *supervisor.Config) {
	sc.Drain = d
	if d.host != nil {
		sc.Host = d.host
	}
	started := sc.OnExecutorStarted
	sc.OnExecutorStarted = func(pid int) {
		if err := d.bus.AdmitExecutor(pid); err != nil {
			klog.ErrorS(err, "The executor cannot use the login1 bus: graceful node shutdown will not drain the node")
		}
		if started != nil {
			started(pid)
		}
	}
}
