package bus

import (
	"bufio"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/nodeinit/nodeinit/bus/internal/wire"
	"github.com/nodeinit/nodeinit/bus/service"
)

// rulesOf is the number of match rules the bus holds for its one client
// connection.
func rulesOf(t *testing.T, b *Bus) int {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.conns) != 1 {
		t.Fatalf("%d connections, want 1", len(b.conns))
	}
	for c := range b.conns {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.rules)
	}
	return 0
}

// A rule the system bus refuses holds here no more than there: the client
// got the error and knows of no rule to remove, so a rule left here would
// take one of its 64 for good. After 64 refused, a 65th rule is added.
func TestARuleTheSystemBusRefusesIsNotKeptHere(t *testing.T) {
	address, _ := systemBus(t)
	b := listen(t, testOptions{Upstream: address})
	conn := connect(t, b)
	// An interface name that this bus's parser takes (as any string) and
	// dbus-daemon refuses as invalid.
	for i := range maxRules {
		err := conn.BusObject().Call(service.BusName+".AddMatch", 0, "type='signal',interface='not an interface'").Err
		if name := dbusErrorName(err); name != errMatchRuleInvalid {
			t.Fatalf("AddMatch %d of a rule the system bus refuses: %v, want %s", i, err, errMatchRuleInvalid)
		}
	}
	if n := rulesOf(t, b); n != 0 {
		t.Errorf("%d rules held after %d refused by the system bus, want 0", n, maxRules)
	}
	if err := conn.AddMatchSignal(dbus.WithMatchInterface("org.example.Echo"), dbus.WithMatchMember("Pinged")); err != nil {
		t.Errorf("AddMatch after %d refused: %v", maxRules, err)
	}
	if n := rulesOf(t, b); n != 1 {
		t.Errorf("%d rules held after one added, want 1", n)
	}
}

// A rule that cannot go up to the system bus, because too many of the
// client's calls wait there already, is refused here too. The system bus
// is a stand-in that answers Hello and nothing after (dbus-daemon itself
// refuses a connection's calls beyond its own limit of waiting replies).
func TestARuleThatCannotGoUpIsNotKeptHere(t *testing.T) {
	b := listen(t, testOptions{Upstream: silentSystemBus(t)})
	c := dialRaw(t, b)
	c.auth()
	c.hello()
	// More calls than may wait for the system bus's replies (256), in
	// chunks that the pass-through's queue takes (64): each chunk ends
	// with GetId, which the system bus answers once it has read the
	// chunk.
	serial := uint32(1)
	refused := 0
	for range 10 {
		var chunk []byte
		for range 30 {
			serial++
			chunk = append(chunk, encodeCall(t, serial, "org.example.Echo", "/org/example/Echo", "org.example.Echo", "Echo", "x")...)
		}
		serial++
		chunk = append(chunk, encodeCall(t, serial, service.BusName, service.BusPath, service.BusName, "GetId")...)
		c.send(string(chunk))
		for {
			m := c.message()
			if s, _ := m.Headers[dbus.FieldReplySerial].Value().(uint32); s == serial {
				break
			}
			if m.Type == dbus.TypeError && wire.Header(m, dbus.FieldErrorName) == service.LimitsExceeded {
				refused++
			}
		}
	}
	if refused == 0 {
		t.Fatal("no call was refused for the calls waiting: the limit was not reached")
	}
	serial++
	c.call(serial, service.BusName, service.BusPath, service.BusName, "AddMatch", "type='signal',interface='org.example.Echo'")
	if m := c.replyTo(serial); m.Type != dbus.TypeError || wire.Header(m, dbus.FieldErrorName) != service.LimitsExceeded {
		t.Fatalf("AddMatch behind the waiting calls: %v, want %s", m, service.LimitsExceeded)
	}
	if n := rulesOf(t, b); n != 0 {
		t.Errorf("%d rules held after an AddMatch that could not go up, want 0", n)
	}
}

// silentSystemBus is a system bus that authenticates one connection,
// answers its Hello, and then reads all it is sent and answers nothing
// but GetId.
// It returns its address.
func silentSystemBus(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "system_bus_socket")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	must(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		r := bufio.NewReader(nc)
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				return
			}
			l = strings.TrimPrefix(strings.TrimSuffix(l, "\r\n"), "\x00")
			switch {
			case strings.HasPrefix(l, "AUTH "):
				io.WriteString(nc, "OK 0123456789abcdef0123456789abcdef\r\n")
			case l == "NEGOTIATE_UNIX_FD":
				io.WriteString(nc, "AGREE_UNIX_FD\r\n")
			}
			if strings.HasPrefix(l, "BEGIN") {
				break
			}
		}
		data, err := wire.ReadMessage(r)
		if err != nil {
			return
		}
		hello, err := wire.Decode(data)
		if err != nil {
			return
		}
		reply, _, err := wire.Encode(wire.WithBody(wire.NewReply(hello, service.BusName, ":1.1"), ":1.1"), 1)
		if err != nil {
			return
		}
		nc.Write(reply)
		for serial := uint32(2); ; serial++ {
			data, err := wire.ReadMessage(r)
			if err != nil {
				return
			}
			m, err := wire.Decode(data)
			if err != nil {
				return
			}
			if wire.Header(m, dbus.FieldMember) == "GetId" {
				id, _, _ := wire.Encode(wire.WithBody(wire.NewReply(m, service.BusName, ":1.1"), "0123456789abcdef0123456789abcdef"), serial)
				nc.Write(id)
			}
		}
	}()
	return "unix:path=" + dbus.EscapeBusAddressValue(path)
}

// replyTo reads messages up to the reply to the call serial, and returns it.
func (c *raw) replyTo(serial uint32) *dbus.Message {
	c.t.Helper()
	for {
		m := c.message()
		if s, _ := m.Headers[dbus.FieldReplySerial].Value().(uint32); s == serial && (m.Type == dbus.TypeMethodReply || m.Type == dbus.TypeError) {
			return m
		}
	}
}
