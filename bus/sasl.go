package bus

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/nodeinit/nodeinit/bus/internal/wire"
)

// The server side of the D-Bus authentication protocol (the specification's
// "Authentication Protocol": a SASL profile of \r\n-terminated ASCII lines),
// with EXTERNAL as the only mechanism: on a unix socket the kernel already
// tells who the peer is (SO_PEERCRED), so the identity the client claims
// only has to match it.

// Limits of one handshake. A client that needs more is not a D-Bus client:
// godbus needs four lines (AUTH, AUTH EXTERNAL, NEGOTIATE_UNIX_FD, BEGIN),
// sd-bus three or four.
const (
	maxAuthLines = 16 // lines before BEGIN
)

// mechanisms is the list every REJECTED carries (the specification asks for
// the same list each time).
const mechanisms = "EXTERNAL"

// authState is where the server is in the exchange: the specification's
// server states.
type authState int

const (
	waitingForAuth authState = iota
	waitingForData
	waitingForBegin
)

// auth is one server-side handshake.
type auth struct {
	uid   uint32 // the peer's uid as the kernel reports it
	guid  string // the server's GUID, sent with OK
	state authState
	// unixFD is set once the client asked for unix fd passing and was told
	// AGREE_UNIX_FD.
	unixFD bool
	// begun is set by BEGIN after OK: the message stream starts.
	begun bool
}

// run reads the client's lines from r, after its leading NUL byte, and
// writes a reply to each with write, until BEGIN after OK (nil) or until the
// client breaks the protocol or a limit (an error wrapping wire.ErrAuth, or the
// read error). Bytes after BEGIN's \r\n stay in r: they are the start of the
// message stream.
func (a *auth) run(r *bufio.Reader, write func([]byte) error) error {
	nul, err := r.ReadByte()
	if err != nil {
		return err
	}
	if nul != 0 {
		return fmt.Errorf("%w: the first byte is %#x, not the NUL byte", wire.ErrAuth, nul)
	}
	for n := 0; ; n++ {
		if n == maxAuthLines {
			return fmt.Errorf("%w: no BEGIN after %d lines", wire.ErrAuth, maxAuthLines)
		}
		line, err := wire.ReadAuthLine(r)
		if err != nil {
			return err
		}
		reply, err := a.step(line)
		if err != nil {
			return err
		}
		if a.begun {
			return nil
		}
		if err := write([]byte(reply + "\r\n")); err != nil {
			return err
		}
	}
}

// step answers one line. The reply has no line end; it is empty only for
// BEGIN, which is not answered.
func (a *auth) step(line string) (string, error) {
	for i := 0; i < len(line); i++ {
		if c := line[i]; c < ' ' || c > '~' {
			// The protocol is printable ASCII: a NUL, a control character
			// or UTF-8 here is a client that is not speaking it.
			return "ERROR \"not a printable ASCII line\"", nil
		}
	}
	cmd, args, _ := strings.Cut(line, " ")
	switch cmd {
	case "BEGIN":
		if a.state != waitingForBegin {
			return "", fmt.Errorf("%w: BEGIN before OK", wire.ErrAuth)
		}
		a.begun = true
		return "", nil
	case "CANCEL", "ERROR":
		// Either aborts the current exchange; the client may start over.
		a.state = waitingForAuth
		return rejected(), nil
	}
	switch a.state {
	case waitingForAuth:
		if cmd != "AUTH" {
			return "ERROR \"expected AUTH\"", nil
		}
		return a.authCommand(args), nil
	case waitingForData:
		if cmd != "DATA" {
			return "ERROR \"expected DATA\"", nil
		}
		return a.external(args), nil
	default: // waitingForBegin
		if cmd != "NEGOTIATE_UNIX_FD" {
			return "ERROR \"expected BEGIN or NEGOTIATE_UNIX_FD\"", nil
		}
		a.unixFD = true
		return "AGREE_UNIX_FD", nil
	}
}

// authCommand answers AUTH [mechanism [initial-response]].
func (a *auth) authCommand(args string) string {
	if args == "" {
		// A request for the list of mechanisms.
		return rejected()
	}
	mech, resp, hasResp := strings.Cut(args, " ")
	if mech != "EXTERNAL" {
		return rejected()
	}
	if !hasResp {
		// No initial response: send an empty challenge, and the client
		// answers DATA with its identity or with nothing (sd-bus does).
		a.state = waitingForData
		return "DATA"
	}
	return a.external(resp)
}

// external decides the EXTERNAL mechanism for a response: empty means "the
// identity the socket carries"; otherwise it is the hex-encoded ASCII
// decimal uid, which must be the peer's. Login names, which the
// specification allows, are refused: resolving them needs the user database
// of a container that may not have one.
func (a *auth) external(resp string) string {
	if resp != "" {
		id, err := hex.DecodeString(resp)
		if err != nil || !decimal(id) {
			return a.reject()
		}
		uid, err := strconv.ParseUint(string(id), 10, 32)
		if err != nil || uint32(uid) != a.uid {
			return a.reject()
		}
	}
	a.state = waitingForBegin
	return "OK " + a.guid
}

func (a *auth) reject() string {
	a.state = waitingForAuth
	return rejected()
}

func rejected() string { return "REJECTED " + mechanisms }

func decimal(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
