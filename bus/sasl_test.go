package bus

import (
	"bufio"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/nodeinit/nodeinit/bus/internal/wire"
)

const testGUID = "0123456789abcdef0123456789abcdef"

// runAuth runs a handshake for a peer with the given uid over the client's
// bytes and returns the server's replies, what is left unread, and the
// handshake's result.
func runAuth(uid uint32, client string) (replies []string, rest string, a *auth, err error) {
	r := bufio.NewReaderSize(strings.NewReader(client), 4096)
	a = &auth{uid: uid, guid: testGUID}
	err = a.run(r, func(line []byte) error {
		if !strings.HasSuffix(string(line), "\r\n") {
			return errors.New("reply without \\r\\n")
		}
		replies = append(replies, strings.TrimSuffix(string(line), "\r\n"))
		return nil
	})
	left, _ := io.ReadAll(r)
	return replies, string(left), a, err
}

func hexID(s string) string { return hex.EncodeToString([]byte(s)) }

func TestAuthAsGodbusDoesIt(t *testing.T) {
	// godbus asks for the mechanisms, then sends EXTERNAL with its uid,
	// negotiates fd passing and begins; the first message follows BEGIN.
	client := "\x00AUTH\r\nAUTH EXTERNAL " + hexID("1000") + "\r\nNEGOTIATE_UNIX_FD\r\nBEGIN\r\nl\x01\x00\x01"
	replies, rest, a, err := runAuth(1000, client)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"REJECTED EXTERNAL", "OK " + testGUID, "AGREE_UNIX_FD"}
	if strings.Join(replies, "|") != strings.Join(want, "|") {
		t.Errorf("replies %q, want %q", replies, want)
	}
	if !a.unixFD {
		t.Error("unix fd passing not agreed")
	}
	if rest != "l\x01\x00\x01" {
		t.Errorf("left for the message reader: %q", rest)
	}
}

func TestAuthAsSdBusDoesIt(t *testing.T) {
	// sd-bus pipelines everything, and answers the empty challenge with an
	// empty DATA: "the identity of the socket".
	client := "\x00AUTH EXTERNAL\r\nDATA\r\nNEGOTIATE_UNIX_FD\r\nBEGIN\r\n"
	replies, _, a, err := runAuth(0, client)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"DATA", "OK " + testGUID, "AGREE_UNIX_FD"}
	if strings.Join(replies, "|") != strings.Join(want, "|") || !a.unixFD {
		t.Errorf("replies %q (unixFD %v), want %q", replies, a.unixFD, want)
	}
}

func TestAuthDataWithTheUidAfterAnEmptyChallenge(t *testing.T) {
	replies, _, _, err := runAuth(0, "\x00AUTH EXTERNAL\r\nDATA "+hexID("0")+"\r\nBEGIN\r\n")
	if err != nil || strings.Join(replies, "|") != "DATA|OK "+testGUID {
		t.Errorf("replies %q, err %v", replies, err)
	}
}

func TestAuthWithoutFDPassing(t *testing.T) {
	_, _, a, err := runAuth(0, "\x00AUTH EXTERNAL "+hexID("0")+"\r\nBEGIN\r\n")
	if err != nil || a.unixFD {
		t.Errorf("err %v, unixFD %v: want success without fd passing", err, a.unixFD)
	}
}

func TestAuthRejectsAnIdentityThatIsNotThePeers(t *testing.T) {
	for name, resp := range map[string]string{
		"another uid":  hexID("0"),
		"a login name": hexID("root"),
		"not hex":      "zz",
		"odd hex":      "303",
		"empty id":     "",
		"too large":    hexID("4294967296"),
		"signed":       hexID("-1000"),
	} {
		t.Run(name, func(t *testing.T) {
			line := "AUTH EXTERNAL " + resp
			if resp == "" {
				line = "AUTH EXTERNAL " // an empty initial response
			}
			// Rejected, then the client may try again and succeed.
			replies, _, _, err := runAuth(1000, "\x00"+line+"\r\nAUTH EXTERNAL "+hexID("1000")+"\r\nBEGIN\r\n")
			if resp == "" {
				// An empty initial response is the socket's identity.
				if err != nil || replies[0] != "OK "+testGUID {
					t.Errorf("replies %q, err %v", replies, err)
				}
				return
			}
			if err != nil || strings.Join(replies, "|") != "REJECTED EXTERNAL|OK "+testGUID {
				t.Errorf("replies %q, err %v; want a rejection, then OK", replies, err)
			}
		})
	}
}

