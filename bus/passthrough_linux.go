package bus

import (
	"fmt"
	"sync"

	"github.com/godbus/dbus/v5"
	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/bus/internal/wire"
	"github.com/nodeinit/nodeinit/bus/service"
	"github.com/nodeinit/nodeinit/bus/upstream"
	"github.com/nodeinit/nodeinit/internal/clientlog"
)

// The bus's side of the pass-through (package upstream): which of a
// client's messages go up, and the connection up there, opened when the
// client first needs it.

// passThrough is one client connection's side of it.
type passThrough struct {
	in *wire.FDReader // descriptors the client sent

	mu     sync.Mutex
	up     *upstream.Conn // from the first call that needs it
	failed bool           // the upstream could not be opened or has ended
	closed bool           // the client's connection is closed
}

// clientReader reads the client's socket, keeping the descriptors it
// sends for the messages that carry them.
func (c *conn) clientReader() *wire.FDReader {
	r := wire.NewFDReader(c.raw)
	c.px.mu.Lock()
	c.px.in = r
	if c.px.closed {
		r.Close()
	}
	c.px.mu.Unlock()
	return r
}

// takeFDs hands over the descriptors m carries.
func (c *conn) takeFDs(m *dbus.Message) ([]int, error) {
	c.px.mu.Lock()
	in := c.px.in
	c.px.mu.Unlock()
	if in == nil {
		return nil, nil
	}
	return in.Take(m)
}

// closePassThrough ends the upstream connection and closes the descriptors
// held; the client's connection is closing.
func (c *conn) closePassThrough() {
	c.px.mu.Lock()
	up, in := c.px.up, c.px.in
	c.px.closed = true
	c.px.mu.Unlock()
	if up != nil {
		up.Close()
	}
	if in != nil {
		in.Close()
	}
}

// passesThrough reports whether this connection's calls may go upstream.
func (c *conn) passesThrough() bool {
	if c.bus.opts.Upstream == "" {
		return false
	}
	c.px.mu.Lock()
	defer c.px.mu.Unlock()
	return !c.px.failed && !c.px.closed
}

// upstreamConn returns the connection to the upstream bus, opening it on
// first use; nil when there is none.
func (c *conn) upstreamConn() *upstream.Conn {
	if !c.passesThrough() {
		return nil
	}
	c.px.mu.Lock()
	up := c.px.up
	c.px.mu.Unlock()
	if up != nil {
		return up
	}
	// Only the client's reader goroutine opens it: no other waits here.
	up, err := upstream.Dial(c, upstreamHost{c.bus}, &c.bus.upstream, c.unixFD)
	c.px.mu.Lock()
	closed := c.px.closed
	if err != nil || closed {
		c.px.failed = true
	} else {
		c.px.up = up
	}
	c.px.mu.Unlock()
	if err != nil {
		klog.InfoS("No pass-through to the system bus for this D-Bus client", "pid", c.cred.Pid, "name", c.name, "upstream", c.bus.opts.Upstream, "err", err)
		return nil
	}
	if closed {
		up.Close()
		return nil
	}
	up.Start()
	return up
}

// upstreamBusMethods are the system bus's own methods, beyond those about
// names, that a client's call goes up for: questions about a connection
// there. What would change that bus (UpdateActivationEnvironment,
// ReloadConfig) or watch all of it (BecomeMonitor) is not passed: upstream
// the call would be nodeinit's, not the client's.
var upstreamBusMethods = map[string]bool{
	"GetConnectionUnixUser": true, "GetConnectionUnixProcessID": true, "GetConnectionCredentials": true,
	"GetAdtAuditSessionData": true, "GetConnectionSELinuxSecurityContext": true, "GetConnectionAppArmorSecurityContext": true,
	"ListQueuedOwners": true,
}

