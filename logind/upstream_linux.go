package logind

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/internal/linux"
)

// The pass-through: the executor's whole system bus is nodeinit's, so
// everything not for logind and not answered by the bus itself goes on to
// the system bus the container has, if it has one (a kubelet with
// cgroupDriver: systemd talks to systemd there). Each client connection
// gets one connection to that bus, opened when the client first needs it,
// authenticated as nodeinit. Calls go up with the client's serial, so the
// replies that come down answer them as they are; what comes down has its
// destination rewritten to the client's unique name here. Match rules are
// kept here and also added there. An upstream that fails ends only that
// client's pass-through: its calls waiting for a reply get NoReply, later
// ones the errors a bus without the upstream's names gives.

// Limits of the pass-through.
const (
	// upstreamTimeout bounds opening the connection: the dial, the
	// handshake and Hello, while the client's call waits.
	upstreamTimeout = 5 * time.Second
	// maxUpstreamMessage bounds one message from the upstream bus: no
	// more can wait in the client's queue anyway.
	maxUpstreamMessage = maxQueuedBytes
	// maxPending bounds the client's calls that wait for the upstream's
	// reply.
	maxPending = 256
)

// Errors a bus gives.
const (
	errNoReply = "org.freedesktop.DBus.Error.NoReply"
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

// RequireSystemBus refuses a kubelet whose cgroup driver is systemd where
// there is no system bus (noBus says why): it reaches systemd there, and
// nodeinit's bus, which the kubelet takes for the system bus, has no
// systemd of its own to pass it to.
func RequireSystemBus(cgroupDriver string, noBus error) error {
	if noBus == nil || cgroupDriver != "systemd" {
		return nil
	}
	return fmt.Errorf("the kubelet's cgroup driver is systemd, which it reaches on the system bus, and this container has none (%v): "+
		"mount the host's %s into the container, or set the kubelet's cgroupDriver to cgroupfs", noBus, SystemBusSocket)
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
	in *fdReader // descriptors the client sent

	mu     sync.Mutex
	up     *upstream // from the first call that needs it
	failed bool      // the upstream could not be opened or has ended
	closed bool      // the client's connection is closed
}

// clientReader reads the client's socket, keeping the descriptors it
// sends for the messages that carry them.
func (c *conn) clientReader() *fdReader {
	r := newFDReader(c.raw)
	c.px.mu.Lock()
	c.px.in = r
	if c.px.closed {
		r.close()
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
	return in.take(m)
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
		in.close()
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
	up.send(in.msg, fds, kind)
	return true
}

// forwardOrFail forwards a call for a name this bus does not have, or
// answers it as a bus without that name does.
func (c *conn) forwardOrFail(in *call) {
	if c.forward(in, plainReply) {
		return
	}
	c.fail(in, busName, &callError{errServiceUnknown, fmt.Sprintf("The name %s was not provided by any .service files", in.dest)})
}

// forwardMatch adds or removes the client's match rule upstream too, once
// it holds here. The bus answers the client; the upstream is asked for no
// reply. A RemoveMatch does not open the connection.
func (c *conn) forwardMatch(in *call) {
	if in.member == "RemoveMatch" {
		c.px.mu.Lock()
		open := c.px.up != nil
		c.px.mu.Unlock()
		if !open {
			return
		}
	}
	up := c.upstreamConn()
	if up == nil {
		return
	}
	m := *in.msg
	m.Flags |= dbus.FlagNoReplyExpected
	up.send(&m, nil, plainReply)
}

// upstream is one connection to the upstream bus, for one client.
type upstream struct {
	c      *conn
	nc     *net.UnixConn
	raw    syscall.RawConn
	fds    *fdReader
	r      *bufio.Reader
	name   string // its unique name there
	unixFD bool

	mu      sync.Mutex
	queue   outbox
	pending map[uint32]pendingKind // the client's serials waiting for a reply
	closed  bool

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
	u.fds = newFDReader(u.raw)
	u.r = bufio.NewReaderSize(u.fds, 4096)
	line := func(send string) (string, error) {
		if err := linux.SendAll(u.raw, []byte(send), nil); err != nil {
			return "", err
		}
		return readAuthLine(u.r)
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
	hello := withBody(&dbus.Message{Type: dbus.TypeMethodCall, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldDestination: dbus.MakeVariant(busName),
		dbus.FieldPath:        dbus.MakeVariant(busPath),
		dbus.FieldInterface:   dbus.MakeVariant(busName),
		dbus.FieldMember:      dbus.MakeVariant("Hello"),
	}})
	data, _, err := encodeMessage(hello, 1)
	if err != nil {
		return err
	}
	if err := linux.SendAll(u.raw, append([]byte("BEGIN\r\n"), data...), nil); err != nil {
		return err
	}
	// The reply comes first; a bus sends nothing else before it.
	raw, err := readMessageUpTo(u.r, maxUpstreamMessage)
	if err != nil {
		return err
	}
	m, err := decodeMessage(raw)
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

// send queues m for the upstream bus, noting a call that waits for a
// reply. A full queue ends the pass-through, as a full client queue ends
// the client.
func (u *upstream) send(m *dbus.Message, fds []int, kind pendingKind) {
	if !u.unixFD && len(fds) > 0 {
		closeFDs(fds)
		u.c.fail(&call{msg: m, dest: header(m, dbus.FieldDestination), member: header(m, dbus.FieldMember)}, busName,
			&callError{errNotSupported, "The system bus this bus passes through to did not agree to unix fd passing"})
		return
	}
	data, _, err := encodeMessage(m, m.Serial())
	if err != nil {
		closeFDs(fds)
		u.fail(fmt.Errorf("encoding a message for it: %w", err))
		return
	}
	wantsReply := m.Type == dbus.TypeMethodCall && m.Flags&dbus.FlagNoReplyExpected == 0
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		closeFDs(fds)
		return
	}
	if wantsReply && len(u.pending) >= maxPending {
		u.mu.Unlock()
		closeFDs(fds)
		u.c.fail(&call{msg: m, dest: header(m, dbus.FieldDestination), member: header(m, dbus.FieldMember)}, busName,
			&callError{errLimitsExceeded, fmt.Sprintf("%d calls already wait for the system bus's replies", maxPending)})
		return
	}
	if !u.queue.fits(1, len(data), maxQueued, maxQueuedBytes) {
		u.mu.Unlock()
		closeFDs(fds)
		u.fail(errors.New("it does not take the client's messages"))
		return
	}
	if wantsReply {
		u.pending[m.Serial()] = kind
	}
	u.queue.push(outgoing{data: data, fds: fds})
	u.mu.Unlock()
	select {
	case u.wake <- struct{}{}:
	default:
	}
}

func (u *upstream) writeLoop() {
	defer u.c.bus.wg.Done()
	for {
		select {
		case <-u.wake:
		case <-u.done:
			return
		}
		for {
			var o outgoing
			ok := false
			u.mu.Lock()
			if !u.closed {
				o, ok = u.queue.pop()
			}
			u.mu.Unlock()
			if !ok {
				break
			}
			err := u.nc.SetWriteDeadline(time.Now().Add(u.c.bus.tun.writeTimeout))
			if err == nil {
				err = linux.SendAll(u.raw, o.data, o.fds)
			}
			closeFDs(o.fds)
			if err != nil {
				u.fail(fmt.Errorf("writing: %w", err))
				return
			}
		}
	}
}

func (u *upstream) readLoop() {
	defer u.c.bus.wg.Done()
	for {
		raw, err := readMessageUpTo(u.r, maxUpstreamMessage)
		var m *dbus.Message
		if err == nil {
			m, err = decodeMessage(raw)
		}
		var fds []int
		if err == nil {
			fds, err = u.fds.take(m)
		}
		if err != nil {
			u.fail(fmt.Errorf("reading: %w", err))
			return
		}
		u.deliver(m, fds)
	}
}

// deliver hands a message from the upstream bus to the client, addressed
// to the client's name here.
func (u *upstream) deliver(m *dbus.Message, fds []int) {
	c := u.c
	iface, member := header(m, dbus.FieldInterface), header(m, dbus.FieldMember)
	switch {
	case m.Type == dbus.TypeSignal && header(m, dbus.FieldSender) == busName && (member == "NameAcquired" || member == "NameLost") &&
		len(m.Body) == 1 && m.Body[0] == u.name:
		// About the upstream connection's own unique name, not the client's.
		closeFDs(fds)
		return
	case m.Type == dbus.TypeSignal && (iface == managerIface || strings.HasPrefix(iface, logindName+".")):
		// org.freedesktop.login1 on this bus is nodeinit's: a logind of the
		// host must not tell the kubelet to shut down.
		closeFDs(fds)
		return
	}
	if _, ok := m.Headers[dbus.FieldDestination]; ok {
		c.mu.Lock()
		m.Headers[dbus.FieldDestination] = dbus.MakeVariant(c.name)
		c.mu.Unlock()
	}
	if m.Type == dbus.TypeMethodReply || m.Type == dbus.TypeError {
		serial, _ := m.Headers[dbus.FieldReplySerial].Value().(uint32)
		u.mu.Lock()
		kind, ok := u.pending[serial]
		delete(u.pending, serial)
		u.mu.Unlock()
		if ok && kind == listNamesReply && m.Type == dbus.TypeMethodReply && len(m.Body) == 1 {
			// The names of this bus that the upstream does not have.
			names, _ := m.Body[0].([]string)
			for _, n := range []string{logindName, logindOwner} {
				if !containsString(names, n) {
					names = append(names, n)
				}
			}
			m.Body[0] = names
		}
	}
	data, _, err := encodeMessage(m, c.bus.nextSerial())
	if err != nil {
		closeFDs(fds)
		klog.V(1).InfoS("Dropped a message from the system bus that cannot be passed on", "pid", c.cred.Pid, "name", c.name, "err", err)
		return
	}
	c.enqueue(outgoing{data: data, fds: fds})
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// fail ends the pass-through of this client: the calls that wait for a
// reply get NoReply, and later ones what a bus without the upstream's
// names answers. The client's own connection stays.
func (u *upstream) fail(err error) {
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return
	}
	u.closed = true
	pending := u.pending
	u.pending = nil
	q := u.queue.take()
	u.mu.Unlock()
	close(u.done)
	u.nc.Close()
	u.fds.close()
	drop(q)
	c := u.c
	c.px.mu.Lock()
	c.px.failed = true
	closing := c.px.closed
	c.px.mu.Unlock()
	if closing {
		return
	}
	klog.InfoS("The pass-through to the system bus ended for a D-Bus client", "pid", c.cred.Pid, "name", c.name, "waiting", len(pending), "err", err)
	for serial := range pending {
		e := newError(&dbus.Message{}, busName, c.name, errNoReply, "Message recipient disconnected from message bus without replying")
		e.Headers[dbus.FieldReplySerial] = dbus.MakeVariant(serial)
		c.send(e)
	}
}

// close ends the connection because the client's has ended.
func (u *upstream) close() { u.fail(errors.New("the client's connection closed")) }
