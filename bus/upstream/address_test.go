package upstream

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAddressIsTheEnvironmentsOrTheSocket(t *testing.T) {
	root := t.TempDir()
	socket := filepath.Join(root, SystemBusSocket)
	env := func(address string) func(string) string {
		return func(k string) string {
			if k == "DBUS_SYSTEM_BUS_ADDRESS" {
				return address
			}
			return ""
		}
	}
	check := func(what, address, want, wantErr string) {
		t.Helper()
		got, err := Address(env(address), root)
		if got != want || (err == nil) != (wantErr == "") || err != nil && !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%s: %q, %v; want %q, %q", what, got, err, want, wantErr)
		}
	}
	check("nothing", "", "", "DBUS_SYSTEM_BUS_ADDRESS is unset and there is no socket at "+socket)
	check("a variable naming no socket", "unix:path=/nonexistent", "", "there is no socket at /nonexistent")
	check("a tcp address", "tcp:host=localhost,port=1", "", "names no unix socket")
	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	check("the socket", "", "unix:path="+socket, "")
	check("the variable", "unix:path="+socket+",guid=0", "unix:path="+socket+",guid=0", "")
	check("an abstract socket", "unix:abstract=bus%2d1", "unix:abstract=bus%2d1", "")
	if got, err := UnixSocket("tcp:host=x;unix:abstract=bus%2d1,guid=00"); err != nil || got != "@bus-1" {
		t.Errorf("UnixSocket = %q, %v", got, err)
	}
}
