package cri

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"

	"golang.org/x/net/http2/hpack"
)

// The client below makes one gRPC unary call on a connection of its own
// (RFC 9113): it writes the preface, its SETTINGS (all defaults) and the
// request on stream 1, then reads frames until stream 1 ends, answering
// what the server asks of the connection on the way. It never sends a
// WINDOW_UPDATE: the default window of 65,535 bytes is more than it lets
// the server send (maxAnswer).

const (
	// preface opens every HTTP/2 connection a client makes.
	preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	// maxFrame is the largest frame payload a server may send: the
	// default SETTINGS_MAX_FRAME_SIZE, which the client does not raise.
	maxFrame = 1 << 14
	// maxAnswer bounds all the server may send, frame headers included.
	// A runtime answers Version in a few hundred bytes: more is not a
	// runtime.
	maxAnswer = 1 << 16
)

// Frame types and flags this client knows.
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	framePushPromise  = 0x5
	framePing         = 0x6
	frameGoAway       = 0x7
	frameContinuation = 0x9

	flagEndStream  = 0x1
	flagACK        = 0x1
	flagEndHeaders = 0x4
	flagPadded     = 0x8
	flagPriority   = 0x20
)

// reply is what the client keeps of a call's answer.
type reply struct {
	status                  string // :status
	headerGRPC, trailerGRPC [2]string
}

// grpcStatus is the answer's grpc-status and grpc-message: in its trailers,
// or in its headers for a trailers-only answer (an error without a body).
func (r *reply) grpcStatus() (status, message string) {
	if r.trailerGRPC[0] != "" {
		return r.trailerGRPC[0], r.trailerGRPC[1]
	}
	return r.headerGRPC[0], r.headerGRPC[1]
}

// call makes a gRPC call of path with an empty message on conn and reads
// its answer. conn's deadline bounds it.
func call(conn net.Conn, path string) (*reply, error) {
	if _, err := conn.Write(request(path)); err != nil {
		return nil, err
	}
	in := frames{conn: conn, first: true, buf: make([]byte, maxFrame), hdec: hpack.NewDecoder(4096, nil)}
	for {
		typ, flags, stream, payload, err := in.next()
		if err != nil {
			return nil, err
		}
		if in.open && (typ != frameContinuation || stream != 1) {
			return nil, errors.New("HTTP/2 protocol error: a header block without its CONTINUATION")
		}
		switch typ {
		case frameData:
			if stream == 1 && flags&flagEndStream != 0 {
				return &in.r, nil
			}
		case frameHeaders, frameContinuation:
			ended, err := in.headers(typ, flags, stream, payload)
			if err != nil {
				return nil, err
			}
			if ended {
				return &in.r, nil
			}
		case frameRSTStream:
			if stream == 1 && len(payload) == 4 {
				return nil, fmt.Errorf("the runtime reset the call: %s", errorCode(payload))
			}
		case frameSettings:
			if flags&flagACK == 0 {
				if _, err := conn.Write(frame(frameSettings, flagACK, 0, nil)); err != nil {
					return nil, err
				}
			}
		case framePushPromise:
			return nil, errors.New("HTTP/2 protocol error: the runtime pushed a promise")
		case framePing:
			if flags&flagACK == 0 && len(payload) == 8 {
				if _, err := conn.Write(frame(framePing, flagACK, 0, payload)); err != nil {
					return nil, err
				}
			}
		case frameGoAway:
			if len(payload) < 8 {
				return nil, errors.New("the runtime sent GOAWAY")
			}
			return nil, fmt.Errorf("the runtime sent GOAWAY: %s %q", errorCode(payload[4:8]), payload[8:])
		}
		// PRIORITY, WINDOW_UPDATE and types unknown to this client: nothing
		// to do (a window only matters to a sender).
	}
}

// frames is the server's side of a call as call reads it: its frames,
// counted against maxAnswer, and the header blocks of stream 1.
type frames struct {
	conn  net.Conn
	total int
	first bool // no frame read yet: the server's preface comes next
	head  [9]byte
	buf   []byte // maxFrame bytes, each frame's payload in turn

	r      reply
	blocks int    // header blocks of stream 1 decoded
	block  []byte // a header block being collected
	open   bool   // block awaits a CONTINUATION
	ends   bool   // the block being collected ends the stream
	hdec   *hpack.Decoder
}

// next reads the next frame; its payload holds until the next call.
func (in *frames) next() (typ, flags byte, stream uint32, payload []byte, err error) {
	if _, err := io.ReadFull(in.conn, in.head[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, 0, 0, nil, errors.New("the runtime closed the connection before it answered")
		}
		return 0, 0, 0, nil, err
	}
	head := in.head
	length := int(head[0])<<16 | int(head[1])<<8 | int(head[2])
	typ, flags = head[3], head[4]
	stream = binary.BigEndian.Uint32(head[5:]) & (1<<31 - 1)
	// A server's connection preface is a SETTINGS frame: anything else
	// (an HTTP/1 "HTTP/1.1 400 Bad Request", say) is no HTTP/2 server.
	if in.first && (typ != frameSettings || flags&flagACK != 0 || stream != 0 || length%6 != 0 || length > maxFrame) {
		return 0, 0, 0, nil, fmt.Errorf("not an HTTP/2 server: it answered %q", head[:])
	}
	in.first = false
	if length > maxFrame {
		return 0, 0, 0, nil, fmt.Errorf("the runtime sent a frame of %d bytes, more than %d", length, maxFrame)
	}
	if in.total += len(head) + length; in.total > maxAnswer {
		return 0, 0, 0, nil, fmt.Errorf("the runtime sent more than %d bytes without ending its answer", maxAnswer)
	}
	payload = in.buf[:length]
	if _, err := io.ReadFull(in.conn, payload); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, 0, 0, nil, errors.New("the runtime closed the connection in the middle of a frame")
		}
		return 0, 0, 0, nil, err
	}
	return typ, flags, stream, payload, nil
}

