package bus

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/bus/service"
)

// FuzzConnection feeds arbitrary bytes to one connection of a bus, through
// a real socket and the code that serves every connection: the admission,
// the handshake, the message reader and the answers. Whatever comes in, the bus must not
// panic or hang, and all it sends back must be well-formed: authentication
// lines, then D-Bus messages godbus decodes.
func FuzzConnection(f *testing.F) {
	f.Add([]byte(""))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	f.Add([]byte("\x00AUTH\r\nAUTH EXTERNAL 30\r\nAUTH EXTERNAL 7a7a\r\nFOO\r\nCANCEL\r\nBEGIN\r\n"))
	// godbus's handshake with this process's uid, and the kubelet's calls.
	godbus := "\x00AUTH\r\nAUTH EXTERNAL " + hexID(strconv.Itoa(os.Getuid())) + "\r\nNEGOTIATE_UNIX_FD\r\nBEGIN\r\n"
	f.Add([]byte(godbus + kubeletCalls(f)))
	// sd-bus's pipelined handshake, whatever the uid.
	sdbus := "\x00AUTH EXTERNAL\r\nDATA\r\nNEGOTIATE_UNIX_FD\r\nBEGIN\r\n"
	f.Add([]byte(sdbus + kubeletCalls(f)))
	f.Add([]byte(sdbus + kubeletCalls(f)[:100]))
	f.Add([]byte(sdbus + string(encodeCall(f, 1, logindName, logindPath, managerIface, "Inhibit", "shutdown", "a", "b", "delay"))))
	huge := encodeCall(f, 1, service.BusName, service.BusPath, service.BusName, "Hello", "abcd")
	binary.LittleEndian.PutUint32(huge[len(huge)-9:], 3<<30)
	f.Add(append([]byte(sdbus), huge...))
	bigEndian := encodeCall(f, 1, service.BusName, service.BusPath, service.BusName, "Hello")
	bigEndian[0] = 'B'
	f.Add(append([]byte(sdbus), bigEndian...))

	f.Fuzz(func(t *testing.T, input []byte) {
		b := newTestBus("fuzz", testOptions{InhibitDelayMax: time.Minute}, defaultTunables())
		// The real admission: the test process is the executor, and the
		// peer of the pair is the test process.
		if err := b.AdmitExecutor(os.Getpid()); err != nil {
			t.Fatal(err)
		}
		server, client := socketPair(t)
		b.admit(server)
		go func() {
			// The bus may stop reading early: a failed write ends this.
			client.Write(input)
			client.CloseWrite()
		}()
		client.SetReadDeadline(time.Now().Add(10 * time.Second))
		out, err := io.ReadAll(client)
		if err != nil && !errors.Is(err, unix.ECONNRESET) {
			t.Fatalf("reading what the bus sent: %v", err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		checkOutput(t, out)
	})
}

// kubeletCalls are the kubelet's messages, in order, after the handshake.
func kubeletCalls(t testing.TB) string {
	var s []byte
	for _, m := range [][]byte{
		encodeCall(t, 1, service.BusName, service.BusPath, service.BusName, "Hello"),
		encodeCall(t, 2, logindName, logindPath, service.PropertiesIface, "Get", managerIface, "InhibitDelayMaxUSec"),
		encodeCall(t, 3, "org.freedesktop.systemd1", "/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager", "KillUnit", "systemd-logind.service", "all", int32(1)),
		encodeCall(t, 4, logindName, logindPath, managerIface, "Inhibit", "shutdown", "kubelet", "Kubelet needs time to handle node shutdown", "delay"),
		encodeCall(t, 5, service.BusName, service.BusPath, service.BusName, "AddMatch", "type='signal',interface='org.freedesktop.login1.Manager',member='PrepareForShutdown',path='/org/freedesktop/login1'"),
		encodeCall(t, 6, service.BusName, service.BusPath, service.BusName, "RemoveMatch", "type='signal',interface='org.freedesktop.login1.Manager',member='PrepareForShutdown',path='/org/freedesktop/login1'"),
		encodeCall(t, 7, logindName, logindPath, managerIface, "PowerOff", false),
	} {
		s = append(s, m...)
	}
	return string(s)
}

// socketPair is a connected pair of unix stream sockets: the server's end
// as a descriptor, as the bus accepts one, and the client's.
func socketPair(t *testing.T) (server int, client *net.UnixConn) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[1]), "socket")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return fds[0], c.(*net.UnixConn)
}

// checkOutput fails unless out is authentication replies followed by
// D-Bus messages, each whole.
func checkOutput(t *testing.T, out []byte) {
	r := bufio.NewReader(bytes.NewReader(out))
	for {
		c, err := r.ReadByte()
		if err == io.EOF {
			return
		}
		r.UnreadByte()
		if c == 'l' {
			break // the first message: replies are upper-case commands
		}
		line, err := r.ReadString('\n')
		if err != nil || !strings.HasSuffix(line, "\r\n") {
			t.Fatalf("a reply that is not a line: %q", line)
		}
		cmd, _, _ := strings.Cut(strings.TrimSuffix(line, "\r\n"), " ")
		switch cmd {
		case "REJECTED", "OK", "DATA", "ERROR", "AGREE_UNIX_FD":
		default:
			t.Fatalf("an authentication reply the protocol does not have: %q", line)
		}
	}
	for {
		if _, err := r.Peek(1); err == io.EOF {
			return
		}
		m, err := dbus.DecodeMessage(r)
		if err != nil {
			t.Fatalf("the bus sent a message godbus cannot decode: %v", err)
		}
		if m.Type == dbus.TypeMethodCall {
			t.Fatalf("the bus sent a method call: %v", m)
		}
	}
}
