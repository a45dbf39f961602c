package bus

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/bus/service"

	"github.com/nodeinit/nodeinit/internal/clientlog"
	"github.com/nodeinit/nodeinit/internal/linux"

	"github.com/nodeinit/nodeinit/bus/internal/wire"
)

// The pass-through: the executor's whole system bus is nodeinit's, so
// everything not for a service and not answered by the bus itself goes on to
// the system bus the container has, if it has one (a kubelet with
// cgroupDriver: systemd talks to systemd there). Each client connection
// gets one connection to that bus, opened when the client first needs it,
// authenticated as nodeinit. Messages go up as the client sent them (its
// serial, its byte order, its bytes), so the replies that come down answer
// them as they are; what comes down goes on as it came, its destination
// rewritten to the client's unique name here (frame.go). Match rules are
// kept here and also added there, unless they can only match what this
// bus sends.
//
// What comes down that the client did not ask for, or that is larger than
// its queue can take, is dropped, counted and logged, and the
// pass-through goes on: anyone on the system bus can send a signal to the
// pass-through's unique name there, and the kubelet keeps one connection
// for its systemd cgroup driver for as long as it runs. An upstream that
// fails (a write, a read, the bus going away) closes the client's
// connection, so that its library connects again (godbus and go-systemd
// do) and gets a new pass-through.

// Limits of the pass-through.
const (
	// upstreamTimeout bounds opening the connection: the dial, the
	// handshake and Hello, while the client's call waits.
	upstreamTimeout = 5 * time.Second
	// maxUpstreamMessage bounds one message from the upstream bus that is
	// passed on: no more fits in the client's queue beside what it keeps
	// for the bus's own replies. A larger one is read and dropped.
	maxUpstreamMessage = wire.MaxQueuedBytes - passedRoom*maxReplyBytes
	// maxPending bounds the client's calls that wait for the upstream's
	// reply.
	maxPending = 256
)

// SystemBusSocket is where the system bus listens (the specification's
// default system bus address).
const SystemBusSocket = "/run/dbus/system_bus_socket"

// UpstreamAddress is the address of the system bus this process can reach,
// to pass through to: DBUS_SYSTEM_BUS_ADDRESS from getenv, else
// SystemBusSocket under root. The error says why there is none: the
// variable is unset and there is no socket there, or the socket the
// variable names is not there.
func UpstreamAddress(getenv func(string) string, root string) (string, error) {
	address := getenv("DBUS_SYSTEM_BUS_ADDRESS")
	if address == "" {
		p := filepath.Join(root, SystemBusSocket)
		if !isSocket(p) {
			return "", fmt.Errorf("DBUS_SYSTEM_BUS_ADDRESS is unset and there is no socket at %s", p)
		}
		return "unix:path=" + dbus.EscapeBusAddressValue(p), nil
	}
	p, err := unixSocket(address)
	if err != nil {
		return "", fmt.Errorf("DBUS_SYSTEM_BUS_ADDRESS: %w", err)
	}
	if !strings.HasPrefix(p, "@") && !isSocket(p) {
		return "", fmt.Errorf("DBUS_SYSTEM_BUS_ADDRESS=%s: there is no socket at %s", address, p)
	}
	return address, nil
}

func isSocket(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().Type() == fs.ModeSocket
}

// unixSocket is the first unix socket a D-Bus address names
// ("unix:path=..." or "unix:abstract=..."; addresses separated by ';').
func unixSocket(address string) (string, error) {
	for _, a := range strings.Split(address, ";") {
		transport, params, ok := strings.Cut(a, ":")
		if !ok || transport != "unix" {
			continue
		}
		for _, kv := range strings.Split(params, ",") {
			k, v, _ := strings.Cut(kv, "=")
			val, err := dbus.UnescapeBusAddressValue(v)
			if err != nil {
				return "", fmt.Errorf("the address %q: %w", address, err)
			}
			switch k {
			case "path":
				return val, nil
			case "abstract":
				return "@" + val, nil
			}
		}
	}
	return "", fmt.Errorf("the address %q names no unix socket (path= or abstract=)", address)
}

