package upstream

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/nodeinit/nodeinit/bus/internal/wire"
)

// maxPassed is the limit of what a test's frame passes on: a client's
// queue less the room it keeps for the bus's own replies.
const maxPassed = 244 << 10

// unit and property are a struct array and a dict of variants, as
// ListUnits answers and StartTransientUnit sends them: what godbus would
// write back in another shape.
type (
	unit struct {
		Name, Description, LoadState, ActiveState, SubState, Following string
		Path                                                           dbus.ObjectPath
		JobID                                                          uint32
		JobType                                                        string
		JobPath                                                        dbus.ObjectPath
	}
	property struct {
		Name  string
		Value dbus.Variant
	}
)

func encodeIn(t testing.TB, m *dbus.Message, order binary.ByteOrder) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := m.EncodeToWithFDs(&buf, order); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A message passed down keeps its body's bytes, in either byte order, and
// only its destination changes: a struct array that godbus would write
// back as an array of variants arrives as it was sent.
func TestAFrameIsReaddressedWithItsBodyAsItCame(t *testing.T) {
	for _, order := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		m := wire.WithBody(&dbus.Message{Type: dbus.TypeMethodReply, Headers: map[dbus.HeaderField]dbus.Variant{
			dbus.FieldReplySerial: dbus.MakeVariant(uint32(7)),
			dbus.FieldDestination: dbus.MakeVariant(":1.42"),
			dbus.FieldSender:      dbus.MakeVariant(":1.3"),
		}}, []unit{{Name: "kubepods.slice", Path: "/org/freedesktop/systemd1/unit/kubepods_2eslice", JobPath: "/"}}, []property{{"PIDs", dbus.MakeVariant([]uint32{1})}})
		raw := encodeIn(t, m, order)
		f, err := readFrame(bufio.NewReader(bytes.NewReader(raw)), maxPassed)
		if err != nil {
			t.Fatal(err)
		}
		if f.uint32Field(dbus.FieldReplySerial) != 7 || f.header(dbus.FieldSender) != ":1.3" || f.typ != dbus.TypeMethodReply {
			t.Fatalf("header %v", f.fields)
		}
		out, err := f.addressedTo(":nodeinit.5")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out[len(out)-(len(raw)-f.bodyAt):], raw[f.bodyAt:]) || out[0] != raw[0] {
			t.Errorf("%v: the body or the byte order changed", order)
		}
		back, err := wire.Decode(out)
		if err != nil {
			t.Fatal(err)
		}
		var units []unit
		if wire.Header(back, dbus.FieldDestination) != ":nodeinit.5" || dbus.Store(back.Body[:1], &units) != nil || units[0].Name != "kubepods.slice" ||
			!reflect.DeepEqual(back.Headers[dbus.FieldSignature], m.Headers[dbus.FieldSignature]) {
			t.Errorf("%v: read back %v", order, back)
		}
	}
}

// A message over the limit is read through and dropped: its header is
// kept (its strings clipped), and the next message is read as it comes.
func TestAFrameOverTheLimitIsSkipped(t *testing.T) {
	path := dbus.ObjectPath("/" + strings.Repeat("p", 2000))
	big := encodeIn(t, wire.WithBody(&dbus.Message{Type: dbus.TypeSignal, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldPath:      dbus.MakeVariant(path),
		dbus.FieldInterface: dbus.MakeVariant("org.example.X"),
		dbus.FieldMember:    dbus.MakeVariant("Big"),
		dbus.FieldUnixFDs:   dbus.MakeVariant(uint32(2)),
	}}, strings.Repeat("x", 100<<10)), binary.LittleEndian)
	small := encodeIn(t, wire.NewSignal(":1.1", "/a", "org.example.X", "Small", "y"), binary.BigEndian)
	r := bufio.NewReaderSize(bytes.NewReader(append(big, small...)), 4096)
	f, err := readFrame(r, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	if f.raw != nil || f.size != uint64(len(big)) || f.uint32Field(dbus.FieldUnixFDs) != 2 || f.header(dbus.FieldMember) != "Big" ||
		len(f.header(dbus.FieldPath)) > maxDroppedString+3 {
		t.Errorf("the dropped frame: raw %d bytes, size %d, fields %v", len(f.raw), f.size, f.fields)
	}
	if f, err = readFrame(r, 64<<10); err != nil || f.header(dbus.FieldMember) != "Small" || f.order != binary.BigEndian {
		t.Errorf("the next frame: %v, %v", f, err)
	}
}

