package logind

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"
	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/bus/service"
)

// logind's names on a bus, the one the logind served here and the host's
// (package hostlogind) have: its well-known name, its manager object and
// that object's interface.
const (
	BusName      = "org.freedesktop.login1"
	ObjectPath   = dbus.ObjectPath("/org/freedesktop/login1")
	ManagerIface = "org.freedesktop.login1.Manager"
)

// errOperationInProgress is logind's error for a delay lock taken while
// the shutdown it would delay is already under way.
const errOperationInProgress = "org.freedesktop.login1.OperationInProgress"

// DefaultInhibitDelayMax is the delay reported when Options leave it unset:
// logind's own default InhibitDelayMaxSec.
const DefaultInhibitDelayMax = 5 * time.Second

// Options configure logind.
type Options struct {
	// InhibitDelayMax is reported as logind's InhibitDelayMaxUSec: the
	// longest a delay inhibitor may hold shutdown back, and so the longest
	// the caller should wait for the channel PrepareForShutdown returns.
	// The kubelet wants it at least as long as its shutdownGracePeriod
	// (the sum of shutdownGracePeriodByPodPriority); shorter, it raises it
	// with a logind drop-in and a reload (InhibitDelayMax is then the
	// delay in force). Zero means DefaultInhibitDelayMax.
	InhibitDelayMax time.Duration
	// ConfigRoot is the root under which logind's configuration
	// (etc/systemd/logind.conf and the logind.conf.d drop-ins) is read
	// when a client reloads logind; "" is "/".
	ConfigRoot string
}

// Logind is logind and the part of systemd's manager that reloads it, as a
// service of nodeinit's bus (bus.Listen). Its methods may be called from
// any goroutine and return at once.
type Logind struct {
	host service.Host
	conf *logindState // the delay in force, changed by a reload

	mu            sync.Mutex
	closed        bool
	inhibitors    map[*inhibitor]struct{}
	inhibitorID   uint64
	drained       chan struct{} // made by the first PrepareForShutdown
	drainedClosed bool
	preparedAt    time.Time
}

// New is logind, to serve on a bus.
func New(opts Options) *Logind {
	if opts.InhibitDelayMax <= 0 {
		opts.InhibitDelayMax = DefaultInhibitDelayMax
	}
	return &Logind{conf: newLogindState(opts), inhibitors: make(map[*inhibitor]struct{})}
}

// Names: org.freedesktop.login1 and its objects, and
// org.freedesktop.systemd1 where no system bus has it.
func (l *Logind) Names() service.Names {
	return service.Names{Own: []string{BusName}, Shared: []string{systemdName}, Path: ObjectPath}
}

// Attach is called by the bus once, before any call.
func (l *Logind) Attach(h service.Host) { l.host = h }

// Serve answers a call for logind (the kubelet's sequence) or for systemd
// (KillUnit of logind), and leaves to the system bus, where there is one,
// every other call for systemd.
func (l *Logind) Serve(in *service.Call) bool {
	switch {
	case in.Dest == systemdName:
		return l.systemdMethod(in, in.Upstream)
	case in.Path == string(systemdPath):
		// logind's unique name owns systemd's name too.
		return l.systemdMethod(in, false)
	}
	l.managerMethod(in)
	return true
}

// PrepareForShutdown emits logind's PrepareForShutdown(true) to every
// connection with a match rule for it, and returns a channel that is closed
// once every delay inhibitor is released: at once when none is held.
//
// From the first call on, Inhibit is refused with
// org.freedesktop.login1.OperationInProgress, as logind refuses a delay
// lock for an operation already under way: a lock taken now would promise a
// delay that the shutdown in progress does not give, and a client that kept
// taking new ones could hold the channel open for ever. So the channel
// waits for exactly the inhibitors held at the first call.
//
// Later calls emit nothing and return the same channel. The caller bounds
// its wait itself, with InhibitDelayMax as logind does; the bus's Close
// releases every inhibitor, so the channel is closed after it too.
func (l *Logind) PrepareForShutdown() <-chan struct{} {
	l.mu.Lock()
	if l.drained != nil {
		ch := l.drained
		l.mu.Unlock()
		return ch
	}
	l.drained = make(chan struct{})
	l.preparedAt = l.host.Now()
	held := len(l.inhibitors)
	if held == 0 {
		close(l.drained)
		l.drainedClosed = true
	}
	ch := l.drained
	l.mu.Unlock()
	sent := l.host.Emit(ObjectPath, ManagerIface, "PrepareForShutdown", true)
	klog.InfoS("Sent PrepareForShutdown(true) on the D-Bus socket", "connections", sent, "delayInhibitors", held)
	return ch
}

