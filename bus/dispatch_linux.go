package bus

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/godbus/dbus/v5"
	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/internal/clientlog"
)

// The names this bus answers for.
const (
	busName         = "org.freedesktop.DBus"
	busPath         = dbus.ObjectPath("/org/freedesktop/DBus")
	logindName      = "org.freedesktop.login1"
	logindPath      = dbus.ObjectPath("/org/freedesktop/login1")
	managerIface    = "org.freedesktop.login1.Manager"
	propertiesIface = "org.freedesktop.DBus.Properties"
)

// D-Bus error names: the standard ones, and logind's for a delay lock taken
// while the shutdown it would delay is already under way.
const (
	errFailed              = "org.freedesktop.DBus.Error.Failed"
	errUnknownMethod       = "org.freedesktop.DBus.Error.UnknownMethod"
	errUnknownObject       = "org.freedesktop.DBus.Error.UnknownObject"
	errUnknownInterface    = "org.freedesktop.DBus.Error.UnknownInterface"
	errUnknownProperty     = "org.freedesktop.DBus.Error.UnknownProperty"
	errInvalidArgs         = "org.freedesktop.DBus.Error.InvalidArgs"
	errServiceUnknown      = "org.freedesktop.DBus.Error.ServiceUnknown"
	errNotSupported        = "org.freedesktop.DBus.Error.NotSupported"
	errLimitsExceeded      = "org.freedesktop.DBus.Error.LimitsExceeded"
	errMatchRuleInvalid    = "org.freedesktop.DBus.Error.MatchRuleInvalid"
	errMatchRuleNotFound   = "org.freedesktop.DBus.Error.MatchRuleNotFound"
	errOperationInProgress = "org.freedesktop.login1.OperationInProgress"
)

// callError is a D-Bus error to answer a call with.
type callError struct{ name, text string }

// call is one incoming method call and the header fields it is routed by.
type call struct {
	msg *dbus.Message
	// raw is the message as the client sent it, which goes on to the
	// system bus as it is.
	raw                            []byte
	dest, path, iface, member, sig string
	// fds are the descriptors the message carried: closed once it is
	// answered, unless it went on to the system bus with them.
	fds []int
}

// handle answers one message from the peer, m decoded from raw. An error
// ends the connection.
func (c *conn) handle(m *dbus.Message, raw []byte) error {
	fds, err := c.takeFDs(m)
	if err != nil {
		return err
	}
	in := &call{
		msg:    m,
		raw:    raw,
		fds:    fds,
		dest:   header(m, dbus.FieldDestination),
		path:   header(m, dbus.FieldPath),
		iface:  header(m, dbus.FieldInterface),
		member: header(m, dbus.FieldMember),
		sig:    header(m, dbus.FieldSignature),
	}
	defer func() { closeFDs(in.fds) }()
	if c.name == "" {
		// The specification: a connection's first message is Hello, or
		// the bus disconnects it.
		if m.Type != dbus.TypeMethodCall || in.dest != busName || in.member != "Hello" || (in.iface != "" && in.iface != busName) {
			return fmt.Errorf("%w: %s %s.%s to %q before Hello", errProtocol, m.Type, clientlog.Clip(in.iface), clientlog.Clip(in.member), clientlog.Clip(in.dest))
		}
		c.hello(in)
		return nil
	}
	if m.Type != dbus.TypeMethodCall {
		// Replies and errors answer nothing this bus asked, and a signal
		// from a client has nobody here to go to: they are for the system
		// bus, where there is one.
		if c.passesThrough() && c.forward(in, plainReply) {
			return nil
		}
		klog.V(2).InfoS("Ignored a D-Bus message", "pid", c.cred.Pid, "type", m.Type.String(), "interface", clientlog.Clip(in.iface), "member", clientlog.Clip(in.member))
		return nil
	}
	switch in.dest {
	case busName:
		c.busMethod(in)
	case logindName, logindOwner:
		if in.path == string(systemdPath) {
			// logind's unique name owns systemd's name too.
			c.systemdMethod(in, false)
		} else {
			c.logindMethod(in)
		}
	case systemdName:
		if !c.systemdMethod(in, c.passesThrough()) {
			c.forwardOrFail(in)
		}
	default:
		// The system bus's, where there is one; else what a bus answers
		// for a name nobody owns and nothing can start. This bus does not
		// route between its own clients, and a unique name with its
		// prefix is never one of the system bus's.
		if strings.HasPrefix(in.dest, localPrefix) {
			c.fail(in, busName, &callError{errServiceUnknown, fmt.Sprintf("The name %s was not provided by any .service files", in.dest)})
		} else {
			c.forwardOrFail(in)
		}
	}
	return nil
}

