package logind

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"reflect"
	"strings"
	"testing"

	"github.com/godbus/dbus/v5"
)

func encodeIn(t *testing.T, m *dbus.Message, order binary.ByteOrder) []byte {
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
		m := withBody(&dbus.Message{Type: dbus.TypeMethodReply, Headers: map[dbus.HeaderField]dbus.Variant{
			dbus.FieldReplySerial: dbus.MakeVariant(uint32(7)),
			dbus.FieldDestination: dbus.MakeVariant(":1.42"),
			dbus.FieldSender:      dbus.MakeVariant(":1.3"),
		}}, []sdUnitStatus{{Name: kubepodsSlice, Path: kubepodsPath, JobPath: "/"}}, []sdProperty{{"PIDs", dbus.MakeVariant([]uint32{1})}})
		raw := encodeIn(t, m, order)
		f, err := readFrame(bufio.NewReader(bytes.NewReader(raw)), maxUpstreamMessage)
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
		back, err := decodeMessage(out)
		if err != nil {
			t.Fatal(err)
		}
		var units []sdUnitStatus
		if header(back, dbus.FieldDestination) != ":nodeinit.5" || dbus.Store(back.Body[:1], &units) != nil || units[0].Name != kubepodsSlice ||
			!reflect.DeepEqual(back.Headers[dbus.FieldSignature], m.Headers[dbus.FieldSignature]) {
			t.Errorf("%v: read back %v", order, back)
		}
	}
}

// A message over the limit is read through and dropped: its header is
// kept (its strings clipped), and the next message is read as it comes.
func TestAFrameOverTheLimitIsSkipped(t *testing.T) {
	path := dbus.ObjectPath("/" + strings.Repeat("p", 2000))
	big := encodeIn(t, withBody(&dbus.Message{Type: dbus.TypeSignal, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldPath:      dbus.MakeVariant(path),
		dbus.FieldInterface: dbus.MakeVariant("org.example.X"),
		dbus.FieldMember:    dbus.MakeVariant("Big"),
		dbus.FieldUnixFDs:   dbus.MakeVariant(uint32(2)),
	}}, strings.Repeat("x", 100<<10)), binary.LittleEndian)
	small := encodeIn(t, newSignal(":1.1", "/a", "org.example.X", "Small", "y"), binary.BigEndian)
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
