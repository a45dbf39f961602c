package bus

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/godbus/dbus/v5"

	"github.com/nodeinit/nodeinit/bus/internal/wire"
	"github.com/nodeinit/nodeinit/bus/service"
	"github.com/nodeinit/nodeinit/bus/upstream"
)

// The bus's driver: what it answers as org.freedesktop.DBus, the bus
// itself (Hello, names, match rules, questions about a connection).

// localPrefix begins every unique name of this bus. dbus-daemon and
// dbus-broker name their connections ":1.N" (digits alone), and a
// unique name's elements may hold letters, so a name of this bus can
// never be one of the system bus behind it: a destination with this
// prefix is routed here, any other unique name goes up.
const localPrefix = ":nodeinit."

// ReleaseName's and StartServiceByName's answers.
const (
	startReplyAlreadyRunning = uint32(2)

	releaseNameNonExistent = uint32(2)
	releaseNameNotOwner    = uint32(3)
)

// hello gives the connection its unique name, answers with it, and sends
// NameAcquired for it, in that order, as dbus-daemon does.
func (c *conn) hello(in *call) {
	name := localPrefix + strconv.FormatUint(c.id, 10)
	c.mu.Lock()
	c.name = name
	c.mu.Unlock()
	in.Reply(service.BusName, name)
	acquired := wire.NewSignal(service.BusName, service.BusPath, service.BusName, "NameAcquired", name)
	acquired.Headers[dbus.FieldDestination] = dbus.MakeVariant(name)
	c.send(acquired)
}

// busMethod answers the bus's own interface: Hello, AddMatch, RemoveMatch.
// A client of this bus needs no other; the rest is answered UnknownMethod.
func (c *conn) busMethod(in *call) {
	if in.Standard(service.BusName, busObjects) {
		return
	}
	if in.Iface != "" && in.Iface != service.BusName {
		in.Fail(service.BusName, in.UnknownMethod())
		return
	}
	switch in.Member {
	case "Hello":
		in.Fail(service.BusName, &service.Error{Name: service.Failed, Text: "Already handled an Hello message"})
	case "AddMatch", "RemoveMatch":
		if e := in.WantSignature("s"); e != nil {
			in.Fail(service.BusName, e)
			return
		}
		text, _ := in.Msg.Body[0].(string)
		rule, err := parseMatchRule(text)
		if err != nil {
			in.Fail(service.BusName, &service.Error{Name: errMatchRuleInvalid, Text: "Invalid match rule: " + err.Error()})
			return
		}
		// A rule the system bus should hold too is answered by it, once
		// it holds there; the others here.
		up := c.matchGoesUp(in, rule)
		add := in.Member == "AddMatch"
		ok := false
		if add {
			ok = c.addMatch(in, rule, !up)
		} else {
			ok = c.removeMatch(in, rule, !up)
		}
		if ok && up {
			c.matchUp(in, rule, add)
		}
	default:
		if !c.nameMethod(in) && !c.connectionMethod(in, c.passesThrough()) &&
			!(upstreamBusMethods[in.Member] && c.passesThrough() && c.forward(in, upstream.Plain)) {
			in.Fail(service.BusName, in.UnknownMethod())
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
		in.Fail(service.BusName, &service.Error{Name: service.LimitsExceeded, Text: fmt.Sprintf("Connection has %d match rules, the most it may have", maxRules)})
		return false
	}
	if reply {
		in.Reply(service.BusName)
	}
	return true
}

// matchUp sends the client's AddMatch (add) or RemoveMatch of rule,
// which holds here already, to the system bus, which answers it. Where
// there is no pass-through, it is answered here. Where the call cannot go
// up (too many of the client's calls wait there), or the system bus
// refuses the rule (one it finds invalid, or one too many for it), the
// client gets the error and the rule is undone here too: the client knows
// of no rule it was refused, so it would never remove one left here, and
// each would keep taking one of its 64, and keep it from being dropped as
// idle.
func (c *conn) matchUp(in *call, rule matchRule, add bool) {
	up := c.upstreamConn()
	if up == nil {
		in.Reply(service.BusName)
		return
	}
	serial := in.Msg.Serial()
	if add {
		c.mu.Lock()
		if c.addsUp == nil {
			c.addsUp = make(map[uint32]matchRule)
		}
		c.addsUp[serial] = rule
		c.mu.Unlock()
	}
	fds := in.fds
	in.fds = nil
	e := up.Send(serial, in.raw, fds, upstream.Plain)
	if e == nil {
		return
	}
	c.mu.Lock()
	if add {
		delete(c.addsUp, serial)
		c.dropRule(rule)
	} else if len(c.rules) < maxRules {
		c.rules = append(c.rules, rule)
	}
	c.mu.Unlock()
	in.Fail(service.BusName, e)
}

// refusedUpstream undoes, when data is the system bus's error for an
// AddMatch of the client's that went up, that rule here; any reply to one
// ends its wait. It is called for each message from the system bus for
// the client, before it is queued.
func (c *conn) refusedUpstream(data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.addsUp) == 0 || len(data) < 2 || (dbus.Type(data[1]) != dbus.TypeMethodReply && dbus.Type(data[1]) != dbus.TypeError) {
		return
	}
	m, err := wire.Decode(data)
	if err != nil {
		return
	}
	serial, _ := m.Headers[dbus.FieldReplySerial].Value().(uint32)
	rule, ok := c.addsUp[serial]
	if !ok {
		return
	}
	delete(c.addsUp, serial)
	if m.Type == dbus.TypeError {
		c.dropRule(rule)
	}
}

