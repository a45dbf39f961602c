package bus

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/bus/internal/wire"
	"github.com/nodeinit/nodeinit/bus/service"
	"github.com/nodeinit/nodeinit/internal/clientlog"
	"github.com/nodeinit/nodeinit/test/testenv"
)

// The kubelet connects once when it starts and never retries: whatever
// else runs on the node must not keep it from its delay lock. These tests
// are the ways found to do that.

// A process outside the executor's tree that connects in a loop costs the
// kubelet nothing, and nodeinit's log a few lines.
func TestAConnectFloodFromOutsideTheTreeDoesNotCostTheKubeletItsLock(t *testing.T) {
	logs := testenv.CaptureLog(t)
	// Not listen: the test process is not the executor here.
	b, err := listenTest(filepath.Join(t.TempDir(), "bus"), testOptions{}, defaultTunables())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// The test process floods, as one process looping connect() does;
	// each kubelet is a helper, made the executor, so the flood comes from
	// outside its tree.
	stop := make(chan struct{})
	var connects, failed atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			c, err := net.Dial("unix", b.path)
			if err != nil {
				failed.Add(1)
				continue
			}
			connects.Add(1)
			c.Close()
		}
	}()
	const flood = 4 * time.Second
	start := time.Now()
	runs, locked := 0, 0
	for runs < 3 || time.Since(start) < flood {
		h := startHelper(t, "kubelet", b.path, 0)
		if err := b.AdmitExecutor(h.pid()); err != nil {
			t.Fatal(err)
		}
		runs++
		if r := h.start(); r == "locked" {
			locked++
		} else {
			t.Logf("kubelet %d: %s", runs, r)
		}
		h.stop()
	}
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)
	all := logs.Lines()
	refusals := logs.Lines("Refused")
	t.Logf("%v of flood: %d connects (%d failed to connect), kubelet got its lock %d of %d times; %d log lines, %d of them refusals",
		elapsed.Round(time.Millisecond), connects.Load(), failed.Load(), locked, runs, len(all), len(refusals))
	if locked != runs {
		t.Errorf("the kubelet got its lock %d of %d times under the flood", locked, runs)
	}
	// The first refusal, then a summary at most every logInterval (30s):
	// a line or two for the whole flood, whatever its rate; and one line
	// for the first lock taken and one for the first released.
	if len(refusals) > 2 || len(all) > 6 {
		t.Errorf("%d log lines, %d about refusals, in %v:\n%s", len(all), len(refusals), elapsed, strings.Join(all[:min(len(all), 10)], "\n"))
	}
	if connects.Load() < 1000 {
		t.Errorf("only %d connects: the flood did not flood", connects.Load())
	}
}

// Writing into a lock's pipe is not a way to make nodeinit spin: the bus
// waits for the pipe's hang-up, and never reads what is written.
func TestWritingIntoALockCostsTheBusNoCPU(t *testing.T) {
	b := listen(t, testOptions{})
	fd, err := (kubelet{connect(t, b)}).inhibitShutdown()
	if err != nil {
		t.Fatal(err)
	}
	lock := os.NewFile(uintptr(fd), "lock")
	// cat holds the lock alone from here on, and writes into it as fast
	// as the pipe takes it.
	writer := exec.Command("sh", "-c", "exec cat /dev/zero >&3")
	writer.ExtraFiles = []*os.File{lock}
	if err := writer.Start(); err != nil {
		t.Fatal(err)
	}
	lock.Close()
	const window = 3 * time.Second
	before := cpuTime(t)
	time.Sleep(window)
	used := cpuTime(t) - before
	writer.Process.Kill()
	writer.Wait()
	t.Logf("the test process used %v of CPU in %v while a writer filled the lock's pipe", used.Round(time.Millisecond), window)
	if used > 300*time.Millisecond {
		t.Errorf("the bus used %v of CPU in %v while a client wrote into its lock", used, window)
	}
	waitFor(t, loginOf(b).PrepareForShutdown(), "the lock released when its writer died")
}

// cpuTime is the CPU time, user and system, the test process has used.
func cpuTime(t *testing.T) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A client that sends many calls before it reads their replies, as an
// event loop does, is answered in full: the bus stops reading while the
// replies wait, and drops only a client that stops reading for good.
func TestPipelinedCallsAreAllAnswered(t *testing.T) {
	b := listen(t, testOptions{})
	c := dialRaw(t, b)
	c.auth()
	c.hello()
	const calls = 300
	var all []byte
	for i := range calls {
		all = append(all, encodeCall(t, uint32(i+2), logindName, logindPath, service.PropertiesIface, "Get", managerIface, "InhibitDelayMaxUSec")...)
	}
	wrote := make(chan error, 1)
	go func() {
		_, err := c.Write(all)
		wrote <- err
	}()
	// The client is busy elsewhere a while before it reads.
	time.Sleep(500 * time.Millisecond)
	answered := 0
	for answered < calls {
		data, err := wire.ReadMessage(c.r)
		if err != nil {
			break
		}
		m, err := wire.Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		if m.Type != dbus.TypeMethodReply || m.Headers[dbus.FieldReplySerial].Value() != uint32(answered+2) {
			t.Fatalf("reply %d: %v", answered, m)
		}
		answered++
	}
	t.Logf("%d of %d pipelined calls answered", answered, calls)
	if answered != calls {
		t.Errorf("%d of %d pipelined calls answered", answered, calls)
	}
	if err := <-wrote; err != nil && !errors.Is(err, syscall.EPIPE) {
		t.Errorf("writing the calls: %v", err)
	}
}

