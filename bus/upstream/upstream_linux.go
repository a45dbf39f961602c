package upstream

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

	"github.com/nodeinit/nodeinit/bus/internal/wire"
	"github.com/nodeinit/nodeinit/bus/service"
	"github.com/nodeinit/nodeinit/internal/clientlog"
	"github.com/nodeinit/nodeinit/internal/linux"
)

// Limits of the pass-through.
const (
	// dialTimeout bounds opening the connection: the dial, the handshake and
	// Hello, while the client's call waits.
	dialTimeout = 5 * time.Second
	// maxPending bounds the client's calls that wait for the upstream's
	// reply.
	maxPending = 256
)

// Kind is the kind of reply a call that went up waits for.
type Kind int

const (
	// Plain replies go down as they come.
	Plain Kind = iota
	// ListNames replies get the bus's services' names added.
	ListNames
)

// Client is the bus's connection of one client, as its pass-through sees
// it.
type Client interface {
	// Name is the client's unique name on the bus.
	Name() string
	// Pid is the client's process, for the log.
	Pid() int32
	// Pass queues a message from the system bus for the client when the
	// client's queue has room for it beside what it keeps for the bus's
	// own messages; wait says whether it may wait (until stop closes) for
	// that room. It reports whether o was queued; o's fds are Pass's.
	Pass(o wire.Outgoing, wait bool, stop <-chan struct{}) bool
	// Wants reports whether a match rule of the client's asks for the
	// signal m, from a sender of one of the names senders.
	Wants(m *dbus.Message, senders []string) bool
	// Ended tells the bus that the pass-through has ended, and reports
	// whether the client's connection is closing anyway.
	Ended() (closing bool)
	// Close closes the client's connection.
	Close()
}

// Host is the bus, as a pass-through sees it.
type Host interface {
	// LocalName reports whether a name is one only the bus has (its
	// unique names, its services' own names): the system bus's
	// NameOwnerChanged about it is dropped.
	LocalName(name string) bool
	// LocalSignal reports whether a signal of interface iface from path
	// can only be one of the bus's services': one from the system bus is
	// dropped (a logind of the host must not tell the kubelet to shut
	// down).
	LocalSignal(iface, path string) bool
	// ServiceNames are the bus's services' names, for ListNames.
	ServiceNames() []string
	// Serial is the bus's next serial, for a message of its own.
	Serial() uint32
	// Go runs f on one of the bus's goroutines.
	Go(f func())
	// Log bounds what clients make nodeinit log.
	Log() *clientlog.Log
}

// Options are the same for every pass-through of a bus.
type Options struct {
	// Address is the system bus's D-Bus address (Address).
	Address string
	// MaxMessage bounds a message from the system bus that is passed
	// on: a larger one is read and dropped.
	MaxMessage uint64
	// WriteTimeout bounds each write to the system bus.
	WriteTimeout time.Duration
	// Now is the clock.
	Now func() time.Time
	// Hook, when set, is called by the reader for each message it has
	// read ("reading") and by the writer before each write ("writing"):
	// the tests' way into those goroutines.
	Hook func(during string)
}

// SystemBusSocket is where the system bus listens (the specification's
// default system bus address).
const SystemBusSocket = "/run/dbus/system_bus_socket"

