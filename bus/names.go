package bus

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/godbus/dbus/v5"

	"github.com/nodeinit/nodeinit/identity"
	"github.com/nodeinit/nodeinit/internal/linux"
)

// The bus's basics that ordinary clients call before anything else:
// python-dbus's get_object binds a proxy to the unique name GetNameOwner
// gives, GIO's proxies read every property with GetAll and drop a signal
// whose sender is not that unique name, and both introspect.

// localPrefix begins every unique name of this bus. dbus-daemon and
// dbus-broker name their connections ":1.N" (digits alone), and a
// unique name's elements may hold letters, so a name of this bus can
// never be one of the system bus behind it: a destination with this
// prefix is routed here, any other unique name goes up.
const localPrefix = ":nodeinit."

// logindOwner is the unique name that owns org.freedesktop.login1 (and
// org.freedesktop.systemd1 where no upstream bus has it): logind's own
// connection to the bus, as on a machine. Connections get
// ":nodeinit.1" on.
const logindOwner = localPrefix + "0"

// maxMachineIDFile bounds the machine-id file: 32 hex digits and a
// newline, with room for white space around them.
const maxMachineIDFile = 64

// Interfaces every object of logind has.
const (
	introspectableIface = "org.freedesktop.DBus.Introspectable"
	peerIface           = "org.freedesktop.DBus.Peer"
)

// More D-Bus error names a bus and sd-bus give.
const (
	errNameHasNoOwner   = "org.freedesktop.DBus.Error.NameHasNoOwner"
	errAccessDenied     = "org.freedesktop.DBus.Error.AccessDenied"
	errPropertyReadOnly = "org.freedesktop.DBus.Error.PropertyReadOnly"
)

// ReleaseName's and StartServiceByName's answers.
const (
	startReplyAlreadyRunning = uint32(2)

	releaseNameNonExistent = uint32(2)
	releaseNameNotOwner    = uint32(3)
)

