package logsink

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
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

func TestWriteToAClosedPipeDoesNotKill(t *testing.T) {
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
}