// hello gives the connection its unique name, answers with it, and sends
// NameAcquired for it, in that order, as dbus-daemon does.
func (c *conn) hello(in *call) {
	name := localPrefix + strconv.FormatUint(c.id, 10)
	c.mu.Lock()
	c.name = name
	c.mu.Unlock()
	c.reply(in, busName, name)
	acquired := newSignal(busName, busPath, busName, "NameAcquired", name)
	acquired.Headers[dbus.FieldDestination] = dbus.MakeVariant(name)
	c.send(acquired)
}

// busMethod answers the bus's own interface: Hello, AddMatch, RemoveMatch.
// A client of this bus needs no other; the rest is answered UnknownMethod.
func (c *conn) busMethod(in *call) {
	if c.commonMethod(in, busName, busIntro) {
		return
	}
	if in.iface != "" && in.iface != busName {
		c.fail(in, busName, unknownMethod(in))
		return
	}
	switch in.member {
	case "Hello":
		c.fail(in, busName, &callError{errFailed, "Already handled an Hello message"})
	case "AddMatch", "RemoveMatch":
		if e := wantSignature(in, "s"); e != nil {
			c.fail(in, busName, e)
			return
		}
		text, _ := in.msg.Body[0].(string)
		rule, err := parseMatchRule(text)
		if err != nil {
			c.fail(in, busName, &callError{errMatchRuleInvalid, "Invalid match rule: " + err.Error()})
			return
		}
		// A rule the system bus should hold too is answered by it, once
		// it holds there; the others here.
		up := c.matchGoesUp(in, rule)
		ok := false
		if in.member == "AddMatch" {
			ok = c.addMatch(in, rule, !up)
		} else {
			ok = c.removeMatch(in, rule, !up)
		}
		if ok && up && !c.forward(in, plainReply) {
			c.reply(in, busName)
		}
	default:
		if !c.nameMethod(in) && !c.connectionMethod(in, c.passesThrough()) &&
			!(upstreamBusMethods[in.member] && c.passesThrough() && c.forward(in, plainReply)) {
			c.fail(in, busName, unknownMethod(in))
		}
	}
}

// addMatch adds rule, and answers the call when reply is set.
func (c *conn) addMatch(in *call, rule matchRule, reply bool) bool {
	c.mu.Lock()
	full := len(c.rules) >= maxRules
	if !full {
		c.rules = append(c.rules, rule)
	}
	c.mu.Unlock()
	if full {
		c.fail(in, busName, &callError{errLimitsExceeded, fmt.Sprintf("Connection has %d match rules, the most it may have", maxRules)})
		return false
	}
	if reply {
		c.reply(in, busName)
	}
	return true
}

// removeMatch removes rule, and answers the call when reply is set or the
// rule is not there.
func (c *conn) removeMatch(in *call, rule matchRule, reply bool) bool {
	c.mu.Lock()
	found := false
	for i, r := range c.rules {
		if r.equal(rule) {
			c.rules = append(c.rules[:i], c.rules[i+1:]...)
			found = true
			break
		}
	}
	c.mu.Unlock()
	if !found {
		c.fail(in, busName, &callError{errMatchRuleNotFound, "The given match rule wasn't found and can't be removed"})
		return false
	}
	if reply {
		c.reply(in, busName)
	}
	return true
}

// logindMethod answers what the kubelet asks of logind's manager object:
// the property InhibitDelayMaxUSec and Inhibit. A call without an
// interface is matched by its member alone, as the specification allows.
func (c *conn) logindMethod(in *call) {
	if c.commonMethod(in, logindOwner, logindIntro) || c.logindProperties(in) {
		return
	}
	if in.path != string(logindPath) {
		c.fail(in, logindOwner, &callError{errUnknownObject, fmt.Sprintf("Unknown object '%s'.", in.path)})
		return
	}
	switch {
	case in.member == "Get" && (in.iface == propertiesIface || in.iface == ""):
		c.getProperty(in)
	case in.member == "Inhibit" && (in.iface == managerIface || in.iface == ""):
		c.inhibit(in)
	case in.member == "ListInhibitors" && (in.iface == managerIface || in.iface == ""):
		if e := wantSignature(in, ""); e != nil {
			c.fail(in, logindOwner, e)
			return
		}
		c.reply(in, logindOwner, c.bus.listInhibitors())
	default:
		c.fail(in, logindOwner, unknownMethod(in))
	}
}