// CancelShutdown emits PrepareForShutdown(false), as logind does when the
// shutdown it announced is called off (here: the host's shutdown was
// cancelled), and makes logind as it was before PrepareForShutdown: Inhibit
// takes locks again (the kubelet takes a new one on false, and admits pods
// again), and the next PrepareForShutdown announces a new shutdown and
// returns a new channel. The channel of the cancelled one is left as it is.
// It does nothing when no shutdown was announced.
func (l *Logind) CancelShutdown() {
	l.mu.Lock()
	if l.drained == nil {
		l.mu.Unlock()
		return
	}
	l.drained, l.drainedClosed, l.preparedAt = nil, false, time.Time{}
	held := len(l.inhibitors)
	l.mu.Unlock()
	sent := l.host.Emit(ObjectPath, ManagerIface, "PrepareForShutdown", false)
	klog.InfoS("Sent PrepareForShutdown(false) on the D-Bus socket: the shutdown is called off", "connections", sent, "delayInhibitors", held)
}

// Status is logind's part of the bus's status line: each inhibitor held
// (who, why, pid, for how long), and whether PrepareForShutdown was sent.
func (l *Logind) Status() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.host.Now()
	var s strings.Builder
	fmt.Fprintf(&s, "inhibitors=%d", len(l.inhibitors))
	for _, in := range l.held() {
		fmt.Fprintf(&s, " [who=%q why=%q mode=delay pid=%d held=%s]", in.who, in.why, in.pid, now.Sub(in.since).Round(time.Second))
	}
	if l.drained == nil {
		s.WriteString(" prepareForShutdown=not-sent")
	} else {
		fmt.Fprintf(&s, " prepareForShutdown=sent-%s-ago", now.Sub(l.preparedAt).Round(time.Millisecond))
	}
	return s.String()
}

// held is the inhibitors in the order they were taken. l.mu is held.
func (l *Logind) held() []*inhibitor {
	held := make([]*inhibitor, 0, len(l.inhibitors))
	for in := range l.inhibitors {
		held = append(held, in)
	}
	slices.SortFunc(held, func(x, y *inhibitor) int { return cmp.Compare(x.id, y.id) })
	return held
}

// Close releases every inhibitor; the bus's Close calls it, and waits for
// their watchers.
func (l *Logind) Close() {
	l.mu.Lock()
	l.closed = true
	held := l.held()
	l.mu.Unlock()
	for _, in := range held {
		in.r.Close()
	}
}

// managerMethod answers what the kubelet asks of logind's manager object:
// the property InhibitDelayMaxUSec and Inhibit; and ListInhibitors. A call
// without an interface is matched by its member alone, as the
// specification allows.
func (l *Logind) managerMethod(in *service.Call) {
	if in.Standard(in.Owner, logindObjects) {
		return
	}
	if in.Path != string(ObjectPath) {
		in.Fail(in.Owner, in.UnknownObject())
		return
	}
	switch {
	case in.Iface == service.PropertiesIface || in.Iface == "" && in.Member == "Get":
		l.properties(in)
	case in.Member == "Inhibit" && (in.Iface == ManagerIface || in.Iface == ""):
		l.inhibitCall(in)
	case in.Member == "ListInhibitors" && (in.Iface == ManagerIface || in.Iface == ""):
		if e := in.WantSignature(""); e != nil {
			in.Fail(in.Owner, e)
			return
		}
		in.Reply(in.Owner, l.listInhibitors())
	default:
		in.Fail(in.Owner, in.UnknownMethod())
	}
}

