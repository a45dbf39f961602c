package upstream

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/godbus/dbus/v5"

	"github.com/nodeinit/nodeinit/bus/internal/wire"
)

// A message from the system bus is passed on as it came (the package doc
// says why): only its header is read, to route the message and to address
// it to the client's name on the bus, and written again when the
// destination changes.

// frame is one message from the system bus: its header fields, decoded,
// and its bytes as they came.
type frame struct {
	order  binary.ByteOrder
	typ    dbus.Type
	flags  dbus.Flags
	serial uint32
	fields map[dbus.HeaderField]dbus.Variant
	size   uint64 // the whole message's bytes
	// raw is the whole message, nil for one larger than readFrame's limit,
	// which was read and dropped; bodyAt is where its body begins.
	raw    []byte
	bodyAt int
}

// maxMessageSize is the specification's bound on a message: 128 MiB.
const maxMessageSize = 1 << 27

// maxDroppedString bounds a header string kept from a message that is
// dropped for its size: enough to name it in the log.
const maxDroppedString = 256

// readFrame reads one message. One of at most limit bytes is read whole;
// a larger one is read in the reader's buffer, a piece at a time, and
// dropped (its raw is nil): only its header fields are kept, its strings
// clipped, so that the caller can claim the descriptors it carries (its
// UNIX_FDS) and log it. Nothing is allocated for what it claims to be.
func readFrame(r *bufio.Reader, limit uint64) (*frame, error) {
	head, order, fieldsLen, size, err := wire.PeekHeader(r)
	if err != nil {
		return nil, err
	}
	f := &frame{order: order, typ: dbus.Type(head[1]), flags: dbus.Flags(head[2]), serial: order.Uint32(head[8:12]), size: size}
	f.bodyAt = int(16 + (uint64(fieldsLen)+7)&^7)
	if f.size > maxMessageSize {
		return nil, fmt.Errorf("%w: a message of %d bytes, more than a message may have", wire.ErrProtocol, f.size)
	}
	if f.size <= limit {
		f.raw = make([]byte, f.size)
		if _, err := io.ReadFull(r, f.raw); err != nil {
			return nil, wire.UnexpectedEOF(err)
		}
		f.fields, err = readHeaderFields(bytes.NewReader(f.raw[16:16+fieldsLen]), f.order, fieldsLen, int(fieldsLen))
		if err != nil {
			return nil, err
		}
		return f, nil
	}
	if _, err := r.Discard(16); err != nil {
		return nil, wire.UnexpectedEOF(err)
	}
	if f.fields, err = readHeaderFields(r, f.order, fieldsLen, maxDroppedString); err != nil {
		return nil, err
	}
	// The padding and the body, through the reader's own buffer.
	if _, err := r.Discard(int(f.size) - 16 - int(fieldsLen)); err != nil {
		return nil, wire.UnexpectedEOF(err)
	}
	return f, nil
}

// header is a header field of f, "" when f has none.
func (f *frame) header(field dbus.HeaderField) string { return wire.Field(f.fields, field) }

// uint32Field is a uint32 header field of f (REPLY_SERIAL, UNIX_FDS), 0
// when f has none.
func (f *frame) uint32Field(field dbus.HeaderField) uint32 {
	n, _ := f.fields[field].Value().(uint32)
	return n
}

// decode decodes the whole message with godbus, for the few whose body
// this bus reads (the upstream bus's own signals, a ListNames reply).
func (f *frame) decode() (*dbus.Message, error) { return wire.Decode(f.raw) }

// addressedTo is the message as it came, with its destination dest: the
// header written again (in the message's byte order, with its serial),
// the body as it was.
func (f *frame) addressedTo(dest string) ([]byte, error) {
	fields := make(map[dbus.HeaderField]dbus.Variant, len(f.fields))
	for k, v := range f.fields {
		fields[k] = v
	}
	fields[dbus.FieldDestination] = dbus.MakeVariant(dest)
	// Flags this bus does not know mean nothing to the client either
	// (the specification asks that unknown flags be ignored); godbus
	// refuses to write them.
	known := dbus.FlagNoAutoStart | dbus.FlagNoReplyExpected | dbus.FlagAllowInteractiveAuthorization
	m := &dbus.Message{Type: f.typ, Flags: f.flags & known, Headers: fields}
	var buf bytes.Buffer
	if _, err := m.EncodeToWithFDs(&buf, f.order); err != nil {
		return nil, err
	}
	head := buf.Bytes()
	f.order.PutUint32(head[4:8], uint32(len(f.raw)-f.bodyAt))
	f.order.PutUint32(head[8:12], f.serial)
	return append(head, f.raw[f.bodyAt:]...), nil
}