func (c *conn) getProperty(in *call) {
	if e := wantSignature(in, "ss"); e != nil {
		c.fail(in, logindOwner, e)
		return
	}
	iface, _ := in.msg.Body[0].(string)
	prop, _ := in.msg.Body[1].(string)
	switch {
	case iface != managerIface && iface != "":
		c.fail(in, logindOwner, &callError{errUnknownInterface, fmt.Sprintf("Unknown interface '%s'.", iface)})
	case prop != "InhibitDelayMaxUSec":
		c.fail(in, logindOwner, &callError{errUnknownProperty, fmt.Sprintf("Unknown property '%s': this logind offers only InhibitDelayMaxUSec.", prop)})
	default:
		usec := uint64(c.bus.InhibitDelayMax().Microseconds())
		c.reply(in, logindOwner, dbus.MakeVariant(usec))
	}
}

// inhibit answers Inhibit(what, who, why, mode) with the write end of a
// pipe that holds a shutdown delay lock while it is open.
func (c *conn) inhibit(in *call) {
	if e := wantSignature(in, "ssss"); e != nil {
		c.fail(in, logindOwner, e)
		return
	}
	args := make([]string, 4)
	for i := range args {
		args[i], _ = in.msg.Body[i].(string)
	}
	what, who, why, mode := args[0], args[1], args[2], args[3]
	if e := checkInhibit(what, mode); e != nil {
		c.fail(in, logindOwner, e)
		return
	}
	if !c.unixFD {
		c.fail(in, logindOwner, &callError{errNotSupported, "Inhibit returns a file descriptor, and this connection did not negotiate unix fd passing"})
		return
	}
	fd, e := c.bus.inhibit(c.cred, who, why)
	if e != nil {
		c.fail(in, logindOwner, e)
		return
	}
	c.reply(in, logindOwner, dbus.UnixFD(fd))
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
func checkInhibit(what, mode string) *callError {
	for _, w := range strings.Split(what, ":") {
		if !inhibitWhat[w] {
			return &callError{errInvalidArgs, fmt.Sprintf("Invalid what specification %q", what)}
		}
		if w != "shutdown" {
			return &callError{errNotSupported, fmt.Sprintf("This logind offers only shutdown inhibitors, not %q", w)}
		}
	}
	switch mode {
	case "delay":
		return nil
	case "block", "block-weak":
		return &callError{errNotSupported, fmt.Sprintf("This logind offers only delay inhibitors, not %q", mode)}
	}
	return &callError{errInvalidArgs, fmt.Sprintf("Unknown mode %q", mode)}
}

// wantSignature checks the call's arguments against the method's.
func wantSignature(in *call, sig string) *callError {
	if in.sig == sig {
		return nil
	}
	return &callError{errInvalidArgs, fmt.Sprintf("Invalid arguments '%s' to call %s.%s(), expecting '%s'.", in.sig, in.iface, in.member, sig)}
}

func unknownMethod(in *call) *callError {
	return &callError{errUnknownMethod, fmt.Sprintf("Unknown method %s or interface %s.", in.member, in.iface)}
}

// reply answers in with body, unless the caller asked for no reply. Any
// UnixFD in body is the bus's own descriptor: it is sent and then closed
// here, or closed at once when no reply goes out.
func (c *conn) reply(in *call, sender string, body ...any) {
	var fds []int
	for _, v := range body {
		if fd, ok := v.(dbus.UnixFD); ok {
			fds = append(fds, int(fd))
		}
	}
	if in.msg.Flags&dbus.FlagNoReplyExpected != 0 {
		closeFDs(fds)
		return
	}
	c.send(withBody(newReply(in.msg, sender, c.name), body...), fds...)
}

// fail answers in with a D-Bus error, and logs it: whatever a client asks
// beyond what the kubelet needs shows in nodeinit's log, the first of its
// kind at Info, the rest at V(2) and counted (clientlog.Log). What the client
// chose is clipped in both.
func (c *conn) fail(in *call, sender string, e *callError) {
	text := clientlog.ClipTo(e.text, clientlog.MaxErrorText)
	c.bus.log.Info("Answered a D-Bus call with an error", "pid", c.cred.Pid, "name", c.name,
		"destination", clientlog.Clip(in.dest), "path", clientlog.Clip(in.path), "interface", clientlog.Clip(in.iface), "member", clientlog.Clip(in.member),
		"signature", clientlog.Clip(in.sig), "error", e.name, "message", text)
	if in.msg.Flags&dbus.FlagNoReplyExpected != 0 {
		return
	}
	c.send(newError(in.msg, sender, c.name, e.name, text))
}
