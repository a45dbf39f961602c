package cri

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2/hpack"
)

// serveRaw plays the runtime byte by byte: talk has the first connection
// made to the socket it returns.
func serveRaw(t *testing.T, talk func(c net.Conn)) string {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		talk(c)
	}()
	t.Cleanup(func() { _ = l.Close(); <-done })
	return socket
}

// readCall reads the client's preface and frames until the call's end
// (END_STREAM on stream 1).
func readCall(t *testing.T, c net.Conn) {
	if _, err := io.ReadFull(c, make([]byte, len(preface))); err != nil {
		t.Errorf("reading the preface: %v", err)
		return
	}
	for {
		typ, flags, stream, _, err := readFrame(c)
		if err != nil {
			t.Errorf("reading the call: %v", err)
			return
		}
		if stream == 1 && (typ == frameData || typ == frameHeaders) && flags&flagEndStream != 0 {
			return
		}
	}
}

// readFrame reads a frame the client wrote.
func readFrame(c net.Conn) (typ, flags byte, stream uint32, payload []byte, err error) {
	var head [9]byte
	if _, err := io.ReadFull(c, head[:]); err != nil {
		return 0, 0, 0, nil, err
	}
	payload = make([]byte, int(head[0])<<16|int(head[1])<<8|int(head[2]))
	if _, err := io.ReadFull(c, payload); err != nil {
		return 0, 0, 0, nil, err
	}
	return head[3], head[4], binary.BigEndian.Uint32(head[5:]) & (1<<31 - 1), payload, nil
}

// rawFrame is an HTTP/2 frame a test server writes, as written by hand.
func rawFrame(typ, flags byte, stream uint32, payload []byte) []byte {
	n := len(payload)
	b := []byte{byte(n >> 16), byte(n >> 8), byte(n), typ, flags, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[5:], stream)
	return append(b, payload...)
}

// settings is a server's connection preface: a SETTINGS frame with
// SETTINGS_MAX_CONCURRENT_STREAMS 100.
var settings = rawFrame(frameSettings, 0, 0, []byte{0, 3, 0, 0, 0, 100})

// fields encodes header fields as a server's HPACK encoder would.
func fields(enc *hpack.Encoder, buf *bytes.Buffer, kv ...string) []byte {
	buf.Reset()
	for i := 0; i < len(kv); i += 2 {
		_ = enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return bytes.Clone(buf.Bytes())
}

// within calls Version with a 10s deadline and fails the test if it took
// more than 5s: the errors below must come from the answer, not a timeout.
func within(t *testing.T, socket string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	err := Version(ctx, socket)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Version took %v", took)
	}
	return err
}

func TestVersionRefusesAFrameLargerThanTheBound(t *testing.T) {
	socket := serveRaw(t, func(c net.Conn) {
		readCall(t, c)
		big := rawFrame(frameData, 0, 1, nil)
		big[0] = 0x10 // 1 MiB, of which the client must read none
		_, _ = c.Write(append(settings, big...))
		_, _ = io.Copy(io.Discard, c)
	})
	err := within(t, socket)
	if err == nil || !strings.Contains(err.Error(), "a frame of 1048576 bytes, more than 16384") {
		t.Fatalf("Version: %v, want the frame refused", err)
	}
}

func TestVersionBoundsAllTheRuntimeSends(t *testing.T) {
	socket := serveRaw(t, func(c net.Conn) {
		readCall(t, c)
		var buf bytes.Buffer
		enc := hpack.NewEncoder(&buf)
		_, _ = c.Write(settings)
		_, _ = c.Write(rawFrame(frameHeaders, flagEndHeaders, 1, fields(enc, &buf, ":status", "200", "content-type", "application/grpc")))
		for range 5 { // 80 KiB of message, never ended
			if _, err := c.Write(rawFrame(frameData, 0, 1, make([]byte, maxFrame))); err != nil {
				break
			}
		}
		_, _ = io.Copy(io.Discard, c)
	})
	err := within(t, socket)
	if err == nil || !strings.Contains(err.Error(), "more than 65536 bytes") {
		t.Fatalf("Version: %v, want the answer bounded", err)
	}
}

func TestVersionEndsAtTheDeadlineOfARuntimeThatNeverAnswers(t *testing.T) {
	socket := serveRaw(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := Version(ctx, socket)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), "CRI Version call: ") {
		t.Fatalf("Version: %v, want the deadline exceeded", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Version took %v past a 200ms deadline", took)
	}
}

func TestVersionEndsWhenCanceled(t *testing.T) {
	socket := serveRaw(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	err := Version(ctx, socket)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Version: %v, want canceled", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Version took %v past its cancel", took)
	}
}