// readHeaderFields reads the header field array a(yv) of n bytes from r,
// which starts at the array's first field (offset 16 of the message, so
// that alignment within the array is alignment within the message). The
// fields of the specification are kept, their strings up to keep bytes
// (a longer one is skipped); fields it does not know are skipped, as a bus
// drops them.
func readHeaderFields(r io.Reader, order binary.ByteOrder, n uint32, keep int) (map[dbus.HeaderField]dbus.Variant, error) {
	h := &fieldReader{r: r, order: order, end: int(n)}
	fields := map[dbus.HeaderField]dbus.Variant{}
	for h.off < h.end {
		if err := h.align(8); err != nil {
			return nil, err
		}
		code, err := h.byte()
		if err != nil {
			return nil, err
		}
		sig, err := h.signature(255)
		if err != nil {
			return nil, err
		}
		want, known := fieldSignatures[dbus.HeaderField(code)]
		if !known {
			if err := h.skip(sig, 0); err != nil {
				return nil, err
			}
			continue
		}
		if sig != want {
			return nil, fmt.Errorf("%w: header field %d of type %q", wire.ErrProtocol, code, sig)
		}
		var v dbus.Variant
		switch sig {
		case "s", "o":
			s, whole, err := h.string(keep)
			if err != nil {
				return nil, err
			}
			if !whole {
				s += "..."
			}
			if sig == "o" {
				v = dbus.MakeVariant(dbus.ObjectPath(s))
			} else {
				v = dbus.MakeVariant(s)
			}
		case "g":
			s, err := h.signature(255)
			if err != nil {
				return nil, err
			}
			parsed, err := dbus.ParseSignature(s)
			if err != nil {
				return nil, fmt.Errorf("%w: signature %q: %v", wire.ErrProtocol, s, err)
			}
			v = dbus.MakeVariant(parsed)
		case "u":
			u, err := h.uint32()
			if err != nil {
				return nil, err
			}
			v = dbus.MakeVariant(u)
		}
		fields[dbus.HeaderField(code)] = v
	}
	return fields, nil
}

// fieldSignatures are the types of the specification's header fields.
var fieldSignatures = map[dbus.HeaderField]string{
	dbus.FieldPath: "o", dbus.FieldInterface: "s", dbus.FieldMember: "s", dbus.FieldErrorName: "s",
	dbus.FieldReplySerial: "u", dbus.FieldDestination: "s", dbus.FieldSender: "s",
	dbus.FieldSignature: "g", dbus.FieldUnixFDs: "u",
}

// fieldReader reads the header field array a piece at a time, never past
// its end, allocating no more than a kept string.
type fieldReader struct {
	r        io.Reader
	order    binary.ByteOrder
	off, end int
	buf      [8]byte
}

func (h *fieldReader) next(n int) ([]byte, error) {
	if n > h.end-h.off {
		return nil, fmt.Errorf("%w: the header fields end inside a field", wire.ErrProtocol)
	}
	if _, err := io.ReadFull(h.r, h.buf[:n]); err != nil {
		return nil, wire.UnexpectedEOF(err)
	}
	h.off += n
	return h.buf[:n], nil
}

func (h *fieldReader) discard(n int) error {
	if n < 0 || n > h.end-h.off {
		return fmt.Errorf("%w: the header fields end inside a field", wire.ErrProtocol)
	}
	if _, err := io.CopyN(io.Discard, h.r, int64(n)); err != nil {
		return wire.UnexpectedEOF(err)
	}
	h.off += n
	return nil
}

func (h *fieldReader) align(n int) error {
	// The array starts at offset 16 of the message: aligned for every
	// type.
	if pad := (n - h.off%n) % n; pad > 0 {
		return h.discard(pad)
	}
	return nil
}

func (h *fieldReader) byte() (byte, error) {
	b, err := h.next(1)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}