// properties answers Get, GetAll and Set of the manager's one property,
// InhibitDelayMaxUSec (read-only).
func (l *Logind) properties(in *service.Call) {
	sigs := map[string]string{"Get": "ss", "GetAll": "s", "Set": "ssv"}
	sig, ok := sigs[in.Member]
	if !ok {
		in.Fail(in.Owner, in.UnknownMethod())
		return
	}
	if e := in.WantSignature(sig); e != nil {
		in.Fail(in.Owner, e)
		return
	}
	iface, _ := in.Msg.Body[0].(string)
	prop := ""
	if in.Member != "GetAll" {
		prop, _ = in.Msg.Body[1].(string)
	}
	delay := dbus.MakeVariant(uint64(l.InhibitDelayMax().Microseconds()))
	switch {
	case in.Member == "Set":
		in.Fail(in.Owner, &service.Error{Name: service.PropertyReadOnly, Text: fmt.Sprintf("Property '%s' is not writable.", prop)})
	case in.Member == "GetAll" && (iface == service.PropertiesIface || iface == service.IntrospectableIface || iface == service.PeerIface):
		in.Reply(in.Owner, map[string]dbus.Variant{})
	case iface != ManagerIface && iface != "":
		in.Fail(in.Owner, &service.Error{Name: service.UnknownInterface, Text: fmt.Sprintf("Unknown interface '%s'.", iface)})
	case in.Member == "GetAll":
		in.Reply(in.Owner, map[string]dbus.Variant{"InhibitDelayMaxUSec": delay})
	case prop != "InhibitDelayMaxUSec":
		in.Fail(in.Owner, &service.Error{Name: service.UnknownProperty, Text: fmt.Sprintf("Unknown property '%s': this logind offers only InhibitDelayMaxUSec.", prop)})
	default:
		in.Reply(in.Owner, delay)
	}
}

// inhibitCall answers Inhibit(what, who, why, mode) with the write end of a
// pipe that holds a shutdown delay lock while it is open.
func (l *Logind) inhibitCall(in *service.Call) {
	if e := in.WantSignature("ssss"); e != nil {
		in.Fail(in.Owner, e)
		return
	}
	args := make([]string, 4)
	for i := range args {
		args[i], _ = in.Msg.Body[i].(string)
	}
	what, who, why, mode := args[0], args[1], args[2], args[3]
	if e := checkInhibit(what, mode); e != nil {
		in.Fail(in.Owner, e)
		return
	}
	if !in.UnixFD {
		in.Fail(in.Owner, &service.Error{Name: service.NotSupported, Text: "Inhibit returns a file descriptor, and this connection did not negotiate unix fd passing"})
		return
	}
	fd, e := l.inhibit(in.Caller, who, why)
	if e != nil {
		in.Fail(in.Owner, e)
		return
	}
	in.Reply(in.Owner, dbus.UnixFD(fd))
}

// inhibitWhat is every lock type logind knows, for telling a request this
// bus does not serve from one that no logind would.
var inhibitWhat = map[string]bool{
	"shutdown": true, "sleep": true, "idle": true, "handle-power-key": true, "handle-suspend-key": true,
	"handle-hibernate-key": true, "handle-lid-switch": true, "handle-reboot-key": true,
}

// checkInhibit accepts what the kubelet asks for, what="shutdown" and
// mode="delay", and nothing else: nodeinit delays only its own shutdown,
// and never blocks it.
func checkInhibit(what, mode string) *service.Error {
	for _, w := range strings.Split(what, ":") {
		if !inhibitWhat[w] {
			return &service.Error{Name: service.InvalidArgs, Text: fmt.Sprintf("Invalid what specification %q", what)}
		}
		if w != "shutdown" {
			return &service.Error{Name: service.NotSupported, Text: fmt.Sprintf("This logind offers only shutdown inhibitors, not %q", w)}
		}
	}
	switch mode {
	case "delay":
		return nil
	case "block", "block-weak":
		return &service.Error{Name: service.NotSupported, Text: fmt.Sprintf("This logind offers only delay inhibitors, not %q", mode)}
	}
	return &service.Error{Name: service.InvalidArgs, Text: fmt.Sprintf("Unknown mode %q", mode)}
}

// logindObjects is the introspection data of logind's objects: its manager
// and the path down to it.
var logindObjects = map[string]string{
	"/":                       service.ObjectXML("", "org"),
	"/org":                    service.ObjectXML("", "freedesktop"),
	"/org/freedesktop":        service.ObjectXML("", "login1"),
	"/org/freedesktop/login1": service.ObjectXML(service.PropertiesXML + managerXML),
}

const managerXML = ` <interface name="org.freedesktop.login1.Manager">
  <property name="InhibitDelayMaxUSec" type="t" access="read"/>
  <method name="Inhibit">
   <arg type="s" name="what" direction="in"/>
   <arg type="s" name="who" direction="in"/>
   <arg type="s" name="why" direction="in"/>
   <arg type="s" name="mode" direction="in"/>
   <arg type="h" name="pipe_fd" direction="out"/>
  </method>
  <method name="ListInhibitors">
   <arg type="a(ssssuu)" name="inhibitors" direction="out"/>
  </method>
  <signal name="PrepareForShutdown">
   <arg type="b" name="start"/>
  </signal>
 </interface>
`