// Address is the address of the system bus this process can reach,
// to pass through to: DBUS_SYSTEM_BUS_ADDRESS from getenv, else
// SystemBusSocket under root. The error says why there is none: the
// variable is unset and there is no socket there, or the socket the
// variable names is not there.
func Address(getenv func(string) string, root string) (string, error) {
	address := getenv("DBUS_SYSTEM_BUS_ADDRESS")
	if address == "" {
		p := filepath.Join(root, SystemBusSocket)
		if !isSocket(p) {
			return "", fmt.Errorf("DBUS_SYSTEM_BUS_ADDRESS is unset and there is no socket at %s", p)
		}
		return "unix:path=" + dbus.EscapeBusAddressValue(p), nil
	}
	p, err := UnixSocket(address)
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

// UnixSocket is the first unix socket a D-Bus address names
// ("unix:path=..." or "unix:abstract=..."; addresses separated by ';').
func UnixSocket(address string) (string, error) {
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

// Conn is one connection to the system bus, for one client.
type Conn struct {
	c      Client
	h      Host
	opts   *Options
	nc     *net.UnixConn
	raw    syscall.RawConn
	fds    *wire.FDReader
	r      *bufio.Reader
	name   string // its unique name there
	unixFD bool

	mu      sync.Mutex
	queue   wire.Outbox
	pending map[uint32]Kind // the client's serials waiting for a reply
	closed  bool
	dropped int // messages from the upstream bus not passed on

	wake chan struct{}
	done chan struct{}
}

// Dial connects to the system bus at o.Address for the client c of the
// bus h, authenticates as nodeinit (EXTERNAL, with unix fd passing when
// unixFD, the client has it) and says Hello, within dialTimeout. Start starts
// passing messages.
func Dial(c Client, h Host, o *Options, unixFD bool) (*Conn, error) {
	path, err := UnixSocket(o.Address)
	if err != nil {
		return nil, err
	}
	d := net.Dialer{Timeout: dialTimeout}
	nc, err := d.Dial("unix", path)
	if err != nil {
		return nil, err
	}
	u := &Conn{c: c, h: h, opts: o, nc: nc.(*net.UnixConn), pending: map[uint32]Kind{}, wake: make(chan struct{}, 1), done: make(chan struct{})}
	if err := u.open(unixFD); err != nil {
		nc.Close()
		return nil, err
	}
	return u, nil
}

func (u *Conn) open(unixFD bool) error {
	var err error
	if u.raw, err = u.nc.SyscallConn(); err != nil {
		return err
	}
	u.fds = wire.NewFDReader(u.raw)
	u.r = bufio.NewReaderSize(u.fds, 4096)
	u.name, u.unixFD, err = handshake(u.nc, u.raw, u.r, unixFD, dialTimeout)
	return err
}

// handshake authenticates as this process's user (EXTERNAL), asks for unix
// fd passing when unixFD, and says Hello, on nc, whose bytes r reads,
// within timeout. It returns the unique name the bus gave and whether the
// bus agreed to pass descriptors.
func handshake(nc *net.UnixConn, raw syscall.RawConn, r *bufio.Reader, unixFD bool, timeout time.Duration) (name string, agreed bool, err error) {
	if err := nc.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", false, err
	}
	line := func(send string) (string, error) {
		if err := linux.SendAll(raw, []byte(send), nil); err != nil {
			return "", err
		}
		return wire.ReadAuthLine(r)
	}
	uid := hex.EncodeToString([]byte(strconv.Itoa(os.Getuid())))
	got, err := line("\x00AUTH EXTERNAL " + uid + "\r\n")
	if err != nil {
		return "", false, err
	}
	if !strings.HasPrefix(got, "OK ") {
		return "", false, fmt.Errorf("the upstream bus refused EXTERNAL authentication: %q", got)
	}
	if unixFD {
		if got, err = line("NEGOTIATE_UNIX_FD\r\n"); err != nil {
			return "", false, err
		}
		agreed = got == "AGREE_UNIX_FD"
	}
	hello := wire.WithBody(&dbus.Message{Type: dbus.TypeMethodCall, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldDestination: dbus.MakeVariant(service.BusName),
		dbus.FieldPath:        dbus.MakeVariant(service.BusPath),
		dbus.FieldInterface:   dbus.MakeVariant(service.BusName),
		dbus.FieldMember:      dbus.MakeVariant("Hello"),
	}})
	data, _, err := wire.Encode(hello, 1)
	if err != nil {
		return "", false, err
	}
	if err := linux.SendAll(raw, append([]byte("BEGIN\r\n"), data...), nil); err != nil {
		return "", false, err
	}
	// The reply comes first; a bus sends nothing else before it.
	m, err := wire.ReadMessage(r)
	if err != nil {
		return "", false, err
	}
	reply, err := wire.Decode(m)
	if err != nil {
		return "", false, err
	}
	if reply.Type != dbus.TypeMethodReply || len(reply.Body) != 1 {
		return "", false, fmt.Errorf("the upstream bus answered Hello with %s", reply)
	}
	name, _ = reply.Body[0].(string)
	return name, agreed, nc.SetDeadline(time.Time{})
}

