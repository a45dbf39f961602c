package linux

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// SendAll writes with MSG_NOSIGNAL: a peer that has gone away fails the
// write with EPIPE and raises no SIGPIPE, which nodeinit would otherwise
// receive as a signal. A plain write shows the test can see one.
func TestAWriteToAPeerThatWentAwayRaisesNoSIGPIPE(t *testing.T) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, unix.SIGPIPE, unix.SIGALRM)
	defer signal.Stop(sigs)
	// firstSignal raises SIGALRM after whatever the write raised, and
	// returns the first signal to arrive. The runtime hands pending
	// signals over lowest number first, and SIGPIPE (13) is below SIGALRM
	// (14), so a SIGPIPE raised by the write comes first.
	firstSignal := func() os.Signal {
		t.Helper()
		if err := unix.Kill(os.Getpid(), unix.SIGALRM); err != nil {
			t.Fatal(err)
		}
		select {
		case s := <-sigs:
			if s == unix.SIGPIPE {
				select {
				case <-sigs:
				case <-time.After(10 * time.Second):
					t.Fatal("no SIGALRM after the SIGPIPE within 10s")
				}
			}
			return s
		case <-time.After(10 * time.Second):
			t.Fatal("no signal within 10s")
			return nil
		}
	}
	brokenSocket := func() syscall.RawConn {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(fds[1])
		f := os.NewFile(uintptr(fds[0]), "socket")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		rc, err := c.(*net.UnixConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		return rc
	}

	if err := SendAll(brokenSocket(), []byte("hello"), nil); !errors.Is(err, unix.EPIPE) {
		t.Errorf("SendAll to a closed peer: %v, want EPIPE", err)
	}
	if s := firstSignal(); s != unix.SIGALRM {
		t.Errorf("SendAll raised %v", s)
	}

	brokenSocket().Control(func(fd uintptr) { unix.Write(int(fd), []byte("hello")) })
	if s := firstSignal(); s != unix.SIGPIPE {
		t.Errorf("a plain write raised %v; the test cannot see SIGPIPE", s)
	}
}

// socketPair is a connected pair of unix stream sockets of this process.
func socketPair(t *testing.T) (a, b *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]*net.UnixConn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socket")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conns[i] = c.(*net.UnixConn)
	}
	return conns[0], conns[1]
}

func control(t *testing.T, c *net.UnixConn, fn func(fd int)) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Control(func(fd uintptr) { fn(int(fd)) }); err != nil {
		t.Fatal(err)
	}
}

// The kernel names the peer of a socket: its pid, uid and a pidfd of it.
func TestPeerCredAndPeerPidfdNameThePeer(t *testing.T) {
	a, _ := socketPair(t)
	control(t, a, func(fd int) {
		cred, err := PeerCred(fd)
		if err != nil || int(cred.Pid) != os.Getpid() || int(cred.Uid) != os.Getuid() {
			t.Errorf("PeerCred = %+v, %v; want pid %d uid %d", cred, err, os.Getpid(), os.Getuid())
		}
		pidfd, err := PeerPidfd(fd)
		testenv.Require(t, !errors.Is(err, unix.ENOPROTOOPT), "a kernel with SO_PEERPIDFD (Linux 6.5)")
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(pidfd)
		// The pidfd is this process's: a signal 0 through it reaches it.
		if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil {
			t.Errorf("signal 0 through the peer's pidfd: %v", err)
		}
	})
}

// A pidfd refers to one process: once it is reaped, its pid opens none.
func TestPidfdOpenRefusesAReapedPid(t *testing.T) {
	child := exec.Command("sleep", "10")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	pidfd, err := PidfdOpen(child.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	child.Process.Kill()
	child.Wait()
	if _, err := PidfdOpen(child.Process.Pid); !errors.Is(err, unix.ESRCH) {
		t.Errorf("PidfdOpen of a reaped pid: %v, want ESRCH", err)
	}
}

// HungUp tells a pipe whose writers are gone from one that only has data.
func TestHungUpWaitsForTheLastWriter(t *testing.T) {
	var p [2]int
	if err := Pipe2(&p, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	if _, err := Write(p[1], []byte("data")); err != nil {
		t.Fatal(err)
	}
	if gone, err := HungUp(p[0]); gone || err != nil {
		t.Errorf("HungUp with a writer and data = %v, %v", gone, err)
	}
	unix.Close(p[1])
	if gone, err := HungUp(p[0]); !gone || err != nil {
		t.Errorf("HungUp with data and no writer = %v, %v", gone, err)
	}
}
