package bus

import (
	"fmt"
	"strings"

	"github.com/godbus/dbus/v5"
	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/bus/internal/wire"
	"github.com/nodeinit/nodeinit/bus/service"
	"github.com/nodeinit/nodeinit/bus/upstream"
	"github.com/nodeinit/nodeinit/internal/clientlog"
)

// D-Bus error names the bus itself answers with (a service's are in
// package service).
const (
	errServiceUnknown    = "org.freedesktop.DBus.Error.ServiceUnknown"
	errMatchRuleInvalid  = "org.freedesktop.DBus.Error.MatchRuleInvalid"
	errMatchRuleNotFound = "org.freedesktop.DBus.Error.MatchRuleNotFound"
	errAccessDenied      = "org.freedesktop.DBus.Error.AccessDenied"
)

// call is one incoming message and the header fields it is routed by.
type call struct {
	service.Call
	// raw is the message as the client sent it, which goes on to the
	// system bus as it is.
	raw []byte
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
		Call: service.Call{
			Msg:    m,
			Dest:   wire.Header(m, dbus.FieldDestination),
			Path:   wire.Header(m, dbus.FieldPath),
			Iface:  wire.Header(m, dbus.FieldInterface),
			Member: wire.Header(m, dbus.FieldMember),
			Sig:    wire.Header(m, dbus.FieldSignature),
			Caller: c.cred,
			UnixFD: c.unixFD,
			Answer: c,
		},
		raw: raw,
		fds: fds,
	}
	defer func() { wire.CloseFDs(in.fds) }()
	if c.name == "" {
		// The specification: a connection's first message is Hello, or
		// the bus disconnects it.
		if m.Type != dbus.TypeMethodCall || in.Dest != service.BusName || in.Member != "Hello" || (in.Iface != "" && in.Iface != service.BusName) {
			return fmt.Errorf("%w: %s %s.%s to %q before Hello", wire.ErrProtocol, m.Type, clientlog.Clip(in.Iface), clientlog.Clip(in.Member), clientlog.Clip(in.Dest))
		}
		c.hello(in)
		return nil
	}
	if m.Type != dbus.TypeMethodCall {
		// Replies and errors answer nothing this bus asked, and a signal
		// from a client has nobody here to go to: they are for the system
		// bus, where there is one.
		if c.passesThrough() && c.forward(in, upstream.Plain) {
			return nil
		}
		klog.V(2).InfoS("Ignored a D-Bus message", "pid", c.cred.Pid, "type", m.Type.String(), "interface", clientlog.Clip(in.Iface), "member", clientlog.Clip(in.Member))
		return nil
	}
	if in.Dest == service.BusName {
		c.busMethod(in)
		return nil
	}
	in.Upstream = c.passesThrough()
	if s := c.bus.serviceOf(in.Dest); s != nil {
		in.Owner = s.owner
		if !s.Serve(&in.Call) {
			c.forwardOrFail(in)
		}
		return nil
	}
	// The system bus's, where there is one; else what a bus answers for a
	// name nobody owns and nothing can start. This bus does not route
	// between its own clients, and a unique name with its prefix is never
	// one of the system bus's.
	if strings.HasPrefix(in.Dest, localPrefix) {
		in.Fail(service.BusName, &service.Error{Name: errServiceUnknown, Text: fmt.Sprintf("The name %s was not provided by any .service files", in.Dest)})
	} else {
		c.forwardOrFail(in)
	}
	return nil
}

// Reply answers in with body, unless the caller asked for no reply. Any
// UnixFD in body is the bus's own descriptor: it is sent and then closed
// here, or closed at once when no reply goes out.
func (c *conn) Reply(in *service.Call, sender string, body ...any) {
	var fds []int
	for _, v := range body {
		if fd, ok := v.(dbus.UnixFD); ok {
			fds = append(fds, int(fd))
		}
	}
	if in.Msg.Flags&dbus.FlagNoReplyExpected != 0 {
		wire.CloseFDs(fds)
		return
	}
	c.send(wire.WithBody(wire.NewReply(in.Msg, sender, c.name), body...), fds...)
}

// Fail answers in with a D-Bus error, and logs it: whatever a client asks
// beyond what the kubelet needs shows in nodeinit's log, the first of its
// kind at Info, the rest at V(2) and counted (clientlog). What the client
// chose is clipped in both.
func (c *conn) Fail(in *service.Call, sender string, e *service.Error) {
	text := clientlog.ClipTo(e.Text, clientlog.MaxErrorText)
	c.bus.log.Info("Answered a D-Bus call with an error", "pid", c.cred.Pid, "name", c.name,
		"destination", clientlog.Clip(in.Dest), "path", clientlog.Clip(in.Path), "interface", clientlog.Clip(in.Iface), "member", clientlog.Clip(in.Member),
		"signature", clientlog.Clip(in.Sig), "error", e.Name, "message", text)
	if in.Msg.Flags&dbus.FlagNoReplyExpected != 0 {
		return
	}
	c.send(wire.NewError(in.Msg, sender, c.name, e.Name, text))
}