// Start passes messages both ways, on two goroutines of the bus's.
func (u *Conn) Start() {
	u.h.Go(u.readLoop)
	u.h.Go(u.writeLoop)
	klog.V(1).InfoS("Passing a D-Bus client's calls through to the system bus", "pid", u.c.Pid(), "name", u.c.Name(), "upstreamName", u.name)
}

// Name is the connection's unique name on the system bus.
func (u *Conn) Name() string { return u.name }

// Dropped counts the messages from the system bus not passed on.
func (u *Conn) Dropped() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.dropped
}

// Send queues data, a client's message with the serial serial, for the
// system bus, with fds (Send's from here on), noting a call that waits for
// a reply of the kind kind. The error is what to answer the client's call
// with instead. A full queue ends the pass-through, as a full client
// queue ends the client.
func (u *Conn) Send(serial uint32, data []byte, fds []int, kind Kind) *service.Error {
	if !u.unixFD && len(fds) > 0 {
		wire.CloseFDs(fds)
		return &service.Error{Name: service.NotSupported, Text: "The system bus this bus passes through to did not agree to unix fd passing"}
	}
	wantsReply := dbus.Type(data[1]) == dbus.TypeMethodCall && dbus.Flags(data[2])&dbus.FlagNoReplyExpected == 0
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		wire.CloseFDs(fds)
		return nil
	}
	if wantsReply && len(u.pending) >= maxPending {
		u.mu.Unlock()
		wire.CloseFDs(fds)
		return &service.Error{Name: service.LimitsExceeded, Text: fmt.Sprintf("%d calls already wait for the system bus's replies", maxPending)}
	}
	if !u.queue.Fits(1, len(data), wire.MaxQueued, wire.MaxQueuedBytes) {
		u.mu.Unlock()
		wire.CloseFDs(fds)
		u.fail(errors.New("it does not take the client's messages"))
		return nil
	}
	if wantsReply {
		u.pending[serial] = kind
	}
	u.queue.Push(wire.Outgoing{Data: data, FDs: fds})
	u.mu.Unlock()
	wire.Notify(u.wake)
	return nil
}

// recovered, deferred in the upstream's reader and writer, turns a panic
// into the end of that pass-through and of the client's connection: a bug,
// logged with its stack, that must not end PID 1.
func (u *Conn) recovered(during string) {
	if p := recover(); p != nil {
		err := fmt.Errorf("panic: %v", p)
		u.fail(err)
		u.h.Log().Error(err, "A D-Bus client's pass-through to the system bus failed; closed its connection",
			"pid", u.c.Pid(), "during", during, "stack", string(debug.Stack()))
	}
}

func (u *Conn) writeLoop() {
	defer u.recovered("writing to the system bus")
	deadline := func() time.Time {
		if u.opts.Hook != nil {
			u.opts.Hook("writing")
		}
		return u.opts.Now().Add(u.opts.WriteTimeout)
	}
	if err := wire.Send(u.nc, u.raw, u.wake, u.done, u.pop, deadline); err != nil {
		u.fail(fmt.Errorf("writing: %w", err))
	}
}

func (u *Conn) pop() (wire.Outgoing, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return wire.Outgoing{}, false
	}
	return u.queue.Pop()
}