// passThrough is one client connection's side of it.
type passThrough struct {
	in *wire.FDReader // descriptors the client sent

	mu     sync.Mutex
	up     *upstream // from the first call that needs it
	failed bool      // the upstream could not be opened or has ended
	closed bool      // the client's connection is closed
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
		up.close()
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
func (c *conn) upstreamConn() *upstream {
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
	up, err := dialUpstream(c)
	c.px.mu.Lock()
	defer c.px.mu.Unlock()
	if err != nil || c.px.closed {
		c.px.failed = true
		if up != nil {
			up.nc.Close()
		}
		if err != nil {
			klog.InfoS("No pass-through to the system bus for this D-Bus client", "pid", c.cred.Pid, "name", c.name, "upstream", c.bus.opts.Upstream, "err", err)
		}
		return nil
	}
	c.px.up = up
	up.start()
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

// reply kinds for the calls that wait for the upstream's answer.
type pendingKind int

const (
	plainReply pendingKind = iota
	listNamesReply
)

// forward sends the client's message in upstream, with the descriptors it
// carried. It reports false when there is no upstream to take it; the
// caller answers then.
func (c *conn) forward(in *call, kind pendingKind) bool {
	up := c.upstreamConn()
	if up == nil {
		return false
	}
	fds := in.fds
	in.fds = nil
	up.send(in, in.raw, fds, kind)
	return true
}

// forwardOrFail forwards a call for a name this bus does not have, or
// answers it as a bus without that name does.
func (c *conn) forwardOrFail(in *call) {
	if c.forward(in, plainReply) {
		return
	}
	in.Fail(busName, &service.Error{Name: errServiceUnknown, Text: fmt.Sprintf("The name %s was not provided by any .service files", in.Dest)})
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
	if a, ok := r["arg0"]; ok && r["sender"] == busName && b.localName(a) {
		return false
	}
	return true
}

// upstream is one connection to the upstream bus, for one client.
type upstream struct {
	c      *conn
	nc     *net.UnixConn
	raw    syscall.RawConn
	fds    *wire.FDReader
	r      *bufio.Reader
	name   string // its unique name there
	unixFD bool

	mu      sync.Mutex
	queue   wire.Outbox
	pending map[uint32]pendingKind // the client's serials waiting for a reply
	closed  bool
	dropped int // messages from the upstream bus not passed on

	wake chan struct{}
	done chan struct{}
}

// dialUpstream connects to the upstream bus, authenticates as nodeinit
// (EXTERNAL, with unix fd passing when the client has it) and says Hello,
// within upstreamTimeout.
func dialUpstream(c *conn) (*upstream, error) {
	path, err := unixSocket(c.bus.opts.Upstream)
	if err != nil {
		return nil, err
	}
	d := net.Dialer{Timeout: upstreamTimeout}
	nc, err := d.Dial("unix", path)
	if err != nil {
		return nil, err
	}
	u := &upstream{c: c, nc: nc.(*net.UnixConn), pending: map[uint32]pendingKind{}, wake: make(chan struct{}, 1), done: make(chan struct{})}
	if err := u.open(c.unixFD); err != nil {
		nc.Close()
		return nil, err
	}
	return u, nil
}

func (u *upstream) open(unixFD bool) error {
	var err error
	if u.raw, err = u.nc.SyscallConn(); err != nil {
		return err
	}
	if err := u.nc.SetDeadline(time.Now().Add(upstreamTimeout)); err != nil {
		return err
	}
	u.fds = wire.NewFDReader(u.raw)
	u.r = bufio.NewReaderSize(u.fds, 4096)
	line := func(send string) (string, error) {
		if err := linux.SendAll(u.raw, []byte(send), nil); err != nil {
			return "", err
		}
		return wire.ReadAuthLine(u.r)
	}
	uid := hex.EncodeToString([]byte(strconv.Itoa(os.Getuid())))
	got, err := line("\x00AUTH EXTERNAL " + uid + "\r\n")
	if err != nil {
		return err
	}
	if !strings.HasPrefix(got, "OK ") {
		return fmt.Errorf("the upstream bus refused EXTERNAL authentication: %q", got)
	}
	if unixFD {
		if got, err = line("NEGOTIATE_UNIX_FD\r\n"); err != nil {
			return err
		}
		u.unixFD = got == "AGREE_UNIX_FD"
	}
	hello := wire.WithBody(&dbus.Message{Type: dbus.TypeMethodCall, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldDestination: dbus.MakeVariant(busName),
		dbus.FieldPath:        dbus.MakeVariant(busPath),
		dbus.FieldInterface:   dbus.MakeVariant(busName),
		dbus.FieldMember:      dbus.MakeVariant("Hello"),
	}})
	data, _, err := wire.Encode(hello, 1)
	if err != nil {
		return err
	}
	if err := linux.SendAll(u.raw, append([]byte("BEGIN\r\n"), data...), nil); err != nil {
		return err
	}
	// The reply comes first; a bus sends nothing else before it.
	raw, err := wire.ReadMessage(u.r)
	if err != nil {
		return err
	}
	m, err := wire.Decode(raw)
	if err != nil {
		return err
	}
	if m.Type != dbus.TypeMethodReply || len(m.Body) != 1 {
		return fmt.Errorf("the upstream bus answered Hello with %s", m)
	}
	u.name, _ = m.Body[0].(string)
	return u.nc.SetDeadline(time.Time{})
}

func (u *upstream) start() {
	b := u.c.bus
	b.wg.Add(2)
	go u.readLoop()
	go u.writeLoop()
	klog.V(1).InfoS("Passing a D-Bus client's calls through to the system bus", "pid", u.c.cred.Pid, "name", u.c.name, "upstreamName", u.name)
}

// send queues data, the client's message in (or what was made of it), for
// the upstream bus, with fds, noting a call that waits for a reply. A
// full queue ends the pass-through, as a full client queue ends the
// client.
func (u *upstream) send(in *call, data []byte, fds []int, kind pendingKind) {
	if !u.unixFD && len(fds) > 0 {
		wire.CloseFDs(fds)
		in.Fail(busName, &service.Error{Name: service.NotSupported, Text: "The system bus this bus passes through to did not agree to unix fd passing"})
		return
	}
	serial := in.Msg.Serial()
	wantsReply := dbus.Type(data[1]) == dbus.TypeMethodCall && dbus.Flags(data[2])&dbus.FlagNoReplyExpected == 0
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		wire.CloseFDs(fds)
		return
	}
	if wantsReply && len(u.pending) >= maxPending {
		u.mu.Unlock()
		wire.CloseFDs(fds)
		in.Fail(busName, &service.Error{Name: service.LimitsExceeded, Text: fmt.Sprintf("%d calls already wait for the system bus's replies", maxPending)})
		return
	}
	if !u.queue.Fits(1, len(data), wire.MaxQueued, wire.MaxQueuedBytes) {
		u.mu.Unlock()
		wire.CloseFDs(fds)
		u.fail(errors.New("it does not take the client's messages"))
		return
	}
	if wantsReply {
		u.pending[serial] = kind
	}
	u.queue.Push(wire.Outgoing{Data: data, FDs: fds})
	u.mu.Unlock()
	wire.Notify(u.wake)
}

