package cri

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// serve answers gRPC calls on a unix socket as a CRI runtime would: handler
// writes the answer; the server speaks unencrypted HTTP/2 only, as gRPC does.
func serve(t *testing.T, handler http.HandlerFunc) string {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: handler, Protocols: protocols}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return socket
}

// answer is a CRI Version answer with status code and message.
func answer(code, message string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != versionPath || r.Header.Get("Content-Type") != "application/grpc" {
			w.Header().Set("Grpc-Status", "12")
			w.WriteHeader(http.StatusOK)
			return
		}
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status, Grpc-Message")
		w.WriteHeader(http.StatusOK)
		if code == "0" {
			_, _ = w.Write([]byte{0, 0, 0, 0, 2, 0x0a, 0}) // VersionResponse{version: ""}
		}
		w.Header().Set("Grpc-Status", code)
		w.Header().Set("Grpc-Message", message)
	}
}

func TestVersionIsOKWhenTheRuntimeAnswersOK(t *testing.T) {
	socket := serve(t, answer("0", ""))
	if err := Version(context.Background(), socket); err != nil {
		t.Fatalf("Version: %v", err)
	}
}

func TestVersionReportsTheRuntimesError(t *testing.T) {
	socket := serve(t, answer("2", "server is not initialized yet"))
	err := Version(context.Background(), socket)
	if err == nil || !strings.Contains(err.Error(), "Unknown: server is not initialized yet") {
		t.Fatalf("Version: %v, want the runtime's Unknown error", err)
	}
}

func TestVersionOfATrailersOnlyAnswer(t *testing.T) {
	socket := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Grpc-Status", "12")
		w.Header().Set("Grpc-Message", "unknown%20service")
		w.WriteHeader(http.StatusOK)
	})
	err := Version(context.Background(), socket)
	if err == nil || !strings.Contains(err.Error(), "Unimplemented: unknown service") {
		t.Fatalf("Version: %v, want Unimplemented", err)
	}
}

func TestVersionWithoutAListenerNamesTheSocket(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "none.sock")
	err := Version(context.Background(), socket)
	if err == nil || !strings.Contains(err.Error(), socket) || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("Version: %v, want a dial error naming %s", err, socket)
	}
}

func TestVersionOfANonGRPCServer(t *testing.T) {
	socket := serve(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	if err := Version(context.Background(), socket); err == nil || !strings.Contains(err.Error(), "not a gRPC server") {
		t.Fatalf("Version: %v, want not a gRPC server", err)
	}
}

func TestProbeAnswersOnceTheRuntimeIsReadyAndTellsWhyNotMeanwhile(t *testing.T) {
	var ready atomic.Bool
	socket := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if ready.Load() {
			answer("0", "")(w, r)
		} else {
			answer("2", "server is not initialized yet")(w, r)
		}
	})
	p := &Probe{Socket: socket, First: time.Millisecond, Max: 5 * time.Millisecond}
	done := p.Answered()
	defer p.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for p.Why() == "" {
		if time.Now().After(deadline) {
			t.Fatal("the probe gave no reason after 10s")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case <-done:
		t.Fatal("answered before the runtime was ready")
	default:
	}
	if !strings.Contains(p.Why(), "not initialized") {
		t.Errorf("Why: %q, want the runtime's error", p.Why())
	}
	ready.Store(true)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("not answered 10s after the runtime was ready; last: %s", p.Why())
	}
}

func TestAStoppedProbeNeverAnswers(t *testing.T) {
	p := &Probe{Socket: filepath.Join(t.TempDir(), "none.sock"), First: time.Millisecond}
	done := p.Answered()
	p.Stop()
	select {
	case <-done:
		t.Fatal("a stopped probe answered")
	case <-time.After(50 * time.Millisecond):
	}
}