// forward sends the client's message in upstream, with the descriptors it
// carried. It reports false when there is no upstream to take it; the
// caller answers then.
func (c *conn) forward(in *call, kind upstream.Kind) bool {
	up := c.upstreamConn()
	if up == nil {
		return false
	}
	fds := in.fds
	in.fds = nil
	if e := up.Send(in.Msg.Serial(), in.raw, fds, kind); e != nil {
		in.Fail(service.BusName, e)
	}
	return true
}

// forwardOrFail forwards a call for a name this bus does not have, or
// answers it as a bus without that name does.
func (c *conn) forwardOrFail(in *call) {
	if c.forward(in, upstream.Plain) {
		return
	}
	in.Fail(service.BusName, &service.Error{Name: errServiceUnknown, Text: fmt.Sprintf("The name %s was not provided by any .service files", in.Dest)})
}

// matchGoesUp reports whether the client's AddMatch or RemoveMatch goes
// to the system bus too, which then answers it: a bus answers AddMatch
// once the rule is in place, and go-systemd adds its rule for JobRemoved
// on one connection before it starts a job on another, so an answer from
// here alone could come before the rule holds there, and JobRemoved would
// be lost. A rule that can match only what this bus sends stays here, and
// a RemoveMatch opens no connection.
func (c *conn) matchGoesUp(in *call, rule matchRule) bool {
	if !c.passesThrough() || !c.bus.upstreamMayMatch(rule) {
		return false
	}
	if in.Member == "RemoveMatch" {
		c.px.mu.Lock()
		defer c.px.mu.Unlock()
		return c.px.up != nil
	}
	return true
}

// upstreamMayMatch reports whether a rule can match anything the system
// bus passes down: not one for a service's signals (a logind of the
// system bus is not the kubelet's, and its signals are dropped), for a
// sender with this bus's unique-name prefix, or for the bus's
// NameOwnerChanged about a service's name. So the kubelet's rule for
// PrepareForShutdown opens no connection to the system bus.
func (b *Bus) upstreamMayMatch(r matchRule) bool {
	if s, ok := r["sender"]; ok && b.localName(s) {
		return false
	}
	if i, ok := r["interface"]; ok && b.localSignal(i, "") {
		return false
	}
	for _, k := range []string{"path", "path_namespace"} {
		if p, ok := r[k]; ok && b.localSignal("", p) {
			return false
		}
	}
	if a, ok := r["arg0"]; ok && r["sender"] == service.BusName && b.localName(a) {
		return false
	}
	return true
}

// upstreamOptions are the pass-through's options for this bus.
func (b *Bus) upstreamOptions() upstream.Options {
	return upstream.Options{Address: b.opts.Upstream, MaxMessage: maxUpstreamMessage, WriteTimeout: b.tun.writeTimeout, Now: b.tun.now, Hook: b.tun.upstreamHook}
}

// maxUpstreamMessage bounds one message from the system bus that is
// passed on: no more fits in the client's queue beside what it keeps for
// the bus's own replies. A larger one is read and dropped.
const maxUpstreamMessage = wire.MaxQueuedBytes - passedRoom*maxReplyBytes

// The connection as its pass-through's upstream.Client.

func (c *conn) Name() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.name
}

func (c *conn) Pid() int32 { return c.cred.Pid }

func (c *conn) Ended() (closing bool) {
	c.px.mu.Lock()
	defer c.px.mu.Unlock()
	c.px.failed = true
	return c.px.closed
}

// upstreamHost is the bus as its pass-throughs' upstream.Host.
type upstreamHost struct{ b *Bus }

func (h upstreamHost) LocalName(name string) bool          { return h.b.localName(name) }
func (h upstreamHost) LocalSignal(iface, path string) bool { return h.b.localSignal(iface, path) }
func (h upstreamHost) Serial() uint32                      { return h.b.nextSerial() }
func (h upstreamHost) Log() *clientlog.Log                 { return h.b.log }

func (h upstreamHost) Go(f func()) { h.b.spawn(f) }

func (h upstreamHost) ServiceNames() []string {
	var names []string
	for _, l := range h.b.services {
		names = append(append(names, l.names.Own...), l.owner)
	}
	return names
}