// recovered, deferred in the upstream's reader and writer, turns a panic
// into the end of that pass-through and of the client's connection: a bug,
// logged with its stack, that must not end PID 1.
func (u *upstream) recovered(during string) {
	if p := recover(); p != nil {
		err := fmt.Errorf("panic: %v", p)
		u.fail(err)
		u.c.bus.log.Error(err, "A D-Bus client's pass-through to the system bus failed; closed its connection",
			"pid", u.c.cred.Pid, "during", during, "stack", string(debug.Stack()))
	}
}

func (u *upstream) writeLoop() {
	defer u.c.bus.wg.Done()
	defer u.recovered("writing to the system bus")
	tun := &u.c.bus.tun
	for {
		select {
		case <-u.wake:
		case <-u.done:
			return
		}
		for {
			var o wire.Outgoing
			ok := false
			u.mu.Lock()
			if !u.closed {
				o, ok = u.queue.Pop()
			}
			u.mu.Unlock()
			if !ok {
				break
			}
			if tun.upstreamHook != nil {
				tun.upstreamHook("writing")
			}
			err := u.nc.SetWriteDeadline(tun.now().Add(tun.writeTimeout))
			if err == nil {
				err = linux.SendAll(u.raw, o.Data, o.FDs)
			}
			wire.CloseFDs(o.FDs)
			if err != nil {
				u.fail(fmt.Errorf("writing: %w", err))
				return
			}
		}
	}
}

