package main

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/config"
	"github.com/nodeinit/nodeinit/init/supervisor"
	"github.com/nodeinit/nodeinit/logind"
	"github.com/nodeinit/nodeinit/node"
)

// busEnv is the variable through which the kubelet's D-Bus library
// (godbus's SystemBus) finds the system bus.
const busEnv = "DBUS_SYSTEM_BUS_ADDRESS"

// nodeDrain is graceful node shutdown: the login1 bus the executor is given,
// as the supervisor's Drainer.
type nodeDrain struct {
	bus *logind.Bus
	dir string // the bus socket's private directory
}

// Drain emits PrepareForShutdown(true); the kubelet ends its pods and
// releases its delay lock.
func (d *nodeDrain) Drain() <-chan struct{} { return d.bus.PrepareForShutdown() }

func (d *nodeDrain) Status() string { return d.bus.Status() }

// close ends the bus and removes its directory.
func (d *nodeDrain) close() {
	if err := d.bus.Close(); err != nil {
		klog.ErrorS(err, "Closing the login1 bus")
	}
	_ = os.RemoveAll(d.dir)
}

// shutdownDelay is how long the drain may take: the configured delay, else
// what the kubelet asks for in its configuration, at least logind's default.
// The kubelet gives the feature up when the delay logind reports is shorter
// than its shutdownGracePeriod, so a shorter configured delay is warned of.
func shutdownDelay(gs config.GracefulNodeShutdown, kubelet node.KubeletConfig) time.Duration {
	wanted := kubelet.ShutdownDelay()
	if gs.Delay.Duration > 0 {
		if gs.Delay.Duration < wanted {
			klog.Warningf("--graceful-node-shutdown-delay %v is shorter than the kubelet's shutdownGracePeriod %v (%s): "+
				"the kubelet will turn graceful node shutdown off", gs.Delay.Duration, wanted, strings.Join(kubelet.Files, " "))
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
// once, when it starts.
func startNodeDrain(gs config.GracefulNodeShutdown, kubelet node.KubeletConfig) (*nodeDrain, string, time.Duration, error) {
	delay := shutdownDelay(gs, kubelet)
	dir, err := os.MkdirTemp(cmp.Or(runDir(), os.TempDir()), "nodeinit-bus-")
	if err != nil {
		return nil, "", 0, fmt.Errorf("make the login1 bus's directory: %w", err)
	}
	d := &nodeDrain{dir: dir}
	d.bus, err = logind.Listen(filepath.Join(dir, "system_bus_socket"), logind.Options{InhibitDelayMax: delay})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, "", 0, err
	}
	klog.InfoS("Serving login1 to the executor for graceful node shutdown", "address", d.bus.Address(), "delay", delay)
	return d, busEnv + "=" + d.bus.Address(), delay, nil
}

// runDir is /run where it exists: the bus is a runtime file.
func runDir() string {
	if fi, err := os.Stat("/run"); err == nil && fi.IsDir() {
		return "/run"
	}
	return ""
}

// wire makes the supervisor drain through d and admits the executor's
// processes to the bus once it runs.
func (d *nodeDrain) wire(sc *supervisor.Config, delay time.Duration) {
	sc.Drain, sc.DrainTimeout = d, delay
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