func (h *fieldReader) uint32() (uint32, error) {
	if err := h.align(4); err != nil {
		return 0, err
	}
	b, err := h.next(4)
	if err != nil {
		return 0, err
	}
	return h.order.Uint32(b), nil
}

// string reads a string or object path, keeping at most keep bytes of it;
// whole reports whether it kept all.
func (h *fieldReader) string(keep int) (s string, whole bool, err error) {
	n, err := h.uint32()
	if err != nil {
		return "", false, err
	}
	if int64(n) >= int64(h.end-h.off) {
		return "", false, fmt.Errorf("%w: the header fields end inside a string", wire.ErrProtocol)
	}
	kept := min(int(n), keep)
	b := make([]byte, kept)
	if _, err := io.ReadFull(h.r, b); err != nil {
		return "", false, wire.UnexpectedEOF(err)
	}
	h.off += kept
	if err := h.discard(int(n) - kept + 1); err != nil { // the rest and the NUL
		return "", false, err
	}
	return string(b), kept == int(n), nil
}

// signature reads a signature (a byte of length, at most max).
func (h *fieldReader) signature(max int) (string, error) {
	n, err := h.byte()
	if err != nil {
		return "", err
	}
	if int(n) > max || int(n) >= h.end-h.off {
		return "", fmt.Errorf("%w: a signature of %d bytes in the header", wire.ErrProtocol, n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(h.r, b); err != nil {
		return "", wire.UnexpectedEOF(err)
	}
	h.off += int(n)
	if err := h.discard(1); err != nil {
		return "", err
	}
	return string(b), nil
}

// skip reads past one value of the single complete type sig (depth
// counts the containers it is in).
func (h *fieldReader) skip(sig string, depth int) error {
	if depth > 64 || sig == "" || completeType(sig) != len(sig) {
		return fmt.Errorf("%w: header field of type %q", wire.ErrProtocol, sig)
	}
	switch sig[0] {
	case 'y':
		return h.discard(1)
	case 'n', 'q':
		return h.alignedDiscard(2, 2)
	case 'b', 'i', 'u', 'h':
		return h.alignedDiscard(4, 4)
	case 'x', 't', 'd':
		return h.alignedDiscard(8, 8)
	case 's', 'o':
		_, _, err := h.string(0)
		return err
	case 'g':
		_, err := h.signature(255)
		return err
	case 'v':
		inner, err := h.signature(255)
		if err != nil {
			return err
		}
		return h.skip(inner, depth+1)
	case 'a':
		n, err := h.uint32()
		if err != nil {
			return err
		}
		if len(sig) < 2 {
			return fmt.Errorf("%w: header field of type %q", wire.ErrProtocol, sig)
		}
		if err := h.align(alignment(sig[1])); err != nil {
			return err
		}
		return h.discard(int(n))
	case '(', '{':
		if err := h.align(8); err != nil {
			return err
		}
		for rest := sig[1 : len(sig)-1]; rest != ""; {
			n := completeType(rest)
			if n == 0 {
				return fmt.Errorf("%w: header field of type %q", wire.ErrProtocol, sig)
			}
			if err := h.skip(rest[:n], depth+1); err != nil {
				return err
			}
			rest = rest[n:]
		}
		return nil
	}
	return fmt.Errorf("%w: header field of type %q", wire.ErrProtocol, sig)
}

func (h *fieldReader) alignedDiscard(align, n int) error {
	if err := h.align(align); err != nil {
		return err
	}
	return h.discard(n)
}

// alignment is the alignment of a value whose type starts with c.
func alignment(c byte) int {
	switch c {
	case 'n', 'q':
		return 2
	case 'b', 'i', 'u', 'h', 's', 'o', 'a':
		return 4
	case 'x', 't', 'd', '(', '{':
		return 8
	}
	return 1
}

// completeType is the length of the single complete type sig starts with,
// 0 if it has none.
func completeType(sig string) int {
	if sig == "" {
		return 0
	}
	switch sig[0] {
	case 'a':
		n := completeType(sig[1:])
		if n == 0 {
			return 0
		}
		return 1 + n
	case '(', '{':
		closing := byte(')')
		if sig[0] == '{' {
			closing = '}'
		}
		for i := 1; i < len(sig); {
			if sig[i] == closing {
				return i + 1
			}
			n := completeType(sig[i:])
			if n == 0 {
				return 0
			}
			i += n
		}
		return 0
	}
	return 1
}