func (u *upstream) readLoop() {
	defer u.c.bus.wg.Done()
	defer u.recovered("reading from the system bus")
	tun := &u.c.bus.tun
	for {
		f, err := readFrame(u.r, maxUpstreamMessage)
		var fds []int
		if err == nil {
			fds, err = u.fds.TakeN(f.uint32Field(dbus.FieldUnixFDs))
		}
		if err != nil {
			u.fail(fmt.Errorf("reading: %w", err))
			return
		}
		if tun.upstreamHook != nil {
			tun.upstreamHook("reading")
		}
		u.deliver(f, fds)
	}
}

// deliver hands a message from the upstream bus to the client, addressed
// to the client's name here, or drops it: one larger than the client's
// queue can take, a reply to no call of the client's, a signal addressed
// to the pass-through alone that no match rule of the client's asks for,
// and anything but a reply while the client's queue is full. A reply the
// client waits for waits for room in its queue.
func (u *upstream) deliver(f *frame, fds []int) {
	c := u.c
	c.mu.Lock()
	name := c.name
	c.mu.Unlock()
	if f.raw == nil {
		u.drop(f, fds, fmt.Sprintf("larger than the %d bytes the pass-through passes on", maxUpstreamMessage))
		u.refuseReply(f, name)
		return
	}
	sender, iface, path := f.header(dbus.FieldSender), f.header(dbus.FieldInterface), f.header(dbus.FieldPath)
	unicast := f.header(dbus.FieldDestination) != ""
	var data []byte
	var err error
	reply := f.typ == dbus.TypeMethodReply || f.typ == dbus.TypeError
	switch {
	case reply:
		kind, ok := u.answered(f)
		if !ok {
			u.drop(f, fds, "a reply to no call of the client's")
			return
		}
		if kind == listNamesReply && f.typ == dbus.TypeMethodReply {
			data, err = c.bus.withLocalNames(f, name)
		}
	case f.typ == dbus.TypeSignal && sender == busName:
		m, err := f.decode()
		if err != nil {
			u.drop(f, fds, "not a message godbus can read")
			return
		}
		member := wire.Header(m, dbus.FieldMember)
		arg0 := ""
		if len(m.Body) > 0 {
			arg0, _ = m.Body[0].(string)
		}
		if (member == "NameAcquired" || member == "NameLost") && arg0 == u.name || member == "NameOwnerChanged" && c.bus.localName(arg0) {
			// About the upstream connection's own unique name, not the
			// client's; or about a service there (a logind), which is not
			// this bus's.
			wire.CloseFDs(fds)
			return
		}
	case f.typ == dbus.TypeSignal && c.bus.localSignal(iface, path):
		// A service's names on this bus are nodeinit's: a logind of the
		// host must not tell the kubelet to shut down.
		wire.CloseFDs(fds)
		return
	case f.typ == dbus.TypeSignal && unicast && !u.wanted(f, name):
		u.drop(f, fds, "a signal to the pass-through alone that no match rule of the client's asks for")
		return
	}
	if err != nil {
		u.drop(f, fds, "its reply cannot be read: "+err.Error())
		return
	}
	switch {
	case data != nil:
	case unicast:
		if data, err = f.addressedTo(name); err != nil {
			u.drop(f, fds, "its header cannot be written again: "+err.Error())
			return
		}
	default:
		data = f.raw
	}
	if !c.pass(wire.Outgoing{Data: data, FDs: fds}, reply, u.done) && !reply {
		u.drop(f, nil, "the client's queue is full")
	}
}

// answered takes the client's call that the reply f answers off the
// calls waiting; ok is false when f answers none of them.
func (u *upstream) answered(f *frame) (kind pendingKind, ok bool) {
	serial := f.uint32Field(dbus.FieldReplySerial)
	u.mu.Lock()
	defer u.mu.Unlock()
	kind, ok = u.pending[serial]
	delete(u.pending, serial)
	return kind, ok
}

