// Package service is what a service that nodeinit serves on its own bus
// sees of the bus, and all the bus knows of a service: the names and
// objects it owns (Names), the calls it answers (Call) with a reply or a
// D-Bus error (Error), and the bus it emits signals on (Host). The broker
// (package bus) routes a call for one of a service's names to its Serve;
// what no service answers goes on to the system bus behind, where there
// is one. nodeinit's one service is logind (package logind).
//
// It also names what every bus has, for all that speaks D-Bus in nodeinit
// (the broker, its pass-through, logind, and package hostlogind on the
// host's bus): the bus's own name and object (BusName, BusPath), the
// interfaces every object has, and the standard errors.
package service

import (
	"fmt"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/internal/clientlog"
)

// A Service is a program on the bus that nodeinit is itself. It has a
// unique name of its own (":nodeinit.0" for the first), which owns its
// well-known names and sends its replies and signals.
type Service interface {
	// Names are the names and objects it owns; the bus asks once.
	Names() Names
	// Attach gives the service the bus it serves on, before any call.
	Attach(Host)
	// Serve answers a call to one of its names or to its unique name.
	// It reports false for a call to a Shared name that it leaves to the
	// system bus behind this one (only when call.Upstream).
	Serve(call *Call) bool
	// Status is its part of the bus's one-line status report.
	Status() string
	// Close releases what it holds; the bus's Close calls it.
	Close()
}

// Names is what a service owns on the bus.
type Names struct {
	// Own are the well-known names it owns, whether or not a system bus
	// is behind this one: their signals, and match rules that can only
	// match them, stay on this bus.
	Own []string
	// Shared are names it owns only where no system bus is behind this
	// one. Where one is, every call for them still comes to Serve first,
	// and what Serve leaves goes on there.
	Shared []string
	// Path is the root of its objects: signals from below it stay on
	// this bus, and a match rule for them opens no pass-through.
	Path dbus.ObjectPath
}

// Host is the bus a service serves on.
type Host interface {
	// Emit broadcasts a signal from the service to every connection with
	// a match rule for it, and reports to how many it went.
	Emit(path dbus.ObjectPath, iface, member string, body ...any) int
	// Executor is the pid of the process whose tree may use the bus; 0
	// before it is known.
	Executor() int
	// Log bounds what clients make the service log.
	Log() *clientlog.Log
	// Now is the bus's clock.
	Now() time.Time
	// Go runs f on a goroutine of the bus, which the bus's Close waits
	// for (a bounded wait).
	Go(f func())
}

// Call is one method call for a service, and the header fields it is
// routed by.
type Call struct {
	Msg                            *dbus.Message
	Dest, Path, Iface, Member, Sig string
	// Owner is the service's unique name: the sender of its replies.
	Owner string
	// Caller is the peer that sent the call, as the kernel reported it
	// at accept (SO_PEERCRED).
	Caller unix.Ucred
	// UnixFD: the caller agreed to unix fd passing.
	UnixFD bool
	// Upstream: a system bus is behind this one for this caller.
	Upstream bool
	// Answer sends the answers; the bus sets it.
	Answer Answerer
}

// Answerer sends a call's answers to its caller.
type Answerer interface {
	// Reply answers with body, from sender. A dbus.UnixFD in body is the
	// service's descriptor, which Reply sends and then closes.
	Reply(call *Call, sender string, body ...any)
	// Fail answers with a D-Bus error, from sender, and logs it.
	Fail(call *Call, sender string, e *Error)
	// Standard answers what every object answers, Peer and
	// Introspectable, from sender, with the introspection data of the
	// service's objects by path. It reports false for another call.
	Standard(call *Call, sender string, objects map[string]string) bool
}

// Reply answers the call from sender.
func (c *Call) Reply(sender string, body ...any) { c.Answer.Reply(c, sender, body...) }

// Fail answers the call with e, from sender.
func (c *Call) Fail(sender string, e *Error) { c.Answer.Fail(c, sender, e) }

// Standard answers Peer and Introspectable (see Answerer).
func (c *Call) Standard(sender string, objects map[string]string) bool {
	return c.Answer.Standard(c, sender, objects)
}

