package bus

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/bus/service"
	"github.com/nodeinit/nodeinit/test/testenv"
)

// refused waits until the bus has refused want connections in all, and
// returns its status.
func refused(t *testing.T, b *Bus, want int) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := b.Status()
		if strings.Contains(s, " refusedConnections="+strconv.Itoa(want)) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("not %d refusals within 10s: %s", want, s)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestNobodyIsAdmittedBeforeTheExecutorRuns(t *testing.T) {
	logs := testenv.CaptureLog(t)
	tun := defaultTunables()
	tun.helloTimeout = 500 * time.Millisecond // how long a connection waits for the executor
	b, err := listenTest(filepath.Join(t.TempDir(), "bus"), testOptions{}, tun)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if conn, err := dbus.Connect(b.Address()); err == nil {
		conn.Close()
		t.Fatal("a client was admitted before the executor ran")
	}
	refused(t, b, 1)
	logs.WaitFor(t, "Refused a D-Bus connection", "the executor has not started")
	if l := logs.Lines("Refused a D-Bus connection", "the executor has not started"); len(l) != 1 {
		t.Errorf("log: %q", l)
	}
}

// The executor runs before nodeinit learns its pid: a connection it makes
// in that instant waits for AdmitExecutor instead of being refused, which
// would leave a kubelet without its lock for good.
func TestAConnectionBeforeTheExecutorIsKnownWaitsForIt(t *testing.T) {
	b, err := listenTest(filepath.Join(t.TempDir(), "bus"), testOptions{}, defaultTunables())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	connected := make(chan error, 1)
	go func() {
		conn, err := dbus.Connect(b.Address())
		if err == nil {
			conn.Close()
		}
		connected <- err
	}()
	// The connection waits, admitted by nobody yet.
	testenv.WaitFor(t, 5*time.Second, "the connection to wait for the executor", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.waiting == 1
	})
	if err := b.AdmitExecutor(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-connected:
		if err != nil {
			t.Errorf("the connection made before the executor was known: %v, want admitted", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting connection was not admitted once the executor was known")
	}
}

// The executor's descendants are admitted, the process above it is not.
func TestTheExecutorsTreeIsAdmittedAndNothingAbove(t *testing.T) {
	logs := testenv.CaptureLog(t)
	b := listen(t, testOptions{})
	// The executor is a shell; the kubelet is its child, not the shell
	// itself (the shell waits for it rather than exec it).
	executor := exec.Command("sh", "-c", `"$0" -test.run='^$'; true`, os.Args[0])
	executor.Env = append(os.Environ(), helperRole+"=kubelet", helperBus+"="+b.path)
	h := &helper{t: t, cmd: executor}
	var err error
	if h.stdin, err = executor.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := executor.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	h.out = bufio.NewReader(stdout)
	if err := executor.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.stop)
	if err := b.AdmitExecutor(executor.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if r := h.start(); r != "locked" {
		t.Fatalf("the executor's child: %s", r)
	}
	// The test process is the executor's parent: outside its tree.
	if conn, err := dbus.Connect(b.Address()); err == nil {
		conn.Close()
		t.Fatal("the executor's parent was admitted")
	}
	refused(t, b, 1)
	logs.WaitFor(t, "Refused a D-Bus connection", "not the executor or below it")
	if l := logs.Lines("Refused a D-Bus connection", "not the executor or below it"); len(l) != 1 {
		t.Errorf("log: %q", l)
	}
	if s := b.Status(); !strings.Contains(s, `inhibitors=1 [who="kubelet"`) {
		t.Errorf("status: %s", s)
	}
}

// An executor that has ended admits nobody, even a process whose walk up
// its parents finds the executor's pid: that pid may be another process's
// by now. The bus holds the executor's pidfd, not its pid. The proc
// filesystem the bus reads says the test process is the ended executor's
// child, as it would say of a child of a process that got its pid.
func TestAnExecutorThatEndedAdmitsNobody(t *testing.T) {
	logs := testenv.CaptureLog(t)
	executor := exec.Command("sleep", "60")
	if err := executor.Start(); err != nil {
		t.Fatal(err)
	}
	pid := executor.Process.Pid
	proc := t.TempDir()
	self := strconv.Itoa(os.Getpid())
	if err := os.MkdirAll(filepath.Join(proc, self), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, self, "stat"), []byte(self+" (logind.test) S "+strconv.Itoa(pid)+" 1 1"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := listen(t, testOptions{}, func(tun *tunables) { tun.procRoot = proc })
	if err := b.AdmitExecutor(pid); err != nil {
		t.Fatal(err)
	}
	// While the executor runs, the test process is its child.
	connect(t, b)
	executor.Process.Kill()
	executor.Wait()
	if conn, err := dbus.Connect(b.Address()); err == nil {
		conn.Close()
		t.Fatal("a child of an executor that has ended was admitted")
	}
	refused(t, b, 1)
	logs.WaitFor(t, "Refused a D-Bus connection", "the executor has ended")
}

// A connection whose peer has ended by the time it is checked is refused,
// though the walk from its pid finds the executor: the pid may be another
// process's by then. The peer here is a zombie, so its pid still leads to
// the executor, and only its pidfd says it has ended.
func TestAPeerThatEndedBeforeItsCheckIsRefused(t *testing.T) {
	logs := testenv.CaptureLog(t)
	dir := t.TempDir()
	// A listener of the test's own, so that the connection waits, unchecked,
	// until the peer has ended.
	path := filepath.Join(dir, "backlog")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	b := newTestBus(filepath.Join(dir, "bus"), testOptions{}, defaultTunables())
	defer b.Close()
	if err := b.AdmitExecutor(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	h := startHelper(t, "dial", path, 0)
	if r := h.start(); r != "dialled" {
		t.Fatal(r)
	}
	// Ended, not reaped: a zombie below the test process, every thread
	// of it gone (the pidfd says so only then).
	pidfd, err := unix.PidfdOpen(h.pid(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	for !exited(pidfd) {
		time.Sleep(time.Millisecond)
	}
	nc, err := ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	f, err := nc.File()
	nc.Close()
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	b.admit(fd)
	refused(t, b, 1)
	logs.WaitFor(t, "Refused a D-Bus connection", "the process ended before it was checked")
}

// On a kernel without SO_PEERPIDFD the admission is the walk from the
// peer's pid alone: the executor's tree is admitted, the rest refused, and
// a refused process, which cannot be told from a later one with its pid,
// is walked again each time.
func TestWithoutPeerPidfdsTheWalkAloneDecides(t *testing.T) {
	logs := testenv.CaptureLog(t)
	b := listen(t, testOptions{}, func(tun *tunables) {
		tun.peerPidfd = func(int) (int, error) { return -1, os.NewSyscallError("getsockopt SO_PEERPIDFD", unix.ENOPROTOOPT) }
	})
	if _, err := (kubelet{connect(t, b)}).inhibitShutdown(); err != nil {
		t.Fatalf("the executor: %v", err)
	}
	executor := exec.Command("sleep", "60")
	if err := executor.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		executor.Process.Kill()
		executor.Wait()
	}()
	if err := b.AdmitExecutor(executor.Process.Pid); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		if conn, err := dbus.Connect(b.Address()); err == nil {
			conn.Close()
			t.Fatal("the executor's parent was admitted")
		}
		refused(t, b, i)
	}
	logs.WaitFor(t, "Refused a D-Bus connection", "not the executor or below it")
	b.mu.Lock()
	remembered := len(b.refused)
	b.mu.Unlock()
	if remembered != 0 {
		t.Errorf("%d processes remembered without a pidfd", remembered)
	}
}

// One process has at most maxConnsPerPeer connections.
func TestOneProcessHasAtMostFourConnections(t *testing.T) {
	b := listen(t, testOptions{})
	for range maxConnsPerPeer {
		c := dialRaw(t, b)
		c.auth()
		c.hello()
	}
	fifth := dialRaw(t, b)
	fifth.closedByServer()
	if s := refused(t, b, 1); !strings.HasPrefix(s, "connections=4 ") {
		t.Errorf("status: %s", s)
	}
}

// Connections that never say Hello are dropped, and meanwhile the
// executor itself still connects: the kubelet, when it is the executor,
// has its slot whatever its descendants hold.
func TestIdleConnectionsAreDroppedAndTheExecutorAlwaysConnects(t *testing.T) {
	const hello = 4 * time.Second
	b := listen(t, testOptions{}, func(tun *tunables) { tun.helloTimeout = hello })
	// Nine processes below the executor (the test process) open four
	// connections each, authenticate and say nothing more: more than the
	// bus serves.
	start := time.Now()
	connected := 0
	for range 9 {
		r := startHelper(t, "idle", b.path, maxConnsPerPeer).start()
		n, err := strconv.Atoi(strings.TrimPrefix(r, "connected="))
		if err != nil {
			t.Fatal(r)
		}
		connected += n
	}
	if connected != maxConns {
		t.Errorf("%d idle connections authenticated, want %d", connected, maxConns)
	}
	if s := refused(t, b, 9*maxConnsPerPeer-maxConns); !strings.HasPrefix(s, "connections=32 ") {
		t.Fatalf("status with the idle connections: %s", s)
	}
	conn := connect(t, b)
	if _, err := (kubelet{conn}).inhibitShutdown(); err != nil {
		t.Fatalf("the executor, with every slot taken: %v", err)
	}
	if time.Since(start) >= hello {
		t.Fatalf("the test took %v to get here, longer than the Hello timeout", time.Since(start))
	}
	// Then the silent ones are dropped, and a kubelet below the executor
	// connects.
	deadline := time.Now().Add(hello + 10*time.Second)
	for !strings.HasPrefix(b.Status(), "connections=1 ") {
		if time.Now().After(deadline) {
			t.Fatalf("the idle connections still there: %s", b.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r := startHelper(t, "kubelet", b.path, 0).start(); r != "locked" {
		t.Errorf("a kubelet after the idle connections went: %s", r)
	}
}

// A connection that said Hello and waits for nothing (no match rule) is
// dropped after idleTimeout; one with a match rule stays.
func TestAConnectionThatWaitsForNothingIsDroppedWhenIdle(t *testing.T) {
	b := listen(t, testOptions{}, func(tun *tunables) { tun.idleTimeout = 300 * time.Millisecond })
	idle, waiting := dialRaw(t, b), dialRaw(t, b)
	for _, c := range []*raw{idle, waiting} {
		c.auth()
		c.hello()
	}
	waiting.call(2, service.BusName, service.BusPath, service.BusName, "AddMatch", "type='signal',member='PrepareForShutdown'")
	if m := waiting.message(); m.Type != dbus.TypeMethodReply {
		t.Fatalf("AddMatch: %v", m)
	}
	idle.closedByServer()
	time.Sleep(600 * time.Millisecond)
	waiting.call(3, logindName, logindPath, service.PropertiesIface, "Get", managerIface, "InhibitDelayMaxUSec")
	if m := waiting.message(); m.Type != dbus.TypeMethodReply {
		t.Errorf("the connection with a match rule: %v", m)
	}
}

// One process takes at most maxInhibitorsPerPeer locks; a crowd of them at
// most maxInhibitors; the executor itself takes its lock whatever they
// hold.
func TestLockHogsLeaveTheExecutorItsLock(t *testing.T) {
	b := listen(t, testOptions{})
	if r := startHelper(t, "hog", b.path, 0).start(); r != "locks=4 refused="+service.LimitsExceeded {
		t.Fatalf("one hog: %s", r)
	}
	for i := 1; i < maxInhibitors/maxInhibitorsPerPeer; i++ {
		if r := startHelper(t, "hog", b.path, 0).start(); r != "locks=4 refused="+service.LimitsExceeded {
			t.Fatalf("hog %d: %s", i, r)
		}
	}
	if r := startHelper(t, "hog", b.path, 0).start(); r != "locks=0 refused="+service.LimitsExceeded {
		t.Fatalf("the hog after %d locks: %s", maxInhibitors, r)
	}
	if _, err := (kubelet{connect(t, b)}).inhibitShutdown(); err != nil {
		t.Errorf("the executor, with %d locks held by others: %v", maxInhibitors, err)
	}
	if s := b.Status(); !strings.HasPrefix(s, "connections=") || !strings.Contains(s, " inhibitors=65 ") {
		t.Errorf("status: %.100s", s)
	}
}