func TestVersionFailsOnGOAWAY(t *testing.T) {
	socket := serveRaw(t, func(c net.Conn) {
		readCall(t, c)
		goaway := append([]byte{0, 0, 0, 0, 0, 0, 0, 11}, "too_many_pings"...) // last stream 0, ENHANCE_YOUR_CALM
		_, _ = c.Write(append(settings, rawFrame(frameGoAway, 0, 0, goaway)...))
		_, _ = io.Copy(io.Discard, c)
	})
	err := within(t, socket)
	if err == nil || !strings.Contains(err.Error(), `the runtime sent GOAWAY: ENHANCE_YOUR_CALM "too_many_pings"`) {
		t.Fatalf("Version: %v, want GOAWAY", err)
	}
}

func TestVersionFailsWhenTheRuntimeResetsTheCall(t *testing.T) {
	socket := serveRaw(t, func(c net.Conn) {
		readCall(t, c)
		_, _ = c.Write(append(settings, rawFrame(frameRSTStream, 0, 1, []byte{0, 0, 0, 7})...))
		_, _ = io.Copy(io.Discard, c)
	})
	err := within(t, socket)
	if err == nil || !strings.Contains(err.Error(), "the runtime reset the call: REFUSED_STREAM") {
		t.Fatalf("Version: %v, want the reset", err)
	}
}

func TestVersionOfAnHTTP1Server(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	err = within(t, socket)
	if err == nil || !strings.Contains(err.Error(), `not an HTTP/2 server: it answered "HTTP/1.1 "`) {
		t.Fatalf("Version: %v, want not an HTTP/2 server", err)
	}
}

func TestVersionOfAPeerWritingGarbage(t *testing.T) {
	socket := serveRaw(t, func(c net.Conn) {
		_, _ = c.Write([]byte("220 mail.example ESMTP ready\r\n"))
		_, _ = io.Copy(io.Discard, c)
	})
	err := within(t, socket)
	if err == nil || !strings.Contains(err.Error(), "not an HTTP/2 server") {
		t.Fatalf("Version: %v, want not an HTTP/2 server", err)
	}
}

func TestVersionOfAPeerThatHangsUp(t *testing.T) {
	socket := serveRaw(t, func(c net.Conn) { readCall(t, c) })
	err := within(t, socket)
	if err == nil || !strings.Contains(err.Error(), "closed the connection before it answered") {
		t.Fatalf("Version: %v, want the hang-up told", err)
	}
}

func TestVersionPercentDecodesTheRuntimesMessage(t *testing.T) {
	socket := serve(t, answer("14", "connection%20refused%3A%20%E2%9C%93%25"))
	err := Version(context.Background(), socket)
	if err == nil || !strings.HasSuffix(err.Error(), "CRI Version call: Unavailable: connection refused: ✓%") {
		t.Fatalf("Version: %v, want the message percent-decoded", err)
	}
}

// A runtime may ping, send its header blocks in pieces, padded, and grow
// its window before it answers; the client must keep up.
func TestVersionAnswersPingsAndReadsHeaderBlocksInPieces(t *testing.T) {
	socket := serveRaw(t, func(c net.Conn) {
		readCall(t, c)
		ping := []byte("nodeinit")
		_, _ = c.Write(append(settings, rawFrame(framePing, 0, 0, ping)...))
		var settingsACK, pingACK bool
		for !settingsACK || !pingACK {
			typ, flags, _, payload, err := readFrame(c)
			if err != nil {
				t.Errorf("reading the client's acks: %v", err)
				return
			}
			switch {
			case typ == frameSettings && flags == flagACK:
				settingsACK = true
			case typ == framePing && flags == flagACK && bytes.Equal(payload, ping):
				pingACK = true
			}
		}
		var buf bytes.Buffer
		enc := hpack.NewEncoder(&buf)
		block := fields(enc, &buf, ":status", "200", "content-type", "application/grpc", "x-runtime", strings.Repeat("containerd ", 10))
		padded := append(append([]byte{3}, block[:10]...), 0, 0, 0)
		_, _ = c.Write(rawFrame(frameHeaders, flagPadded, 1, padded))
		_, _ = c.Write(rawFrame(frameContinuation, 0, 1, block[10:20]))
		_, _ = c.Write(rawFrame(frameContinuation, flagEndHeaders, 1, block[20:]))
		_, _ = c.Write(rawFrame(0x8, 0, 0, []byte{0, 1, 0, 0})) // WINDOW_UPDATE
		_, _ = c.Write(rawFrame(frameData, 0, 1, []byte{0, 0, 0, 0, 2, 0x0a, 0}))
		// The trailers name a field from the dynamic table the headers
		// filled: both blocks must go through one decoder.
		_, _ = c.Write(rawFrame(frameHeaders, flagEndHeaders|flagEndStream, 1, fields(enc, &buf, "x-runtime", strings.Repeat("containerd ", 10), "grpc-status", "0")))
		_, _ = io.Copy(io.Discard, c)
	})
	if err := within(t, socket); err != nil {
		t.Fatalf("Version: %v", err)
	}
}
