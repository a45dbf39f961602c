package upstream

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/godbus/dbus/v5"
)

// Which system bus there is to pass through to, and where it listens.

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