// dropRule removes one rule equal to rule. c.mu is held.
func (c *conn) dropRule(rule matchRule) {
	for i, r := range c.rules {
		if r.equal(rule) {
			c.rules = append(c.rules[:i], c.rules[i+1:]...)
			return
		}
	}
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
		in.Fail(service.BusName, &service.Error{Name: errMatchRuleNotFound, Text: "The given match rule wasn't found and can't be removed"})
		return false
	}
	if reply {
		in.Reply(service.BusName)
	}
	return true
}

// connectionMethod answers the bus's questions about a connection of this
// bus (GetConnectionUnixUser, GetConnectionUnixProcessID,
// GetConnectionCredentials, ListQueuedOwners), and about any connection
// where there is no system bus behind this one. It reports false for
// another call, or for a name the system bus should be asked about.
func (c *conn) connectionMethod(in *call, upstream bool) bool {
	switch in.Member {
	case "GetConnectionUnixUser", "GetConnectionUnixProcessID", "GetConnectionCredentials", "ListQueuedOwners":
	default:
		return false
	}
	if in.Sig != "s" {
		in.Fail(service.BusName, in.WantSignature("s"))
		return true
	}
	name, _ := in.Msg.Body[0].(string)
	uid, pid, ok := c.bus.localCred(name, upstream)
	if !ok && upstream {
		return false
	}
	if !ok {
		in.Fail(service.BusName, &service.Error{Name: service.NameHasNoOwner, Text: fmt.Sprintf("Could not get the owner of name '%s': no such name", name)})
		return true
	}
	switch in.Member {
	case "GetConnectionUnixUser":
		in.Reply(service.BusName, uid)
	case "GetConnectionUnixProcessID":
		in.Reply(service.BusName, pid)
	case "GetConnectionCredentials":
		in.Reply(service.BusName, map[string]dbus.Variant{"UnixUserID": dbus.MakeVariant(uid), "ProcessID": dbus.MakeVariant(pid)})
	case "ListQueuedOwners":
		in.Reply(service.BusName, []string{c.bus.localOwner(name, upstream)})
	}
	return true
}

// nameMethod answers the bus's calls about names and itself. It reports
// false for a call that is not one of them.
func (c *conn) nameMethod(in *call) bool {
	behind := c.passesThrough()
	if behind {
		if c.forwardNameMethod(in) {
			return true
		}
		behind = c.passesThrough()
	}
	return c.localNameMethod(in, behind)
}

// forwardNameMethod passes a call about names or the bus itself up to
// the system bus behind this one: with a system bus to pass through to,
// what is about its names, and the bus's own list and id, are the system
// bus's. It reports false for a call that stays here (about a name of
// this bus) or that could not go up.
func (c *conn) forwardNameMethod(in *call) bool {
	name := ""
	if len(in.Msg.Body) > 0 {
		name, _ = in.Msg.Body[0].(string)
	}
	switch in.Member {
	case "GetNameOwner", "NameHasOwner", "StartServiceByName", "RequestName", "ReleaseName":
		return c.bus.localOwner(name, true) == "" && c.forward(in, upstream.Plain)
	case "ListNames":
		return c.forward(in, upstream.ListNames)
	case "ListActivatableNames", "GetId":
		return c.forward(in, upstream.Plain)
	}
	return false
}

