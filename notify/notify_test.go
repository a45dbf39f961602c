package notify

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// manager listens on a real unix datagram socket, as systemd and podman do,
// and points NOTIFY_SOCKET at it.
func manager(t *testing.T) *net.UnixConn {
	t.Helper()
	// A short directory: a socket path is limited to 108 bytes.
	dir, err := os.MkdirTemp("", "notify")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	return conn
}

// receive returns the next datagram, or "" when none comes within d.
func receive(t *testing.T, conn *net.UnixConn, d time.Duration) string {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 256)
	n, _, err := conn.ReadFromUnix(buf)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

func TestReadySendsReady1(t *testing.T) {
	conn := manager(t)
	New().ReadyWhenHealthy(Probe{})
	if got := receive(t, conn, 5*time.Second); got != "READY=1" {
		t.Errorf("manager got %q, want READY=1", got)
	}
}

func TestStoppingSendsStopping1(t *testing.T) {
	conn := manager(t)
	New().Stopping()
	if got := receive(t, conn, 5*time.Second); got != "STOPPING=1" {
		t.Errorf("manager got %q, want STOPPING=1", got)
	}
}

// NOTIFY_SOCKET stays for nodeinit itself: READY=1 and STOPPING=1 both go
// out, one after the other.
func TestReadyThenStoppingBothArrive(t *testing.T) {
	conn := manager(t)
	n := New()
	n.ReadyWhenHealthy(Probe{})
	// READY=1 is queued by the probe's goroutine: wait for it to arrive
	// before stopping, or it would rightly be dropped.
	if got := receive(t, conn, 5*time.Second); got != "READY=1" {
		t.Fatalf("manager got %q, want READY=1", got)
	}
	n.Stopping()
	for _, want := range []string{"STOPPING=1"} {
		if got := receive(t, conn, 5*time.Second); got != want {
			t.Errorf("manager got %q, want %s", got, want)
		}
	}
}

func TestAManagerThatIsGoneIsNotFatal(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "gone.sock"))
	n := New()
	n.ReadyWhenHealthy(Probe{}) // logs the error
	n.Stopping()
	if !n.Wait(5 * time.Second) {
		t.Error("the sends to a manager that is gone did not end")
	}
}

// flaky answers 503 for the first fails requests, then 200. served200 is
// set before the 200 is written.
type flaky struct {
	fails     int32
	hits      atomic.Int32
	served200 atomic.Bool
	hit       chan int32
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := f.hits.Add(1)
	if f.hit != nil {
		select {
		case f.hit <- n:
		default:
		}
	}
	if f.fails >= 0 && n > f.fails {
		f.served200.Store(true)
		w.WriteHeader(http.StatusOK)
		return
	}
	w.WriteHeader(http.StatusServiceUnavailable)
}

func fastProbe(u string) Probe {
	return Probe{URL: u, Interval: 10 * time.Millisecond, MaxInterval: 40 * time.Millisecond, Timeout: time.Second}
}

func TestReadyWaitsForTheURLToAnswer200(t *testing.T) {
	conn := manager(t)
	f := &flaky{fails: 3}
	srv := httptest.NewServer(f)
	defer srv.Close()

	done := New().ReadyWhenHealthy(fastProbe(srv.URL + "/healthz"))
	got := receive(t, conn, 10*time.Second)
	if got != "READY=1" {
		t.Fatalf("manager got %q, want READY=1", got)
	}
	if !f.served200.Load() {
		t.Error("READY=1 arrived before the URL answered 200")
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the probe goes on after READY=1")
	}
	// The probe has ended: the count is final.
	if n := f.hits.Load(); n != 4 {
		t.Errorf("URL asked %d times, want 4 (three 503, one 200, then no more)", n)
	}
	if again := receive(t, conn, 100*time.Millisecond); again != "" {
		t.Errorf("manager got a second message %q", again)
	}
}

func TestCancelStopsTheProbeWithoutReady(t *testing.T) {
	conn := manager(t)
	f := &flaky{fails: -1, hit: make(chan int32, 1)} // never healthy
	srv := httptest.NewServer(f)
	defer srv.Close()

	n := New()
	done := n.ReadyWhenHealthy(fastProbe(srv.URL))
	for n := range f.hit {
		if n >= 2 {
			break
		}
	}
	n.Stopping()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the probe did not end when shutdown began")
	}
	if got := receive(t, conn, 5*time.Second); got != "STOPPING=1" {
		t.Errorf("manager got %q after shutdown began, want STOPPING=1 alone", got)
	}
	if got := receive(t, conn, 100*time.Millisecond); got != "" {
		t.Errorf("manager got %q after STOPPING=1", got)
	}
}

func TestProbeRetriesWhileTheURLRefusesConnections(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = fastProbe("http://" + addr + "/healthz").Wait(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait = %v, want it to retry until the context ends", err)
	}
}

func TestProbeRequestIsBoundedByItsTimeout(t *testing.T) {
	release := make(chan struct{})
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == 1 {
			select { // the first request hangs
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
	}))
	defer srv.Close()
	defer close(release)
	p := fastProbe(srv.URL)
	p.Timeout = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Wait(ctx); err != nil {
		t.Fatalf("Wait = %v, want the hung request abandoned and the next one to succeed", err)
	}
	if n := hits.Load(); n != 2 {
		t.Errorf("URL asked %d times, want 2", n)
	}
}

