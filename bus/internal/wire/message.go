// Package wire is the D-Bus wire protocol as nodeinit's bus, its
// pass-through and the Caller (package upstream) use it: a message's bytes
// read within a bound (ReadMessage, PeekHeader), decoded and encoded with
// godbus (Decode, Encode), the descriptors that come with them, within the
// bounds each reader sets (FDReader), the queue of encoded messages for
// one peer (Outbox) and its writer (Send), and the lines of the
// authentication protocol (ReadAuthLine). It holds no connection and no
// policy.
package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/godbus/dbus/v5"
)

// MaxMessage bounds one incoming message, headers and body. The largest
// message the kubelet sends is its Inhibit call, about 200 bytes; 64 KiB is
// far beyond any honest client of this bus and small enough that a reader
// per connection costs little.
const MaxMessage = 64 << 10

// ErrProtocol marks input that breaks the D-Bus message format. The
// specification asks a server to drop such a connection without notice.
var ErrProtocol = errors.New("not a D-Bus message")

// ReadMessage reads one whole message from r and returns its bytes, before
// anything is decoded. The size comes from the fixed 16-byte start of the
// header and is checked against MaxMessage first, so a client can make the
// server allocate no more than that. io.EOF means the stream ended cleanly
// between two messages.
func ReadMessage(r *bufio.Reader) ([]byte, error) {
	_, _, _, size, err := PeekHeader(r)
	if err != nil {
		return nil, err
	}
	if size > MaxMessage {
		return nil, fmt.Errorf("%w: a message of %d bytes, more than %d", ErrProtocol, size, MaxMessage)
	}
	buf := make([]byte, size)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, UnexpectedEOF(err)
	}
	return buf, nil
}

// PeekHeader reads the fixed 16-byte start of the next message without
// taking it from r: its bytes, its byte order, the length of its header
// field array, and its whole size (the field array is padded to 8 bytes
// before the body). io.EOF means the stream ended cleanly between two
// messages.
func PeekHeader(r *bufio.Reader) (head []byte, order binary.ByteOrder, fields uint32, size uint64, err error) {
	head, err = r.Peek(16)
	if err != nil {
		if len(head) > 0 && errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, nil, 0, 0, err
	}
	switch head[0] {
	case 'l':
		order = binary.LittleEndian
	case 'B':
		order = binary.BigEndian
	default:
		return nil, nil, 0, 0, fmt.Errorf("%w: byte order %#x", ErrProtocol, head[0])
	}
	if head[3] != 1 {
		return nil, nil, 0, 0, fmt.Errorf("%w: protocol version %d", ErrProtocol, head[3])
	}
	fields = order.Uint32(head[12:16])
	size = 16 + (uint64(fields)+7)&^7 + uint64(order.Uint32(head[4:8]))
	return head, order, fields, size, nil
}

// Decode decodes the bytes ReadMessage returned with godbus. Any
// unix fds the message names are not there: the server reads with read(2),
// so the kernel closes fds a client passes, and an 'h' argument decodes as
// a bare index.
func Decode(raw []byte) (m *dbus.Message, err error) {
	// godbus's decoder reports malformed input as errors; this recover is
	// the second line, because a panic here would end PID 1.
	defer func() {
		if p := recover(); p != nil {
			m, err = nil, fmt.Errorf("%w: the decoder failed: %v", ErrProtocol, p)
		}
	}()
	m, err = dbus.DecodeMessage(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	return m, nil
}

// Encode encodes m with godbus, little-endian, with the given serial.
// godbus keeps a message's serial unexported (its Conn assigns it), so the
// serial is written into its fixed place in the header afterwards: bytes 8
// to 12, in the message's byte order. The returned fds are those the body's
// UnixFD values name, in the order their indices refer to; they travel with
// the bytes as SCM_RIGHTS.
func Encode(m *dbus.Message, serial uint32) ([]byte, []int, error) {
	n, err := m.CountFds()
	if err != nil {
		return nil, nil, err
	}
	if n > 0 {
		m.Headers[dbus.FieldUnixFDs] = dbus.MakeVariant(uint32(n))
	}
	var buf bytes.Buffer
	fds, err := m.EncodeToWithFDs(&buf, binary.LittleEndian)
	if err != nil {
		return nil, nil, err
	}
	b := buf.Bytes()
	binary.LittleEndian.PutUint32(b[8:12], serial)
	return b, fds, nil
}

// Header is a field of an incoming message, read with godbus's exported
// accessors; a missing or mistyped field reads as "".
func Header(m *dbus.Message, f dbus.HeaderField) string { return Field(m.Headers, f) }

// Field is a string, object path or signature field of a header.
func Field(fields map[dbus.HeaderField]dbus.Variant, f dbus.HeaderField) string {
	v, ok := fields[f]
	if !ok {
		return ""
	}
	switch s := v.Value().(type) {
	case string:
		return s
	case dbus.ObjectPath:
		return string(s)
	case dbus.Signature:
		return s.String()
	}
	return ""
}

// NewReply is a method return or error for call, from sender to dest (the
// caller's unique name, "" before Hello).
func NewReply(call *dbus.Message, sender, dest string) *dbus.Message {
	m := &dbus.Message{Type: dbus.TypeMethodReply, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldReplySerial: dbus.MakeVariant(call.Serial()),
		dbus.FieldSender:      dbus.MakeVariant(sender),
	}}
	if dest != "" {
		m.Headers[dbus.FieldDestination] = dbus.MakeVariant(dest)
	}
	return m
}

// WithBody sets m's body and the signature that describes it.
func WithBody(m *dbus.Message, body ...any) *dbus.Message {
	if len(body) > 0 {
		m.Body = body
		m.Headers[dbus.FieldSignature] = dbus.MakeVariant(dbus.SignatureOf(body...))
	}
	return m
}

// NewError is a D-Bus error reply with a human-readable text, made valid
// UTF-8 because godbus refuses to encode anything else and the text may
// quote what a client sent.
func NewError(call *dbus.Message, sender, dest, name, text string) *dbus.Message {
	m := NewReply(call, sender, dest)
	m.Type = dbus.TypeError
	m.Headers[dbus.FieldErrorName] = dbus.MakeVariant(name)
	return WithBody(m, strings.ToValidUTF8(text, "\uFFFD"))
}

// NewSignal is a broadcast signal (no destination).
func NewSignal(sender string, path dbus.ObjectPath, iface, member string, body ...any) *dbus.Message {
	return WithBody(&dbus.Message{Type: dbus.TypeSignal, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldSender:    dbus.MakeVariant(sender),
		dbus.FieldPath:      dbus.MakeVariant(path),
		dbus.FieldInterface: dbus.MakeVariant(iface),
		dbus.FieldMember:    dbus.MakeVariant(member),
	}}, body...)
}

// UnexpectedEOF is err, io.ErrUnexpectedEOF where it is io.EOF: the
// stream ended inside a message.
func UnexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
