package bus

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"
	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/bus/internal/wire"
	"github.com/nodeinit/nodeinit/bus/service"
	"github.com/nodeinit/nodeinit/identity"
	"github.com/nodeinit/nodeinit/internal/clientlog"
	"github.com/nodeinit/nodeinit/internal/linux"
)

// The services nodeinit serves on the bus itself (package service): each
// has a unique name of its own, ":nodeinit.0" for the first, which owns
// its well-known names, answers for them, and sends their signals.
// Connections get the unique names after them.

// local is a service on the bus. It is the service's Host.
type local struct {
	service.Service
	b     *Bus
	owner string
	names service.Names
}

func (b *Bus) register(services []service.Service) {
	for i, s := range services {
		l := &local{Service: s, b: b, owner: localPrefix + strconv.Itoa(i), names: s.Names()}
		b.services = append(b.services, l)
		s.Attach(l)
	}
}

// owns reports whether the service owns name, as its unique name or a
// well-known one; a Shared name only when upstream is false.
func (l *local) owns(name string, upstream bool) bool {
	return name == l.owner || slices.Contains(l.names.Own, name) || !upstream && slices.Contains(l.names.Shared, name)
}

// serviceOf is the service a call to dest goes to, nil for none. A call
// for a Shared name goes to the service first, system bus or not.
func (b *Bus) serviceOf(dest string) *local {
	for _, l := range b.services {
		if l.owns(dest, false) {
			return l
		}
	}
	return nil
}

// localOwner is the unique name that owns name on this bus, "" if none:
// the bus itself, a service, or a connection that has said Hello.
func (b *Bus) localOwner(name string, upstream bool) string {
	if name == service.BusName {
		return service.BusName
	}
	for _, l := range b.services {
		if l.owns(name, upstream) {
			return l.owner
		}
	}
	if c := b.connNamed(name); c != nil {
		return name
	}
	return ""
}

// connNamed is the connection whose unique name is name, nil for none.
func (b *Bus) connNamed(name string) *conn {
	if !strings.HasPrefix(name, localPrefix) {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for c := range b.conns {
		if c.Name() == name {
			return c
		}
	}
	return nil
}

// localCred is the peer behind a name of this bus: nodeinit itself for
// the bus's and the services' names, a client's SO_PEERCRED for its
// unique name. ok is false for a name this bus does not have.
func (b *Bus) localCred(name string, upstream bool) (uid, pid uint32, ok bool) {
	owner := b.localOwner(name, upstream)
	if owner == service.BusName || owner != "" && b.serviceOf(owner) != nil {
		return uint32(os.Getuid()), uint32(os.Getpid()), true
	}
	if c := b.connNamed(owner); c != nil {
		return c.cred.Uid, uint32(c.cred.Pid), true
	}
	return 0, 0, false
}

// localNames are the names on this bus, as ListNames gives them: the
// bus's, the services' (their Shared names only without a system bus)
// and the connections'.
func (b *Bus) localNames(upstream bool) []string {
	names := []string{service.BusName}
	for _, l := range b.services {
		names = append(names, l.names.Own...)
		if !upstream {
			names = append(names, l.names.Shared...)
		}
		names = append(names, l.owner)
	}
	b.mu.Lock()
	var unique []string
	for c := range b.conns {
		if n := c.Name(); n != "" {
			unique = append(unique, n)
		}
	}
	b.mu.Unlock()
	slices.Sort(unique)
	return append(names, unique...)
}

// localName reports whether name is one that only this bus has: a unique
// name of its own, or a service's Own name. Such a name's signals from
// the system bus are dropped, and rules about it stay here.
func (b *Bus) localName(name string) bool {
	if strings.HasPrefix(name, localPrefix) {
		return true
	}
	for _, l := range b.services {
		if slices.Contains(l.names.Own, name) {
			return true
		}
	}
	return false
}

// localSignal reports whether a signal of interface iface from path can
// only be a service's: an interface under a service's Own name, or a path
// below its objects' root.
func (b *Bus) localSignal(iface, path string) bool {
	for _, l := range b.services {
		for _, n := range l.names.Own {
			if strings.HasPrefix(iface, n+".") {
				return true
			}
		}
		if l.names.Path != "" && inPathNamespace(path, string(l.names.Path)) {
			return true
		}
	}
	return false
}

// Emit is service.Host's: the signal goes, from the service's unique
// name, to every connection with a match rule for it, where a rule's
// sender may be that name or one of the service's well-known names.
func (l *local) Emit(path dbus.ObjectPath, iface, member string, body ...any) int {
	b := l.b
	sig := wire.NewSignal(l.owner, path, iface, member, body...)
	data, _, err := wire.Encode(sig, b.nextSerial())
	if err != nil {
		// The service's own message: this cannot fail short of a bug.
		klog.ErrorS(err, "Could not encode a signal", "interface", iface, "member", member)
		return 0
	}
	senders := append([]string{l.owner}, l.names.Own...)
	senders = append(senders, l.names.Shared...)
	b.mu.Lock()
	var conns []*conn
	if !b.closed {
		for c := range b.conns {
			conns = append(conns, c)
		}
	}
	b.mu.Unlock()
	sent := 0
	for _, c := range conns {
		if c.Wants(sig, senders) && c.enqueue(wire.Outgoing{Data: data}) {
			sent++
		}
	}
	return sent
}

// Executor is service.Host's: the executor's pid, 0 before it is known.
func (l *local) Executor() int {
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	return l.b.executor.pid
}

// Log is service.Host's: the bus's bound on what clients make it log.
func (l *local) Log() *clientlog.Log { return l.b.log }

// Now is service.Host's: the bus's clock.
func (l *local) Now() time.Time { return l.b.tun.now() }

// Go is service.Host's: f runs as one of the bus's goroutines.
func (l *local) Go(f func()) { l.b.spawn(f) }

// maxMachineIDFile bounds the machine-id file: 32 hex digits and a
// newline, with room for white space around them.
const maxMachineIDFile = 64

// Standard is service.Answerer's: it answers the interfaces every object
// has, Peer and Introspectable, for a service whose introspection data
// is objects (by path). It reports false for another call.
func (c *conn) Standard(in *service.Call, sender string, objects map[string]string) bool {
	switch {
	case in.Iface == service.PeerIface && in.Member == "Ping":
		in.Reply(sender)
	case in.Iface == service.PeerIface && in.Member == "GetMachineId":
		id, err := machineID(c.bus.opts.Root)
		if err != nil {
			in.Fail(sender, &service.Error{Name: service.Failed, Text: "Failed to read the machine ID: " + err.Error()})
		} else {
			in.Reply(sender, id)
		}
	case in.Iface == service.IntrospectableIface && in.Member == "Introspect":
		xml, ok := objects[in.Path]
		if !ok {
			in.Fail(sender, in.UnknownObject())
		} else {
			in.Reply(sender, xml)
		}
	case in.Iface == service.PeerIface || in.Iface == service.IntrospectableIface:
		in.Fail(sender, in.UnknownMethod())
	default:
		return false
	}
	return true
}

// machineID reads the machine ID as dbus-daemon does: /etc/machine-id, or
// /var/lib/dbus/machine-id, each taken only if identity.Valid holds it a
// machine-id, the rule nodeinit's identity holds /etc/machine-id to. Each
// is read as a regular file of at most maxMachineIDFile bytes, so that a
// FIFO or a device there cannot hold the client's reader; a link is
// followed, as one of the two is often a link to the other.
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