// localOwner is the unique name that owns name on this bus, "" if none:
// the bus itself, logind, or a connection that has said Hello.
func (b *Bus) localOwner(name string, upstream bool) string {
	switch name {
	case busName:
		return busName
	case logindName, logindOwner:
		return logindOwner
	case systemdName:
		if !upstream {
			return logindOwner
		}
		return ""
	}
	if !strings.HasPrefix(name, localPrefix) {
		return ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for c := range b.conns {
		c.mu.Lock()
		n := c.name
		c.mu.Unlock()
		if n == name {
			return n
		}
	}
	return ""
}

// localCred is the peer behind a name of this bus: nodeinit itself for
// the bus's and logind's names, a client's SO_PEERCRED for its unique
// name. ok is false for a name this bus does not have.
func (b *Bus) localCred(name string, upstream bool) (uid, pid uint32, ok bool) {
	owner := b.localOwner(name, upstream)
	switch owner {
	case "":
		return 0, 0, false
	case busName, logindOwner:
		return uint32(os.Getuid()), uint32(os.Getpid()), true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for c := range b.conns {
		c.mu.Lock()
		n := c.name
		c.mu.Unlock()
		if n == owner {
			return c.cred.Uid, uint32(c.cred.Pid), true
		}
	}
	return 0, 0, false
}

// connectionMethod answers the bus's questions about a connection of this
// bus (GetConnectionUnixUser, GetConnectionUnixProcessID,
// GetConnectionCredentials, ListQueuedOwners), and about any connection
// where there is no system bus behind this one. It reports false for
// another call, or for a name the system bus should be asked about.
func (c *conn) connectionMethod(in *call, upstream bool) bool {
	switch in.member {
	case "GetConnectionUnixUser", "GetConnectionUnixProcessID", "GetConnectionCredentials", "ListQueuedOwners":
	default:
		return false
	}
	if in.sig != "s" {
		c.fail(in, busName, wantSignature(in, "s"))
		return true
	}
	name, _ := in.msg.Body[0].(string)
	uid, pid, ok := c.bus.localCred(name, upstream)
	if !ok && upstream {
		return false
	}
	if !ok {
		c.fail(in, busName, &callError{errNameHasNoOwner, fmt.Sprintf("Could not get the owner of name '%s': no such name", name)})
		return true
	}
	switch in.member {
	case "GetConnectionUnixUser":
		c.reply(in, busName, uid)
	case "GetConnectionUnixProcessID":
		c.reply(in, busName, pid)
	case "GetConnectionCredentials":
		c.reply(in, busName, map[string]dbus.Variant{"UnixUserID": dbus.MakeVariant(uid), "ProcessID": dbus.MakeVariant(pid)})
	case "ListQueuedOwners":
		c.reply(in, busName, []string{c.bus.localOwner(name, upstream)})
	}
	return true
}

// wellKnownOwner is the unique name that sends what this bus sends under a
// well-known name, for matching a rule's sender as a bus does: a rule for
// sender='org.freedesktop.login1' matches what logind's unique name sends.
func wellKnownOwner(name string) string {
	switch name {
	case logindName, systemdName:
		return logindOwner
	case busName:
		return busName
	}
	return ""
}

// localNames are the names on this bus, as ListNames gives them.
func (b *Bus) localNames(upstream bool) []string {
	names := []string{busName, logindName}
	if !upstream {
		names = append(names, systemdName)
	}
	names = append(names, logindOwner)
	b.mu.Lock()
	var unique []string
	for c := range b.conns {
		c.mu.Lock()
		if c.name != "" {
			unique = append(unique, c.name)
		}
		c.mu.Unlock()
	}
	b.mu.Unlock()
	slices.Sort(unique)
	return append(names, unique...)
}

// nameMethod answers the bus's calls about names and itself. It reports
// false for a call that is not one of them.
func (c *conn) nameMethod(in *call) bool {
	// With a system bus to pass through to, what is about its names, and
	// the bus's own list and id, are the system bus's.
	upstream := c.passesThrough()
	if upstream {
		name := ""
		if len(in.msg.Body) > 0 {
			name, _ = in.msg.Body[0].(string)
		}
		switch in.member {
		case "GetNameOwner", "NameHasOwner", "StartServiceByName", "RequestName", "ReleaseName":
			if c.bus.localOwner(name, true) == "" && c.forward(in, plainReply) {
				return true
			}
		case "ListNames":
			if c.forward(in, listNamesReply) {
				return true
			}
		case "ListActivatableNames", "GetId":
			if c.forward(in, plainReply) {
				return true
			}
		}
		upstream = c.passesThrough()
	}
	one := func() (string, bool) {
		if e := wantSignature(in, "s"); e != nil {
			c.fail(in, busName, e)
			return "", false
		}
		s, _ := in.msg.Body[0].(string)
		return s, true
	}
	switch in.member {
	case "GetNameOwner":
		if name, ok := one(); ok {
			if owner := c.bus.localOwner(name, upstream); owner != "" {
				c.reply(in, busName, owner)
			} else {
				c.fail(in, busName, &callError{errNameHasNoOwner, fmt.Sprintf("Could not get owner of name '%s': no such name", name)})
			}
		}
	case "NameHasOwner":
		if name, ok := one(); ok {
			c.reply(in, busName, c.bus.localOwner(name, upstream) != "")
		}
	case "ListNames":
		c.reply(in, busName, c.bus.localNames(upstream))
	case "StartServiceByName":
		if e := wantSignature(in, "su"); e != nil {
			c.fail(in, busName, e)
			return true
		}
		name, _ := in.msg.Body[0].(string)
		if c.bus.localOwner(name, upstream) != "" {
			c.reply(in, busName, startReplyAlreadyRunning)
		} else {
			c.fail(in, busName, &callError{errServiceUnknown, fmt.Sprintf("The name %s was not provided by any .service files", name)})
		}
	case "ListActivatableNames":
		c.reply(in, busName, []string{busName})
	case "GetId":
		c.reply(in, busName, c.bus.guid)
	case "RequestName":
		if e := wantSignature(in, "su"); e != nil {
			c.fail(in, busName, e)
			return true
		}
		name, _ := in.msg.Body[0].(string)
		c.fail(in, busName, c.refuseName(name))
	case "ReleaseName":
		name, ok := one()
		if !ok {
			return true
		}
		if e := c.invalidName(name); e != nil {
			c.fail(in, busName, e)
		} else if c.bus.localOwner(name, upstream) != "" {
			c.reply(in, busName, releaseNameNotOwner)
		} else {
			c.reply(in, busName, releaseNameNonExistent)
		}
	default:
		return false
	}
	return true
}

// refuseName is dbus-daemon's answer on the system bus to a RequestName
// that its policy does not allow: on this bus nobody but logind owns a
// name.
func (c *conn) refuseName(name string) *callError {
	if e := c.invalidName(name); e != nil {
		return e
	}
	return &callError{errAccessDenied, fmt.Sprintf("Connection %q is not allowed to own the service %q due to security policies in the configuration file", c.name, name)}
}

// invalidName is dbus-daemon's refusal of a name no connection can ask
// for or release.
func (c *conn) invalidName(name string) *callError {
	switch {
	case strings.HasPrefix(name, ":"):
		return &callError{errInvalidArgs, fmt.Sprintf("Cannot acquire a service starting with ':' such as %q", name)}
	case name == busName:
		return &callError{errInvalidArgs, fmt.Sprintf("Connection %q is not allowed to own the service %q because it is reserved for D-Bus' use only", c.name, name)}
	case !validBusName(name):
		return &callError{errInvalidArgs, fmt.Sprintf("Requested bus name %q is not valid", strings.ToValidUTF8(name, "\uFFFD"))}
	}
	return nil
}

// validBusName checks a well-known name as the specification describes
// it: two or more dot-separated elements of [A-Za-z0-9_-], none empty or
// starting with a digit, at most 255 bytes.
func validBusName(name string) bool {
	if len(name) == 0 || len(name) > 255 {
		return false
	}
	elems := strings.Split(name, ".")
	if len(elems) < 2 {
		return false
	}
	for _, e := range elems {
		if e == "" || e[0] >= '0' && e[0] <= '9' {
			return false
		}
		for _, r := range e {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
				return false
			}
		}
	}
	return true
}

// commonMethod answers the interfaces every object has, Introspectable and
// Peer, for the service whose objects are below root and whose
// introspection data is intro. It reports false for another call.
func (c *conn) commonMethod(in *call, sender string, intro map[string]string) bool {
	switch {
	case in.iface == peerIface && in.member == "Ping":
		c.reply(in, sender)
	case in.iface == peerIface && in.member == "GetMachineId":
		id, err := machineID(c.bus.logind.root)
		if err != nil {
			c.fail(in, sender, &callError{errFailed, "Failed to read the machine ID: " + err.Error()})
		} else {
			c.reply(in, sender, id)
		}
	case in.iface == introspectableIface && in.member == "Introspect":
		xml, ok := intro[in.path]
		if !ok {
			c.fail(in, sender, &callError{errUnknownObject, fmt.Sprintf("Unknown object '%s'.", in.path)})
		} else {
			c.reply(in, sender, xml)
		}
	case in.iface == peerIface || in.iface == introspectableIface:
		c.fail(in, sender, unknownMethod(in))
	default:
		return false
	}
	return true
}

// machineID reads the machine ID as dbus-daemon does: /etc/machine-id, or
// /var/lib/dbus/machine-id, each taken only if identity.Valid holds it a
// machine-id, the rule nodeinit's identity holds /etc/machine-id to. Each is read as a regular file of at most
// maxMachineIDFile bytes, so that a FIFO or a device there cannot hold the
// client's reader; a link is followed, as one of the two is often a link
// to the other.
func machineID(root string) (string, error) {
	var last error
	for _, p := range []string{"etc/machine-id", "var/lib/dbus/machine-id"} {
		b, err := linux.ReadRegularFile(filepath.Join(root, p), maxMachineIDFile, linux.FollowLink)
		if err != nil {
			last = err
			continue
		}
		id := string(bytes.TrimSpace(b))
		if !identity.Valid(id) {
			last = fmt.Errorf("/%s does not hold a machine ID", p)
			continue
		}
		return id, nil
	}
	return "", last
}

// logindProperties answers GetAll and Set of logind's manager; Get is
// getProperty's. It reports false for another call.
func (c *conn) logindProperties(in *call) bool {
	if in.iface != propertiesIface || in.path != string(logindPath) {
		return false
	}
	switch in.member {
	case "GetAll":
		if e := wantSignature(in, "s"); e != nil {
			c.fail(in, logindOwner, e)
			return true
		}
		iface, _ := in.msg.Body[0].(string)
		props := map[string]dbus.Variant{}
		switch iface {
		case managerIface, "":
			props["InhibitDelayMaxUSec"] = dbus.MakeVariant(uint64(c.bus.InhibitDelayMax().Microseconds()))
		case propertiesIface, introspectableIface, peerIface:
		default:
			c.fail(in, logindOwner, &callError{errUnknownInterface, fmt.Sprintf("Unknown interface '%s'.", iface)})
			return true
		}
		c.reply(in, logindOwner, props)
	case "Set":
		if e := wantSignature(in, "ssv"); e != nil {
			c.fail(in, logindOwner, e)
			return true
		}
		prop, _ := in.msg.Body[1].(string)
		c.fail(in, logindOwner, &callError{errPropertyReadOnly, fmt.Sprintf("Property '%s' is not writable.", prop)})
	default:
		return false
	}
	return true
}

// Introspection data, as sd-bus and dbus-daemon give it: each object lists
// its interfaces and its children.
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
	introProperties = ` <interface name="org.freedesktop.DBus.Properties">
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
	introManager = ` <interface name="org.freedesktop.login1.Manager">
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
	introBus = ` <interface name="org.freedesktop.DBus">
  <method name="Hello">
   <arg direction="out" type="s"/>
  </method>
  <method name="RequestName">
   <arg direction="in" type="s"/>
   <arg direction="in" type="u"/>
   <arg direction="out" type="u"/>
  </method>
  <method name="ReleaseName">
   <arg direction="in" type="s"/>
   <arg direction="out" type="u"/>
  </method>
  <method name="NameHasOwner">
   <arg direction="in" type="s"/>
   <arg direction="out" type="b"/>
  </method>
  <method name="ListNames">
   <arg direction="out" type="as"/>
  </method>
  <method name="ListActivatableNames">
   <arg direction="out" type="as"/>
  </method>
  <method name="AddMatch">
   <arg direction="in" type="s"/>
  </method>
  <method name="RemoveMatch">
   <arg direction="in" type="s"/>
  </method>
  <method name="GetNameOwner">
   <arg direction="in" type="s"/>
   <arg direction="out" type="s"/>
  </method>
  <method name="GetId">
   <arg direction="out" type="s"/>
  </method>
  <signal name="NameOwnerChanged">
   <arg type="s"/>
   <arg type="s"/>
   <arg type="s"/>
  </signal>
  <signal name="NameLost">
   <arg type="s"/>
  </signal>
  <signal name="NameAcquired">
   <arg type="s"/>
  </signal>
 </interface>
`
)

func introNode(body string, children ...string) string {
	var s strings.Builder
	s.WriteString(introHeader + "<node>\n" + body)
	for _, ch := range children {
		fmt.Fprintf(&s, " <node name=%q/>\n", ch)
	}
	s.WriteString("</node>\n")
	return s.String()
}

// logindIntro is logind's objects: its manager and the path down to it.
var logindIntro = map[string]string{
	"/":                       introNode(introCommon, "org"),
	"/org":                    introNode(introCommon, "freedesktop"),
	"/org/freedesktop":        introNode(introCommon, "login1"),
	"/org/freedesktop/login1": introNode(introCommon + introProperties + introManager),
}

// busIntro is the bus's own object, which dbus-daemon serves on every path.
var busIntro = map[string]string{
	"/":                     introNode(introCommon+introBus, "org"),
	"/org/freedesktop/DBus": introNode(introCommon + introBus),
}