// WantSignature checks the call's arguments against the method's: nil
// when they fit, else the error to answer.
func (c *Call) WantSignature(sig string) *Error {
	if c.Sig == sig {
		return nil
	}
	return &Error{InvalidArgs, fmt.Sprintf("Invalid arguments '%s' to call %s.%s(), expecting '%s'.", c.Sig, c.Iface, c.Member, sig)}
}

// UnknownMethod is the error for a method the object does not have.
func (c *Call) UnknownMethod() *Error {
	return &Error{UnknownMethod, fmt.Sprintf("Unknown method %s or interface %s.", c.Member, c.Iface)}
}

// UnknownObject is the error for a path where the service has no object.
func (c *Call) UnknownObject() *Error {
	return &Error{UnknownObject, fmt.Sprintf("Unknown object '%s'.", c.Path)}
}

// Error is a D-Bus error to answer a call with: its name and a
// human-readable text.
type Error struct{ Name, Text string }

// The bus's own name and object, on every bus: org.freedesktop.DBus
// answers Hello, the questions about names and the match rules.
const (
	BusName = "org.freedesktop.DBus"
	BusPath = dbus.ObjectPath("/org/freedesktop/DBus")
)

// The D-Bus errors a bus and sd-bus's services answer with.
const (
	Failed           = "org.freedesktop.DBus.Error.Failed"
	UnknownMethod    = "org.freedesktop.DBus.Error.UnknownMethod"
	UnknownObject    = "org.freedesktop.DBus.Error.UnknownObject"
	UnknownInterface = "org.freedesktop.DBus.Error.UnknownInterface"
	UnknownProperty  = "org.freedesktop.DBus.Error.UnknownProperty"
	PropertyReadOnly = "org.freedesktop.DBus.Error.PropertyReadOnly"
	InvalidArgs      = "org.freedesktop.DBus.Error.InvalidArgs"
	NotSupported     = "org.freedesktop.DBus.Error.NotSupported"
	LimitsExceeded   = "org.freedesktop.DBus.Error.LimitsExceeded"
	NameHasNoOwner   = "org.freedesktop.DBus.Error.NameHasNoOwner"
)

// The interfaces every object has, Peer and Introspectable (which the bus
// answers for a service: Call.Standard), and Properties.
const (
	PeerIface           = "org.freedesktop.DBus.Peer"
	IntrospectableIface = "org.freedesktop.DBus.Introspectable"
	PropertiesIface     = "org.freedesktop.DBus.Properties"
)

// ObjectXML is the introspection data of an object, as sd-bus and
// dbus-daemon give it: the interfaces every object has (Peer,
// Introspectable), then interfaces (XML <interface> elements), then a
// <node> for each child.
func ObjectXML(interfaces string, children ...string) string {
	var s strings.Builder
	s.WriteString(introHeader + "<node>\n" + introCommon + interfaces)
	for _, ch := range children {
		fmt.Fprintf(&s, " <node name=%q/>\n", ch)
	}
	s.WriteString("</node>\n")
	return s.String()
}

const (
	introHeader = `<!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">
`
	introCommon = ` <interface name="org.freedesktop.DBus.Peer">
  <method name="Ping"/>
  <method name="GetMachineId">
   <arg type="s" name="machine_uuid" direction="out"/>
  </method>
 </interface>
 <interface name="org.freedesktop.DBus.Introspectable">
  <method name="Introspect">
   <arg name="xml_data" type="s" direction="out"/>
  </method>
 </interface>
`
)

// PropertiesXML is the Properties interface, for ObjectXML.
const PropertiesXML = ` <interface name="org.freedesktop.DBus.Properties">
  <method name="Get">
   <arg name="interface_name" direction="in" type="s"/>
   <arg name="property_name" direction="in" type="s"/>
   <arg name="value" direction="out" type="v"/>
  </method>
  <method name="GetAll">
   <arg name="interface_name" direction="in" type="s"/>
   <arg name="props" direction="out" type="a{sv}"/>
  </method>
  <method name="Set">
   <arg name="interface_name" direction="in" type="s"/>
   <arg name="property_name" direction="in" type="s"/>
   <arg name="value" direction="in" type="v"/>
  </method>
  <signal name="PropertiesChanged">
   <arg type="s" name="interface_name"/>
   <arg type="a{sv}" name="changed_properties"/>
   <arg type="as" name="invalidated_properties"/>
  </signal>
 </interface>
`
