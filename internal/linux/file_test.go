package linux

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestReadRegularFileReadsAFileWithinItsLimit(t *testing.T) {
	p := filepath.Join(t.TempDir(), "machine-id")
	if err := os.WriteFile(p, []byte("0123456789abcdef0123456789abcdef\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := ReadRegularFile(p, 33, NoFollow)
	if err != nil || len(b) != 33 {
		t.Fatalf("ReadRegularFile = %q, %v; want the 33 bytes", b, err)
	}
}

func TestReadRegularFileRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		path   string
		follow Follow
		want   string
	}{
		{"a FIFO, which would block a plain open", fifo, NoFollow, "a FIFO"},
		{"a FIFO behind FollowLink too", fifo, FollowLink, "a FIFO"},
		{"a symbolic link to a regular file", link, NoFollow, "a symbolic link"},
		{"a link to /dev/zero, followed", zero, FollowLink, "a character device"},
		{"a directory", dir, FollowLink, "a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, err := ReadRegularFile(tc.path, 64, tc.follow)
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err = %v; want ErrNotRegular naming %q", err, tc.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("ReadRegularFile did not return within 5 s")
			}
		})
	}
	if b, err := ReadRegularFile(link, 64, FollowLink); err != nil || string(b) != "x" {
		t.Fatalf("FollowLink through a link = %q, %v; want its target's contents", b, err)
	}
}

func TestReadRegularFileRefusesAFileOverItsLimit(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(p, make([]byte, 4097), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadRegularFile(p, 4096, NoFollow); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v; want ErrTooLarge", err)
	}
	if _, err := ReadRegularFile(filepath.Join(t.TempDir(), "missing"), 1, NoFollow); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a missing file: err = %v; want os.ErrNotExist", err)
	}
}