// localNameMethod answers a call about names and the bus itself here;
// behind says whether a system bus is behind this one. It reports false
// for a call that is not one of them.
func (c *conn) localNameMethod(in *call, behind bool) bool {
	one := func() (string, bool) {
		if e := in.WantSignature("s"); e != nil {
			in.Fail(service.BusName, e)
			return "", false
		}
		s, _ := in.Msg.Body[0].(string)
		return s, true
	}
	switch in.Member {
	case "GetNameOwner":
		if name, ok := one(); ok {
			if owner := c.bus.localOwner(name, behind); owner != "" {
				in.Reply(service.BusName, owner)
			} else {
				in.Fail(service.BusName, &service.Error{Name: service.NameHasNoOwner, Text: fmt.Sprintf("Could not get owner of name '%s': no such name", name)})
			}
		}
	case "NameHasOwner":
		if name, ok := one(); ok {
			in.Reply(service.BusName, c.bus.localOwner(name, behind) != "")
		}
	case "ListNames":
		in.Reply(service.BusName, c.bus.localNames(behind))
	case "StartServiceByName":
		if e := in.WantSignature("su"); e != nil {
			in.Fail(service.BusName, e)
			return true
		}
		name, _ := in.Msg.Body[0].(string)
		if c.bus.localOwner(name, behind) != "" {
			in.Reply(service.BusName, startReplyAlreadyRunning)
		} else {
			in.Fail(service.BusName, &service.Error{Name: errServiceUnknown, Text: fmt.Sprintf("The name %s was not provided by any .service files", name)})
		}
	case "ListActivatableNames":
		in.Reply(service.BusName, []string{service.BusName})
	case "GetId":
		in.Reply(service.BusName, c.bus.guid)
	case "RequestName":
		if e := in.WantSignature("su"); e != nil {
			in.Fail(service.BusName, e)
			return true
		}
		name, _ := in.Msg.Body[0].(string)
		in.Fail(service.BusName, c.refuseName(name))
	case "ReleaseName":
		name, ok := one()
		if !ok {
			return true
		}
		if e := c.invalidName(name); e != nil {
			in.Fail(service.BusName, e)
		} else if c.bus.localOwner(name, behind) != "" {
			in.Reply(service.BusName, releaseNameNotOwner)
		} else {
			in.Reply(service.BusName, releaseNameNonExistent)
		}
	default:
		return false
	}
	return true
}

// refuseName is dbus-daemon's answer on the system bus to a RequestName
// that its policy does not allow: on this bus nobody but a service owns
// a name.
func (c *conn) refuseName(name string) *service.Error {
	if e := c.invalidName(name); e != nil {
		return e
	}
	return &service.Error{Name: errAccessDenied, Text: fmt.Sprintf("Connection %q is not allowed to own the service %q due to security policies in the configuration file", c.name, name)}
}

// invalidName is dbus-daemon's refusal of a name no connection can ask
// for or release.
func (c *conn) invalidName(name string) *service.Error {
	switch {
	case strings.HasPrefix(name, ":"):
		return &service.Error{Name: service.InvalidArgs, Text: fmt.Sprintf("Cannot acquire a service starting with ':' such as %q", name)}
	case name == service.BusName:
		return &service.Error{Name: service.InvalidArgs, Text: fmt.Sprintf("Connection %q is not allowed to own the service %q because it is reserved for D-Bus' use only", c.name, name)}
	case !validBusName(name):
		return &service.Error{Name: service.InvalidArgs, Text: fmt.Sprintf("Requested bus name %q is not valid", strings.ToValidUTF8(name, "\uFFFD"))}
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

const busXML = ` <interface name="org.freedesktop.DBus">
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

// busObjects is the bus's own object, which dbus-daemon serves on every
// path.
var busObjects = map[string]string{
	"/":                     service.ObjectXML(busXML, "org"),
	"/org/freedesktop/DBus": service.ObjectXML(busXML),
}