// headers collects a HEADERS or CONTINUATION frame into the header block
// under way and, once the block is whole, decodes it into the reply.
// ended says the block ended stream 1: the answer is complete.
func (in *frames) headers(typ, flags byte, stream uint32, payload []byte) (ended bool, err error) {
	if stream != 1 {
		return false, fmt.Errorf("HTTP/2 protocol error: a header block on stream %d", stream)
	}
	if typ == frameContinuation && !in.open {
		return false, errors.New("HTTP/2 protocol error: a CONTINUATION without a header block")
	}
	if typ == frameHeaders {
		fragment, err := headerFragment(flags, payload)
		if err != nil {
			return false, err
		}
		in.block, in.ends = append(in.block[:0], fragment...), flags&flagEndStream != 0
	} else {
		in.block = append(in.block, payload...)
	}
	if in.open = flags&flagEndHeaders == 0; in.open {
		return false, nil
	}
	fields, err := in.hdec.DecodeFull(in.block)
	if err != nil {
		return false, fmt.Errorf("HTTP/2 header block: %w", err)
	}
	in.r.take(fields, in.blocks)
	in.blocks++
	return in.ends, nil
}

// take keeps the fields of the call's header block n: its :status and
// grpc-status and grpc-message of the headers (n == 0) or trailers.
func (r *reply) take(fields []hpack.HeaderField, n int) {
	into := &r.headerGRPC
	if n > 0 {
		into = &r.trailerGRPC
	}
	for _, f := range fields {
		switch f.Name {
		case ":status":
			if n == 0 {
				r.status = f.Value
			}
		case "grpc-status":
			into[0] = f.Value
		case "grpc-message":
			into[1] = f.Value
		}
	}
}

// headerFragment is a HEADERS frame's payload without its padding and
// priority.
func headerFragment(flags byte, p []byte) ([]byte, error) {
	pad := 0
	if flags&flagPadded != 0 {
		if len(p) < 1 {
			return nil, errors.New("HTTP/2 protocol error: a padded HEADERS frame without its pad length")
		}
		pad, p = int(p[0]), p[1:]
	}
	if flags&flagPriority != 0 {
		if len(p) < 5 {
			return nil, errors.New("HTTP/2 protocol error: a HEADERS frame too short for its priority")
		}
		p = p[5:]
	}
	if pad > len(p) {
		return nil, errors.New("HTTP/2 protocol error: a HEADERS frame's padding exceeds it")
	}
	return p[:len(p)-pad], nil
}

// request is all the client writes before it reads: the preface, its
// SETTINGS and the call on stream 1, as one write.
func request(path string) []byte {
	var block []byte
	for _, f := range [...][2]string{
		{":method", "POST"},
		{":scheme", "http"},
		{":path", path},
		{":authority", "localhost"},
		{"content-type", "application/grpc"},
		{"te", "trailers"},
	} {
		// A literal field without indexing, with a new name, neither
		// string Huffman-coded (RFC 7541 6.2.2): any decoder reads it.
		block = append(block, 0)
		block = appendString(block, f[0])
		block = appendString(block, f[1])
	}
	b := []byte(preface)
	b = append(b, frame(frameSettings, 0, 0, nil)...)
	b = append(b, frame(frameHeaders, flagEndHeaders, 1, block)...)
	// The empty message as gRPC frames it: uncompressed (0), length 0.
	return append(b, frame(frameData, flagEndStream, 1, []byte{0, 0, 0, 0, 0})...)
}

// appendString appends s as an HPACK string literal, not Huffman-coded: its
// length as a 7-bit prefix integer (RFC 7541 5.1), then its bytes.
func appendString(b []byte, s string) []byte {
	n := len(s)
	if n < 127 {
		b = append(b, byte(n))
	} else {
		b, n = append(b, 127), n-127
		for n >= 128 {
			b, n = append(b, byte(n%128+128)), n/128
		}
		b = append(b, byte(n))
	}
	return append(b, s...)
}

// frame is an HTTP/2 frame: its 9-byte header and payload.
func frame(typ, flags byte, stream uint32, payload []byte) []byte {
	n := len(payload)
	b := []byte{byte(n >> 16), byte(n >> 8), byte(n), typ, flags, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[5:], stream)
	return append(b, payload...)
}

// errorCode names an HTTP/2 error code (RFC 9113 7).
func errorCode(p []byte) string {
	code := binary.BigEndian.Uint32(p)
	names := []string{"NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR", "SETTINGS_TIMEOUT",
		"STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL", "COMPRESSION_ERROR", "CONNECT_ERROR",
		"ENHANCE_YOUR_CALM", "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED"}
	if code < uint32(len(names)) {
		return names[code]
	}
	return fmt.Sprintf("error code %#x", code)
}