// What a client sends is clipped in the reply and the log, and a client
// that makes errors in a loop costs the log a line, not one per call.
func TestWhatAClientCanMakeNodeinitLogIsBounded(t *testing.T) {
	logs := testenv.CaptureLog(t)
	b := listen(t, testOptions{})
	c := dialRaw(t, b)
	c.auth()
	c.hello()
	huge := "type='" + strings.Repeat("x", 60<<10) + "'" // 60 KB of an unknown type, quoted in the error
	for i := range 100 {
		c.call(uint32(i+2), service.BusName, service.BusPath, service.BusName, "AddMatch", huge)
		m := c.message()
		text, _ := m.Body[0].(string)
		if m.Type != dbus.TypeError || wire.Header(m, dbus.FieldErrorName) != errMatchRuleInvalid || len(text) > clientlog.MaxErrorText+32 {
			t.Fatalf("reply to a 60 KB rule: %s, %d bytes of text", wire.Header(m, dbus.FieldErrorName), len(text))
		}
	}
	lines := logs.Lines("Answered a D-Bus call with an error")
	if len(lines) != 1 {
		t.Fatalf("%d lines at Info for 100 errors, want 1", len(lines))
	}
	if len(lines[0]) > 2048 {
		t.Errorf("a log line of %d bytes for a 60 KB rule", len(lines[0]))
	}
	b.Close()
	// Close logs the count of what it did not log.
	if l := logs.Lines("Answered a D-Bus call with an error", "repeated=99"); len(l) != 1 {
		t.Errorf("no summary of the 99 errors not logged: %q", logs.Lines("Answered"))
	}
}

// A panic in a goroutine that serves a client ends that connection, or
// releases that lock, never nodeinit. The clock is the seam: it panics
// when the chosen function asks it the time.
func TestAPanicEndsOneConnectionNotNodeinit(t *testing.T) {
	for _, where := range []string{"(*Bus).admit", "(*conn).setReadDeadline", "(*conn).writeLoop", "(*Logind).release"} {
		t.Run(where, func(t *testing.T) {
			logs := testenv.CaptureLog(t)
			var armed atomic.Bool
			clock := func() time.Time {
				if armed.Load() && calledFrom(where) {
					panic("injected in " + where)
				}
				return time.Now()
			}
			b := listen(t, testOptions{}, func(tun *tunables) { tun.now = clock })
			if where == "(*Logind).release" {
				fd, err := (kubelet{connect(t, b)}).inhibitShutdown()
				if err != nil {
					t.Fatal(err)
				}
				drained := loginOf(b).PrepareForShutdown()
				armed.Store(true)
				syscall.Close(int(fd))
				waitFor(t, drained, "the lock released although its watcher panicked")
			} else {
				armed.Store(true)
				// The panic may come after Hello is answered: then the
				// connection ends right after it began.
				if conn, err := dbus.Connect(b.Address()); err == nil {
					waitFor(t, conn.Context().Done(), "the end of a connection whose "+where+" panicked")
					conn.Close()
				}
				armed.Store(false)
				// The bus goes on serving.
				if _, err := (kubelet{connect(t, b)}).inhibitShutdown(); err != nil {
					t.Errorf("after the panic: %v", err)
				}
			}
			// The panic is logged after what it ended: wait for it.
			logs.WaitFor(t, "failed;", "injected in "+where)
			if l := logs.Lines("failed;", "injected in "+where); len(l) != 1 {
				t.Errorf("log of the panic: %q", l)
			}
		})
	}
}

// calledFrom reports whether a function whose name ends in fn is on the
// caller's stack.
func calledFrom(fn string) bool {
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, "."+fn) {
			return true
		}
		if !more {
			return false
		}
	}
}

// A panic in a pass-through's reader or writer ends that pass-through and
// closes that client's connection, never nodeinit: the next connection
// passes through again.
func TestAPanicInAPassThroughEndsThatConnectionNotNodeinit(t *testing.T) {
	address, _ := systemBus(t)
	serveEcho(t, address)
	for _, where := range []string{"reading", "writing"} {
		t.Run(where, func(t *testing.T) {
			logs := testenv.CaptureLog(t)
			var armed atomic.Bool
			b := listen(t, testOptions{Upstream: address}, func(tun *tunables) {
				tun.upstreamHook = func(during string) {
					if armed.Load() && during == where {
						panic("injected while " + where)
					}
				}
			})
			client := connect(t, b)
			echo := client.Object("org.example.Echo", "/org/example/Echo")
			must(t, echo.Call("org.example.Echo.Echo", 0, "before").Err)
			armed.Store(true)
			if err := echo.Call("org.example.Echo.Echo", 0, "during").Err; err == nil {
				t.Error("a call whose pass-through panicked was answered")
			}
			waitFor(t, client.Context().Done(), "the end of the connection whose pass-through panicked")
			armed.Store(false)
			var s string
			if err := connect(t, b).Object("org.example.Echo", "/org/example/Echo").Call("org.example.Echo.Echo", 0, "after").Store(&s); err != nil || s != "echo after" {
				t.Errorf("a new connection after the panic: %q, %v", s, err)
			}
			logs.WaitFor(t, "failed;", "injected while "+where)
			if l := logs.Lines("failed;", "injected while "+where); len(l) != 1 || !strings.Contains(l[0], "stack=") {
				t.Errorf("log of the panic: %q", l)
			}
		})
	}
}
