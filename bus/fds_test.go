package bus

import (
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/bus/internal/wire"
	"github.com/nodeinit/nodeinit/bus/service"
)

// sendWithFDs writes a call with fds attached, as SCM_RIGHTS on its first
// byte, and its UNIX_FDS header field saying how many.
func (c *raw) sendWithFDs(serial uint32, fds []int, dest string, path dbus.ObjectPath, iface, member string, body ...any) {
	c.t.Helper()
	m := wire.WithBody(&dbus.Message{Type: dbus.TypeMethodCall, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldDestination: dbus.MakeVariant(dest),
		dbus.FieldPath:        dbus.MakeVariant(path),
		dbus.FieldInterface:   dbus.MakeVariant(iface),
		dbus.FieldMember:      dbus.MakeVariant(member),
	}}, body...)
	if len(fds) > 0 {
		m.Headers[dbus.FieldUnixFDs] = dbus.MakeVariant(uint32(len(fds)))
	}
	data, _, err := wire.Encode(m, serial)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, _, err := c.WriteMsgUnix(data, unix.UnixRights(fds...), nil); err != nil {
		c.t.Fatal(err)
	}
}

// A descriptor a client sends with a call the bus answers itself is closed
// once the call is answered: the client's pipe sees its reader gone.
func TestADescriptorSentWithACallIsClosedOnceAnswered(t *testing.T) {
	b := listen(t, testOptions{})
	c := dialRaw(t, b)
	c.auth()
	c.hello()
	var p [2]int
	must(t, unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK))
	defer unix.Close(p[1])
	c.sendWithFDs(2, []int{p[0]}, logindName, logindPath, service.PropertiesIface, "Get", managerIface, "InhibitDelayMaxUSec")
	unix.Close(p[0])
	if m := c.message(); m.Type != dbus.TypeMethodReply {
		t.Fatalf("Get with a descriptor: %v", m)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		fds := []unix.PollFd{{Fd: int32(p[1]), Events: unix.POLLOUT}}
		if _, err := unix.Poll(fds, 100); err == nil && fds[0].Revents&unix.POLLERR != 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the bus still holds the read end of the pipe the client sent")
		}
	}
}

// A client that sends more descriptors than any message claims, or a
// message that claims more than came, is dropped.
func TestDescriptorsBeyondTheBoundDropTheClient(t *testing.T) {
	b := listen(t, testOptions{})
	t.Run("too many at once", func(t *testing.T) {
		c := dialRaw(t, b)
		c.auth()
		c.hello()
		fds := make([]int, wire.MaxHeldFDs+1)
		for i := range fds {
			fds[i] = 0 // stdin, as often as it takes
		}
		c.sendWithFDs(2, fds, logindName, logindPath, service.PropertiesIface, "Get", managerIface, "InhibitDelayMaxUSec")
		c.closedByServer()
	})
	t.Run("a claim without descriptors", func(t *testing.T) {
		c := dialRaw(t, b)
		c.auth()
		c.hello()
		m := encodeCall(t, 2, logindName, logindPath, service.PropertiesIface, "Get", managerIface, "InhibitDelayMaxUSec")
		msg, err := wire.Decode(m)
		must(t, err)
		msg.Headers[dbus.FieldUnixFDs] = dbus.MakeVariant(uint32(1))
		data, _, err := wire.Encode(msg, 2)
		must(t, err)
		c.send(string(data))
		c.closedByServer()
	})
	if _, err := (kubelet{connect(t, b)}).currentInhibitDelay(); err != nil {
		t.Errorf("the bus does not serve others: %v", err)
	}
}
