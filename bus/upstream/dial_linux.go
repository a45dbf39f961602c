package upstream

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/nodeinit/nodeinit/bus/internal/wire"
	"github.com/nodeinit/nodeinit/bus/service"
	"github.com/nodeinit/nodeinit/internal/linux"
)

// link is a connection to a bus that has said Hello there: the socket,
// the reader of its bytes and of the descriptors that come with them, and
// the unique name the bus gave. A pass-through (Conn) and a Caller are
// each one.
type link struct {
	nc     *net.UnixConn
	raw    syscall.RawConn
	fds    *wire.FDReader
	r      *bufio.Reader
	name   string // its unique name there
	unixFD bool   // the bus agreed to pass descriptors
}

// dial connects to the bus at address, authenticates as this process
// (EXTERNAL), asks for unix fd passing when unixFD, and says Hello, within
// timeout. Its reader takes up to fdsPerRead descriptors with one read and
// holds at most fdsHeld that no message has claimed.
func dial(address string, timeout time.Duration, unixFD bool, fdsPerRead, fdsHeld int) (link, error) {
	path, err := UnixSocket(address)
	if err != nil {
		return link{}, err
	}
	d := net.Dialer{Timeout: timeout}
	nc, err := d.Dial("unix", path)
	if err != nil {
		return link{}, err
	}
	l := link{nc: nc.(*net.UnixConn)}
	if l.raw, err = l.nc.SyscallConn(); err != nil {
		nc.Close()
		return link{}, err
	}
	l.fds = wire.NewFDReaderOf(l.raw, fdsPerRead, fdsHeld)
	l.r = bufio.NewReaderSize(l.fds, 4096)
	if l.name, l.unixFD, err = handshake(l.nc, l.raw, l.r, unixFD, timeout); err != nil {
		nc.Close()
		l.fds.Close()
		return link{}, err
	}
	return l, nil
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