// withField appends a header field of code, signature sig and encoded
// value val (little-endian, aligned as at the field's place) to the
// little-endian message raw.
func withField(raw []byte, code byte, sig string, val func(off int) []byte) []byte {
	fieldsLen := int(binary.LittleEndian.Uint32(raw[12:16]))
	bodyAt := 16 + (fieldsLen+7)&^7
	fields := append([]byte(nil), raw[16:16+fieldsLen]...)
	for (16+len(fields))%8 != 0 {
		fields = append(fields, 0)
	}
	fields = append(fields, code, byte(len(sig)))
	fields = append(fields, sig...)
	fields = append(fields, 0)
	fields = append(fields, val(16+len(fields))...)
	out := append([]byte(nil), raw[:12]...)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(fields)))
	out = append(out, fields...)
	for len(out)%8 != 0 {
		out = append(out, 0)
	}
	return append(out, raw[bodyAt:]...)
}

// A header field the specification does not name is skipped, whatever its
// type, and not passed on; a named field of the wrong type breaks the
// stream.
func TestAFrameSkipsHeaderFieldsItDoesNotKnow(t *testing.T) {
	raw := encodeIn(t, wire.NewSignal(":1.1", "/a", "org.example.X", "Unknown", "y"), binary.LittleEndian)
	// (su) "abc", 7: the struct at 8, its uint32 at 4.
	odd := withField(raw, 200, "(su)", func(off int) []byte {
		var b []byte
		for (off+len(b))%8 != 0 {
			b = append(b, 0)
		}
		b = binary.LittleEndian.AppendUint32(b, 3)
		b = append(b, "abc\x00"...)
		for (off+len(b))%4 != 0 {
			b = append(b, 0)
		}
		return binary.LittleEndian.AppendUint32(b, 7)
	})
	f, err := readFrame(bufio.NewReader(bytes.NewReader(odd)), maxPassed)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.fields[200]; ok || f.header(dbus.FieldMember) != "Unknown" {
		t.Errorf("fields %v", f.fields)
	}
	out, err := f.addressedTo(":nodeinit.1")
	if err != nil {
		t.Fatal(err)
	}
	if m, err := wire.Decode(out); err != nil || m.Body[0] != "y" || wire.Header(m, dbus.FieldDestination) != ":nodeinit.1" {
		t.Errorf("readdressed: %v, %v", m, err)
	}
	// A MEMBER (3) that is a uint32.
	bad := withField(raw, 3, "u", func(off int) []byte {
		b := make([]byte, (4-off%4)%4)
		return binary.LittleEndian.AppendUint32(b, 1)
	})
	if _, err := readFrame(bufio.NewReader(bytes.NewReader(bad)), maxPassed); !errors.Is(err, wire.ErrProtocol) {
		t.Errorf("a MEMBER of type u: %v", err)
	}
}

// FuzzFrame feeds arbitrary bytes to readFrame, as from the system bus:
// it must return a frame or an error, never panic, and what it passes on
// must read back as the message it was.
func FuzzFrame(f *testing.F) {
	f.Add(encodeIn(f, wire.NewSignal(":1.1", "/a", "org.example.X", "Y", "z"), binary.LittleEndian))
	f.Add(encodeIn(f, wire.WithBody(&dbus.Message{Type: dbus.TypeMethodReply, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldReplySerial: dbus.MakeVariant(uint32(2)), dbus.FieldDestination: dbus.MakeVariant(":1.9"),
	}}, []unit{{Name: "a", Path: "/", JobPath: "/"}}), binary.BigEndian))
	f.Fuzz(func(t *testing.T, input []byte) {
		fr, err := readFrame(bufio.NewReader(bytes.NewReader(input)), 4096)
		if err != nil || fr.raw == nil {
			return
		}
		out, err := fr.addressedTo(":nodeinit.1")
		if err != nil {
			return
		}
		if _, err := readFrame(bufio.NewReader(bytes.NewReader(out)), 1<<20); err != nil {
			t.Fatalf("a readdressed frame does not read back: %v", err)
		}
	})
}