func TestAuthAnswersEveryCommandAsTheSpecificationSays(t *testing.T) {
	for _, tc := range []struct {
		name, client string
		want         []string
		fails        bool // the server disconnects
	}{
		{"unknown command, then auth", "\x00FOOBAR\r\nAUTH EXTERNAL " + hexID("7") + "\r\nBEGIN\r\n", []string{"ERROR \"expected AUTH\"", "OK " + testGUID}, false},
		{"another mechanism", "\x00AUTH DBUS_COOKIE_SHA1 " + hexID("7") + "\r\n", []string{"REJECTED EXTERNAL"}, true},
		{"client error", "\x00ERROR \"oops\"\r\n", []string{"REJECTED EXTERNAL"}, true},
		{"cancel during data", "\x00AUTH EXTERNAL\r\nCANCEL\r\n", []string{"DATA", "REJECTED EXTERNAL"}, true},
		{"cancel after ok", "\x00AUTH EXTERNAL " + hexID("7") + "\r\nCANCEL\r\nBEGIN\r\n", []string{"OK " + testGUID, "REJECTED EXTERNAL"}, true},
		{"auth after ok", "\x00AUTH EXTERNAL " + hexID("7") + "\r\nAUTH\r\nBEGIN\r\n", []string{"OK " + testGUID, "ERROR \"expected BEGIN or NEGOTIATE_UNIX_FD\""}, false},
		{"negotiate before ok", "\x00NEGOTIATE_UNIX_FD\r\n", []string{"ERROR \"expected AUTH\""}, true},
		{"something else while waiting for data", "\x00AUTH EXTERNAL\r\nAUTH\r\n", []string{"DATA", "ERROR \"expected DATA\""}, true},
		{"a nul inside a line", "\x00AUTH\x00EXTERNAL\r\n", []string{"ERROR \"not a printable ASCII line\""}, true},
		{"utf-8", "\x00AUTH EXTERNAL é\r\n", []string{"ERROR \"not a printable ASCII line\""}, true},
		{"bare newline", "\x00AUTH\n", []string{"REJECTED EXTERNAL"}, true},
		{"begin before ok", "\x00BEGIN\r\n", nil, true},
		{"begin while waiting for data", "\x00AUTH EXTERNAL\r\nBEGIN\r\n", []string{"DATA"}, true},
		{"no nul byte", "AUTH EXTERNAL " + hexID("7") + "\r\n", nil, true},
		{"nothing at all", "", nil, true},
		{"a line without its end", "\x00AUTH", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			replies, _, _, err := runAuth(7, tc.client)
			if strings.Join(replies, "|") != strings.Join(tc.want, "|") {
				t.Errorf("replies %q, want %q", replies, tc.want)
			}
			if (err != nil) != tc.fails {
				t.Errorf("err = %v, want failure %v", err, tc.fails)
			}
		})
	}
}

func TestAuthIsBounded(t *testing.T) {
	long := "\x00AUTH EXTERNAL " + strings.Repeat("30", wire.MaxAuthLine) + "\r\n"
	if _, _, _, err := runAuth(0, long); !errors.Is(err, wire.ErrAuth) {
		t.Errorf("a %d-byte line: err = %v, want wire.ErrAuth", len(long), err)
	}
	noEnd := "\x00" + strings.Repeat("A", 10000)
	if _, _, _, err := runAuth(0, noEnd); !errors.Is(err, wire.ErrAuth) {
		t.Errorf("10000 bytes without a line end: err = %v, want wire.ErrAuth", err)
	}
	chatty := "\x00" + strings.Repeat("AUTH\r\n", maxAuthLines+1)
	replies, _, _, err := runAuth(0, chatty)
	if !errors.Is(err, wire.ErrAuth) || len(replies) != maxAuthLines {
		t.Errorf("%d AUTH lines: %d replies, err = %v; want %d replies and wire.ErrAuth", maxAuthLines+1, len(replies), err, maxAuthLines)
	}
}
