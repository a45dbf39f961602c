package logsink

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestEveryLineArrivesInOrder(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	s := New(w, DefaultLimit)
	const n = 10000
	go func() {
		for i := 0; i < n; i++ {
			fmt.Fprintf(s, "line %d\n", i)
		}
		s.Flush(10 * time.Second)
		w.Close()
	}()
	sc := bufio.NewScanner(r)
	i := 0
	for sc.Scan() {
		if want := fmt.Sprintf("line %d", i); sc.Text() != want {
			t.Fatalf("got %q, want %q", sc.Text(), want)
		}
		i++
	}
	if i != n {
		t.Fatalf("got %d lines, want %d", i, n)
	}
}

// A pipe that nobody reads fills up; Write must still return at once, and
// Flush must give up after its timeout.
func TestWriteNeverBlocksOnAnUnreadPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s := New(w, 256<<10) // more than the pipe holds
	line := strings.Repeat("x", 1000) + "\n"
	start := time.Now()
	for i := 0; i < 2000; i++ { // 2 MB: far more than the pipe and the queue hold
		s.Write([]byte(line))
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("2000 writes took %v against an unread pipe", d)
	}
	if s.Flush(100 * time.Millisecond) {
		t.Fatal("Flush reported success while the pipe is full")
	}
	// Once the reader drains, the drop count is reported.
	go func() {
		buf := make([]byte, 1<<16)
		for {
			if _, err := r.Read(buf); err != nil {
				return
			}
		}
	}()
	if !s.Flush(5 * time.Second) {
		t.Fatal("Flush did not finish once the pipe was read")
	}
}

// A stdout inherited in non-blocking mode fills up and says EAGAIN; the
// writer waits for it to drain instead of losing what it holds.
func TestNonBlockingOutputLosesNothing(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	// NewFile, as the runtime makes os.Stdout: the descriptor stays
	// non-blocking, where os.Pipe's Fd would switch it to blocking.
	r, w := os.NewFile(uintptr(p[0]), "r"), os.NewFile(uintptr(p[1]), "w")
	defer r.Close()
	s := New(w, DefaultLimit)
	const n = 20000 // about 200 kB, several times what the pipe holds
	for i := 0; i < n; i++ {
		fmt.Fprintf(s, "line %d\n", i)
	}
	if flags, err := unix.FcntlInt(uintptr(p[1]), unix.F_GETFL, 0); err != nil || flags&unix.O_NONBLOCK == 0 {
		t.Fatalf("the output is no longer non-blocking (flags %#x, %v)", flags, err)
	}
	done := make(chan bool, 1)
	go func() {
		done <- s.Flush(10 * time.Second)
		w.Close()
	}()
	// Read with a blocking loop on the non-blocking end.
	var got strings.Builder
	buf := make([]byte, 64<<10)
	for {
		k, err := unix.Read(p[0], buf)
		if errors.Is(err, unix.EAGAIN) {
			pfd := []unix.PollFd{{Fd: int32(p[0]), Events: unix.POLLIN}}
			unix.Poll(pfd, 1000)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			break
		}
		got.Write(buf[:k])
	}
	if !<-done {
		t.Fatal("Flush timed out")
	}
	lines := strings.Split(strings.TrimSuffix(got.String(), "\n"), "\n")
	if len(lines) != n {
		t.Fatalf("got %d lines, want %d", len(lines), n)
	}
	for i, l := range lines {
		if want := fmt.Sprintf("line %d", i); l != want {
			t.Fatalf("line %d is %q, want %q", i, l, want)
		}
	}
}

// A write of the sink's to a pipe nobody reads fails with EPIPE and raises
// no SIGPIPE in the process: nodeinit passes on every SIGPIPE it receives,
// and the executor did nothing to earn one. The SIGALRM sent after the
// write shows that no SIGPIPE came first: os/signal hands over pending
// signals lowest number first, and SIGPIPE (13) is below SIGALRM (14).
func TestWriteToAClosedPipeRaisesNoSIGPIPE(t *testing.T) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, unix.SIGPIPE, unix.SIGALRM)
	defer signal.Stop(sigs)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	s := New(w, DefaultLimit)
	s.Write([]byte("nobody reads this\n"))
	if !s.Flush(5 * time.Second) {
		t.Fatal("Flush did not return after EPIPE")
	}
	if err := unix.Kill(os.Getpid(), unix.SIGALRM); err != nil {
		t.Fatal(err)
	}
	select {
	case sig := <-sigs:
		if sig != unix.SIGALRM {
			t.Errorf("the process received %v from the sink's write", sig)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no SIGALRM within 5s")
	}
}