func TestWithoutNotifySocketNothingIsProbedOrSent(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	f := &flaky{fails: 0}
	srv := httptest.NewServer(f)
	defer srv.Close()
	n := New()
	if n.Enabled() {
		t.Fatal("Enabled with NOTIFY_SOCKET empty")
	}
	<-n.ReadyWhenHealthy(fastProbe(srv.URL))
	n.Stopping()
	if n := f.hits.Load(); n != 0 {
		t.Errorf("URL asked %d times with no manager to tell", n)
	}
}

func TestReadyWithoutURLIsSentAtOnce(t *testing.T) {
	conn := manager(t)
	<-New().ReadyWhenHealthy(Probe{})
	if got := receive(t, conn, 5*time.Second); got != "READY=1" {
		t.Errorf("manager got %q, want READY=1", got)
	}
}

func TestEnvironDropsNotifySocket(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{nil, []string{}},
		{[]string{"PATH=/bin", "NOTIFY_SOCKET=/run/notify.sock", "HOME=/"}, []string{"PATH=/bin", "HOME=/"}},
		{[]string{"NOTIFY_SOCKET=", "NOTIFY_SOCKET_X=1"}, []string{"NOTIFY_SOCKET_X=1"}},
		{[]string{"A=NOTIFY_SOCKET=x"}, []string{"A=NOTIFY_SOCKET=x"}},
	} {
		if got := Environ(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("Environ(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestIntervalDoublesUpToTheMaximum(t *testing.T) {
	p := Probe{}.withDefaults()
	var got []time.Duration
	for d := p.Interval; len(got) < 7; d = nextInterval(d, p.MaxInterval) {
		got = append(got, d)
	}
	ms := time.Millisecond
	want := []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 2000 * ms, 2000 * ms}
	if !slices.Equal(got, want) {
		t.Errorf("waits %v, want %v", got, want)
	}
	if p.Timeout != time.Second {
		t.Errorf("default timeout %v, want 1s", p.Timeout)
	}
}

func TestWaitOnAMalformedURLFailsAtOnce(t *testing.T) {
	if err := (Probe{URL: "http://[::1"}).Wait(context.Background()); err == nil {
		t.Error("Wait on a malformed URL did not fail at once")
	}
}

func TestNoReadyOnceShutdownBegan(t *testing.T) {
	conn := manager(t)
	n := New()
	n.Stopping()
	<-n.ReadyWhenHealthy(Probe{})
	if got := receive(t, conn, 5*time.Second); got != "STOPPING=1" {
		t.Errorf("manager got %q, want STOPPING=1", got)
	}
	if got := receive(t, conn, 100*time.Millisecond); got != "" {
		t.Errorf("manager got %q after STOPPING=1, want nothing", got)
	}
}

// A manager that stops reading its socket must not hold shutdown: Stopping
// returns at once, and the send gives up after its bound.
func TestStoppingDoesNotWaitForAManagerThatStoppedReading(t *testing.T) {
	conn := manager(t)
	// Fill the manager's queue until a send would block. A datagram
	// socket's own send buffer can fill before the receiver's queue (its
	// length is net.unix.max_dgram_qlen): then a new socket, as each send
	// of the notifier's is, would still get through. So the queue is full
	// only when the first write of a fresh socket blocks.
	addr := conn.LocalAddr().(*net.UnixAddr)
	for i := 0; ; i++ {
		fill, err := net.DialUnix("unixgram", nil, addr)
		if err != nil {
			t.Fatal(err)
		}
		defer fill.Close()
		sent := 0
		for ; ; sent++ {
			fill.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
			if _, err := fill.Write([]byte("X=1")); err != nil {
				break
			}
		}
		if sent == 0 {
			break
		}
		if i > 1000 {
			t.Fatal("the manager's queue never filled")
		}
	}
	n := New()
	start := time.Now()
	n.Stopping()
	if took := time.Since(start); took > 100*time.Millisecond {
		t.Errorf("Stopping took %v, want it to return at once", took)
	}
	if !n.Wait(sendTimeout + 5*time.Second) {
		t.Fatal("the send to a manager that stopped reading never gave up")
	}
	if took := time.Since(start); took < sendTimeout/2 {
		t.Errorf("the send gave up after %v, before its bound of %v", took, sendTimeout)
	}
}

func TestStatusCodeParsesHTTP1StatusLines(t *testing.T) {
	for _, tc := range []struct {
		line string
		code int
		ok   bool
	}{
		{"HTTP/1.1 200 OK\r\n", 200, true},
		{"HTTP/1.0 503 Service Unavailable\r\n", 503, true},
		{"HTTP/1.1 204\r\n", 204, true},
		{"HTTP/2 200\r\n", 0, false},
		{"SSH-2.0-OpenSSH_9.2\r\n", 0, false},
		{"HTTP/1.1 20 OK\r\n", 0, false},
		{"HTTP/1.1 abc OK\r\n", 0, false},
		{"", 0, false},
	} {
		code, err := statusCode(tc.line)
		if code != tc.code || (err == nil) != tc.ok {
			t.Errorf("statusCode(%q) = %d, %v; want %d, ok %v", tc.line, code, err, tc.code, tc.ok)
		}
	}
}