// refuseReply answers the client's call that f, dropped for its size,
// would have answered, with LimitsExceeded from the bus, as dbus-daemon
// answers for a reply it cannot pass on: the call does not wait for ever.
func (u *upstream) refuseReply(f *frame, name string) {
	if f.typ != dbus.TypeMethodReply && f.typ != dbus.TypeError {
		return
	}
	if _, ok := u.answered(f); !ok {
		return
	}
	serial := f.uint32Field(dbus.FieldReplySerial)
	e := wire.NewError(&dbus.Message{}, busName, name, service.LimitsExceeded,
		fmt.Sprintf("The reply from %s is %d bytes, more than the %d this bus passes on", clientlog.Clip(f.header(dbus.FieldSender)), f.size, maxUpstreamMessage))
	e.Headers[dbus.FieldReplySerial] = dbus.MakeVariant(serial)
	data, _, err := wire.Encode(e, u.c.bus.nextSerial())
	if err == nil {
		u.c.pass(wire.Outgoing{Data: data}, true, u.done)
	}
}

// wanted reports whether a match rule of the client's asks for the signal
// f, sent to the pass-through alone: as a bus does, but with a well-known
// name as a rule's sender matching nothing, as this bus does not know who
// owns it there.
func (u *upstream) wanted(f *frame, name string) bool {
	m, err := f.decode()
	if err != nil {
		return false
	}
	m.Headers[dbus.FieldDestination] = dbus.MakeVariant(name)
	c := u.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.rules {
		if r.matches(m, []string{f.header(dbus.FieldSender)}) {
			return true
		}
	}
	return false
}

// withLocalNames is the upstream bus's ListNames reply with the services'
// names (Own and unique) that it does not have, to the client's name.
func (b *Bus) withLocalNames(f *frame, dest string) ([]byte, error) {
	m, err := f.decode()
	if err != nil {
		return nil, err
	}
	if len(m.Body) != 1 {
		return nil, fmt.Errorf("a ListNames reply of %d values", len(m.Body))
	}
	names, _ := m.Body[0].([]string)
	for _, l := range b.services {
		for _, n := range append(l.names.Own, l.owner) {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	m.Body[0] = names
	m.Headers[dbus.FieldDestination] = dbus.MakeVariant(dest)
	data, _, err := wire.Encode(m, f.serial)
	return data, err
}

// drop drops a message from the upstream bus and closes the descriptors
// it carried. The first of a pass-through is logged at Info (within the
// bus's bound on what clients cause), the rest at V(2); the count is
// logged when the pass-through ends.
func (u *upstream) drop(f *frame, fds []int, why string) {
	wire.CloseFDs(fds)
	u.mu.Lock()
	u.dropped++
	first := u.dropped == 1
	u.mu.Unlock()
	kv := []any{"pid", u.c.cred.Pid, "type", f.typ.String(), "sender", clientlog.Clip(f.header(dbus.FieldSender)),
		"interface", clientlog.Clip(f.header(dbus.FieldInterface)), "member", clientlog.Clip(f.header(dbus.FieldMember)), "bytes", f.size, "reason", why}
	if first {
		u.c.bus.log.Info("Dropped a message from the system bus for a D-Bus client", kv...)
		return
	}
	klog.V(2).InfoS("Dropped a message from the system bus for a D-Bus client", kv...)
}

// fail ends the pass-through of this client and closes the client's
// connection (unless that is what ended it): the client's library
// connects again, and the new connection gets a new pass-through, where
// this one, its match rules and the names it asked for there are gone.
func (u *upstream) fail(err error) {
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return
	}
	u.closed = true
	pending, dropped := len(u.pending), u.dropped
	u.pending = nil
	q := u.queue.Take()
	u.mu.Unlock()
	close(u.done)
	u.nc.Close()
	u.fds.Close()
	wire.Drop(q)
	c := u.c
	c.px.mu.Lock()
	c.px.failed = true
	closing := c.px.closed
	c.px.mu.Unlock()
	if closing {
		if dropped > 0 {
			klog.V(1).InfoS("A D-Bus client's pass-through to the system bus ended", "pid", c.cred.Pid, "name", c.name, "dropped", dropped)
		}
		return
	}
	c.bus.log.Info("The pass-through to the system bus ended for a D-Bus client; closed its connection",
		"pid", c.cred.Pid, "waiting", pending, "dropped", dropped, "err", clientlog.ClipTo(err.Error(), clientlog.MaxErrorText))
	c.close()
}

// close ends the connection because the client's has ended.
func (u *upstream) close() { u.fail(errors.New("the client's connection closed")) }