func (u *Conn) readLoop() {
	defer u.recovered("reading from the system bus")
	for {
		f, err := readFrame(u.r, u.opts.MaxMessage)
		var fds []int
		if err == nil {
			fds, err = u.fds.TakeN(f.uint32Field(dbus.FieldUnixFDs))
		}
		if err != nil {
			u.fail(fmt.Errorf("reading: %w", err))
			return
		}
		if u.opts.Hook != nil {
			u.opts.Hook("reading")
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
func (u *Conn) deliver(f *frame, fds []int) {
	c := u.c
	name := c.Name()
	if f.raw == nil {
		u.drop(f, fds, fmt.Sprintf("larger than the %d bytes the pass-through passes on", u.opts.MaxMessage))
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
		if kind == ListNames && f.typ == dbus.TypeMethodReply {
			data, err = u.withLocalNames(f, name)
		}
	case f.typ == dbus.TypeSignal && sender == service.BusName:
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
		if (member == "NameAcquired" || member == "NameLost") && arg0 == u.name || member == "NameOwnerChanged" && u.h.LocalName(arg0) {
			// About the upstream connection's own unique name, not the
			// client's; or about a service there (a logind), which is not
			// this bus's.
			wire.CloseFDs(fds)
			return
		}
	case f.typ == dbus.TypeSignal && u.h.LocalSignal(iface, path):
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
	if !c.Pass(wire.Outgoing{Data: data, FDs: fds}, reply, u.done) && !reply {
		u.drop(f, nil, "the client's queue is full")
	}
}

// answered takes the client's call that the reply f answers off the
// calls waiting; ok is false when f answers none of them.
func (u *Conn) answered(f *frame) (kind Kind, ok bool) {
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
func (u *Conn) refuseReply(f *frame, name string) {
	if f.typ != dbus.TypeMethodReply && f.typ != dbus.TypeError {
		return
	}
	if _, ok := u.answered(f); !ok {
		return
	}
	serial := f.uint32Field(dbus.FieldReplySerial)
	e := wire.NewError(&dbus.Message{}, service.BusName, name, service.LimitsExceeded,
		fmt.Sprintf("The reply from %s is %d bytes, more than the %d this bus passes on", clientlog.Clip(f.header(dbus.FieldSender)), f.size, u.opts.MaxMessage))
	e.Headers[dbus.FieldReplySerial] = dbus.MakeVariant(serial)
	data, _, err := wire.Encode(e, u.h.Serial())
	if err == nil {
		u.c.Pass(wire.Outgoing{Data: data}, true, u.done)
	}
}

// wanted reports whether a match rule of the client's asks for the signal
// f, sent to the pass-through alone: as a bus does, but with a well-known
// name as a rule's sender matching nothing, as this bus does not know who
// owns it there.
func (u *Conn) wanted(f *frame, name string) bool {
	m, err := f.decode()
	if err != nil {
		return false
	}
	m.Headers[dbus.FieldDestination] = dbus.MakeVariant(name)
	return u.c.Wants(m, []string{f.header(dbus.FieldSender)})
}

// withLocalNames is the upstream bus's ListNames reply with the services'
// names (Own and unique) that it does not have, to the client's name.
func (u *Conn) withLocalNames(f *frame, dest string) ([]byte, error) {
	m, err := f.decode()
	if err != nil {
		return nil, err
	}
	if len(m.Body) != 1 {
		return nil, fmt.Errorf("a ListNames reply of %d values", len(m.Body))
	}
	names, _ := m.Body[0].([]string)
	for _, n := range u.h.ServiceNames() {
		if !slices.Contains(names, n) {
			names = append(names, n)
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
func (u *Conn) drop(f *frame, fds []int, why string) {
	wire.CloseFDs(fds)
	u.mu.Lock()
	u.dropped++
	first := u.dropped == 1
	u.mu.Unlock()
	kv := []any{"pid", u.c.Pid(), "type", f.typ.String(), "sender", clientlog.Clip(f.header(dbus.FieldSender)),
		"interface", clientlog.Clip(f.header(dbus.FieldInterface)), "member", clientlog.Clip(f.header(dbus.FieldMember)), "bytes", f.size, "reason", why}
	if first {
		u.h.Log().Info("Dropped a message from the system bus for a D-Bus client", kv...)
		return
	}
	klog.V(2).InfoS("Dropped a message from the system bus for a D-Bus client", kv...)
}

// fail ends the pass-through of this client and closes the client's
// connection (unless that is what ended it): the client's library
// connects again, and the new connection gets a new pass-through, where
// this one, its match rules and the names it asked for there are gone.
func (u *Conn) fail(err error) {
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
	if c.Ended() {
		if dropped > 0 {
			klog.V(1).InfoS("A D-Bus client's pass-through to the system bus ended", "pid", c.Pid(), "name", c.Name(), "dropped", dropped)
		}
		return
	}
	u.h.Log().Info("The pass-through to the system bus ended for a D-Bus client; closed its connection",
		"pid", c.Pid(), "waiting", pending, "dropped", dropped, "err", clientlog.ClipTo(err.Error(), clientlog.MaxErrorText))
	c.Close()
}

// Close ends the connection because the client's has ended.
func (u *Conn) Close() { u.fail(errors.New("the client's connection closed")) }
