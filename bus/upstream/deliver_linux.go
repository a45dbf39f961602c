package upstream

import (
	"fmt"
	"slices"

	"github.com/godbus/dbus/v5"
	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/bus/internal/wire"
	"github.com/nodeinit/nodeinit/bus/service"
	"github.com/nodeinit/nodeinit/internal/clientlog"
)

// What comes down from the system bus: read, then passed on to the
// client, addressed to its name on the bus, or dropped (the package doc
// has the rules).

// readLoop reads what the system bus sends, until the pass-through ends.
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
