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

// Exists and IsRegular follow a link; a link to nothing is no file, a
// FIFO or a directory exists but is not regular.
func TestExistsAndIsRegularFollowLinks(t *testing.T) {
	dir := t.TempDir()
	file, fifo := filepath.Join(dir, "file"), filepath.Join(dir, "fifo")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, to := range map[string]string{"link": "file", "dangling": "nothing", "linkToDir": "."} {
		if err := os.Symlink(to, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		path            string
		exists, regular bool
	}{
		{"file", true, true},
		{"link", true, true},
		{"dangling", false, false},
		{"missing", false, false},
		{"fifo", true, false},
		{"linkToDir", true, false},
		{".", true, false},
	} {
		p := filepath.Join(dir, tc.path)
		if got := Exists(p); got != tc.exists {
			t.Errorf("Exists(%s) = %t; want %t", tc.path, got, tc.exists)
		}
		if got := IsRegular(p); got != tc.regular {
			t.Errorf("IsRegular(%s) = %t; want %t", tc.path, got, tc.regular)
		}
	}
	// The files the kubelet's machine reading looks for: sysfs's are
	// regular files.
	if !IsRegular("/sys/devices/system/cpu/cpu0/topology/core_id") || !Exists("/proc/self/status") {
		t.Error("cpu0's topology/core_id is no regular file, or /proc/self/status is missing")
	}
}
