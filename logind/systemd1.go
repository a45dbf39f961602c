package logind

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/bus/service"
)

// The part of systemd's manager the kubelet calls: KillUnit of logind with
// SIGHUP, after it has written a drop-in that raises InhibitDelayMaxSec.
const (
	systemdName   = "org.freedesktop.systemd1"
	systemdPath   = dbus.ObjectPath("/org/freedesktop/systemd1")
	systemdIface  = "org.freedesktop.systemd1.Manager"
	errNoSuchUnit = "org.freedesktop.systemd1.NoSuchUnit"
	errNoSuchProc = "org.freedesktop.systemd1.NoSuchProcess"
)

// logindUnits are the names systemd knows logind's unit by: the unit and
// the alias its D-Bus activation uses.
var logindUnits = map[string]bool{"systemd-logind.service": true, "dbus-org.freedesktop.login1.service": true}

// killWhom are the values systemd takes for KillUnit's whom.
var killWhom = map[string]bool{"": true, "all": true, "main": true, "control": true,
	"all-fail": true, "main-fail": true, "control-fail": true}

// logindState is the delay in force and what the last reload found.
type logindState struct {
	root     string
	fallback time.Duration // Options.InhibitDelayMax: the delay without a setting in the files
	delay    atomic.Int64  // the delay in force, a time.Duration

	mu   sync.Mutex
	last string // what the last reload logged, so that a repeated reload is quiet
}

func newLogindState(opts Options) *logindState {
	s := &logindState{root: opts.ConfigRoot, fallback: opts.InhibitDelayMax}
	if s.root == "" {
		s.root = "/"
	}
	s.delay.Store(int64(opts.InhibitDelayMax))
	return s
}

// MaxInhibitDelay bounds the delay a reload of logind's configuration may
// set: every wait of nodeinit's has a bound that no file can lift.
const MaxInhibitDelay = time.Hour

// InhibitDelayMax is the delay in force, reported as InhibitDelayMaxUSec:
// Options.InhibitDelayMax, or InhibitDelayMaxSec from logind's
// configuration files as of the last reload (KillUnit of
// systemd-logind.service with SIGHUP). The drain waits at most this long.
func (l *Logind) InhibitDelayMax() time.Duration { return time.Duration(l.conf.delay.Load()) }

// reload re-reads logind's configuration, as logind does on SIGHUP: it
// starts from its defaults (here Options.InhibitDelayMax) and applies the
// files. It logs what changed; a reload that finds what the one before
// found logs nothing more, so a client cannot fill the log by repeating
// it.
func (s *logindState) reload(pid int32) time.Duration {
	conf := readLogindConf(s.root)
	delay, from := s.fallback, "nodeinit's --graceful-node-shutdown-delay"
	if conf.set {
		delay, from = conf.delay, "/"+conf.from
	}
	if conf.set && delay > MaxInhibitDelay {
		conf.problem("/%s: InhibitDelayMaxSec=%v is more than nodeinit waits for a drain; using %v", conf.from, delay, MaxInhibitDelay)
		delay = MaxInhibitDelay
	}
	old := time.Duration(s.delay.Swap(int64(delay)))
	summary := fmt.Sprintf("%v %s %q", delay, from, conf.problems)
	s.mu.Lock()
	quiet := summary == s.last
	s.last = summary
	s.mu.Unlock()
	if quiet {
		klog.V(1).InfoS("Reloaded logind's configuration: nothing changed", "pid", pid, "inhibitDelayMax", delay)
		return delay
	}
	for _, p := range conf.problems {
		klog.InfoS("Ignored part of logind's configuration", "problem", p)
	}
	klog.InfoS("Reloaded logind's configuration", "pid", pid, "inhibitDelayMax", delay, "was", old, "from", from, "files", len(conf.files))
	return delay
}

// systemdMethod answers KillUnit of logind's unit, and, on a bus without an
// upstream system bus, every call to systemd as a systemd that has no
// other unit would. It reports false for a call the upstream bus should
// get.
func (l *Logind) systemdMethod(in *service.Call, upstream bool) bool {
	isKill := in.Path == string(systemdPath) && in.Member == "KillUnit" && (in.Iface == systemdIface || in.Iface == "")
	if isKill && in.Sig == "ssi" {
		unit, _ := in.Msg.Body[0].(string)
		if !logindUnits[unit] && upstream {
			return false
		}
		l.killUnit(in, unit)
		return true
	}
	switch {
	case upstream:
		return false
	case isKill:
		in.Fail(systemdName, in.WantSignature("ssi"))
	case in.Path != string(systemdPath):
		in.Fail(systemdName, in.UnknownObject())
	default:
		in.Fail(systemdName, in.UnknownMethod())
	}
	return true
}

// killUnit answers KillUnit(unit, whom, signal) as systemd would: a unit it
// does not have is NoSuchUnit; logind's, with SIGHUP, reloads logind's
// configuration before the reply goes out, so that the kubelet's next
// read of InhibitDelayMaxUSec sees the new value (systemd's own reply
// comes before logind has reloaded; the kubelet reads at once and may
// race it). Any other signal to logind is refused: logind here is
// nodeinit itself.
func (l *Logind) killUnit(in *service.Call, unit string) {
	whom, _ := in.Msg.Body[1].(string)
	sig, _ := in.Msg.Body[2].(int32)
	switch {
	case !killWhom[whom]:
		in.Fail(systemdName, &service.Error{Name: service.InvalidArgs, Text: fmt.Sprintf("Invalid who argument: %s", whom)})
	case sig <= 0 || sig >= 65:
		in.Fail(systemdName, &service.Error{Name: service.InvalidArgs, Text: "Signal number out of range."})
	case !logindUnits[unit]:
		in.Fail(systemdName, &service.Error{Name: errNoSuchUnit, Text: fmt.Sprintf("Unit %s not found.", strings.ToValidUTF8(unit, "\uFFFD"))})
	case strings.HasPrefix(whom, "control"):
		in.Fail(systemdName, &service.Error{Name: errNoSuchProc, Text: "No control process to kill"})
	case sig != int32(unix.SIGHUP):
		in.Fail(systemdName, &service.Error{Name: service.NotSupported, Text: fmt.Sprintf("logind is served by nodeinit, which takes SIGHUP (reload its configuration) and no signal %d", sig)})
	default:
		l.conf.reload(in.Caller.Pid)
		in.Reply(systemdName)
	}
}
