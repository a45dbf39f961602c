package bindfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// inNamespace runs fn in a private mount namespace of its own
// (testenv.InPrivateMountNamespace) and fails the test on its error.
func inNamespace(t *testing.T, fn func() error) {
	t.Helper()
	if err := testenv.InPrivateMountNamespace(t, fn); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestOpenTargetRefusesALinkAndWhatIsNotAFile(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "file"), "x")
	if err := os.Symlink(filepath.Join(dir, "file"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenTarget(filepath.Join(dir, "link"), false, false); !errors.Is(err, ErrLink) || !strings.Contains(err.Error(), "to "+dir+"/file") {
		t.Errorf("a link: %v; want ErrLink naming its target", err)
	}
	// A missing link target is not made through the link either.
	if err := os.Symlink(filepath.Join(dir, "made"), filepath.Join(dir, "dangling")); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenTarget(filepath.Join(dir, "dangling"), true, false); !errors.Is(err, ErrLink) {
		t.Errorf("a dangling link: %v; want ErrLink", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "made")); err == nil {
		t.Errorf("a file was made through a dangling link")
	}
	if _, err := OpenTarget(dir, false, false); err == nil {
		t.Errorf("a directory was taken as a file to mount over")
	}
	if _, err := OpenTarget("/dev/null", false, false); err == nil {
		t.Errorf("a device was taken without asking for one")
	}
	tg, err := OpenTarget("/dev/null", false, true)
	if err != nil {
		t.Errorf("a device asked for: %v", err)
	} else {
		tg.Close()
	}
	tg, err = OpenTarget(filepath.Join(dir, "new"), true, false)
	if err != nil {
		t.Fatal(err)
	}
	tg.Close()
	if st, err := os.Lstat(filepath.Join(dir, "new")); err != nil || !st.Mode().IsRegular() {
		t.Errorf("the file made to mount on: %v %v", st, err)
	}
}

// A shared mount: refused without Detach; with it the file is mounted,
// read-only, nothing reaches the peer, and Close shares the mount again.
func TestOverASharedMount(t *testing.T) {
	dir, peer := t.TempDir(), t.TempDir()
	src := filepath.Join(t.TempDir(), "src")
	write(t, src, "new\n")
	inNamespace(t, func() error {
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, ""); err != nil {
			return err
		}
		if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
			return err
		}
		if err := unix.Mount(dir, peer, "", unix.MS_BIND, ""); err != nil {
			return err
		}
		target := filepath.Join(dir, "file")
		write(t, target, "old\n")
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		defer f.Close()

		tg, err := OpenTarget(target, false, false)
		if err != nil {
			return err
		}
		var refuse Binder
		if err := refuse.Over(f, tg, true); !errors.Is(err, ErrShared) {
			t.Errorf("Over a shared mount without Detach: %v; want ErrShared", err)
		}
		if b, _ := os.ReadFile(target); string(b) != "old\n" {
			t.Errorf("refused, the target reads %q", b)
		}

		tg, err = OpenTarget(target, false, false)
		if err != nil {
			return err
		}
		b := Binder{Detach: true}
		if err := b.Over(f, tg, true); err != nil {
			t.Errorf("Over with Detach: %v", err)
		}
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if got, _ := os.ReadFile(target); string(got) != "new\n" {
			t.Errorf("the target reads %q", got)
		}
		if err := os.WriteFile(target, []byte("x"), 0o644); !errors.Is(err, unix.EROFS) {
			t.Errorf("writing the mounted file: %v; want EROFS", err)
		}
		if got, _ := os.ReadFile(filepath.Join(peer, "file")); string(got) != "old\n" {
			t.Errorf("the peer reads %q", got)
		}
		if len(b.Detached) != 1 || b.Detached[0].Mountpoint != dir || !strings.HasPrefix(b.Detached[0].PeerGroup, "shared:") {
			t.Errorf("detached %+v", b.Detached)
		}
		ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(dir))
		if err != nil || len(ms) != 1 || !strings.Contains(ms[0].Optional, "shared:") || !strings.Contains(ms[0].Optional, "master:") {
			t.Errorf("after Close the mount is %+v (%v); want shared again and a slave of its old peers", ms, err)
		}
		return nil
	})
}

// The source is on a shared mount (a host directory bound into the
// container): the new mount does not stay a peer of it, so nothing mounted
// over one later shows on the other.
func TestOverLeavesTheSourcesPeerGroup(t *testing.T) {
	srcDir, dir := t.TempDir(), t.TempDir()
	inNamespace(t, func() error {
		if err := unix.Mount("tmpfs", srcDir, "tmpfs", 0, ""); err != nil {
			return err
		}
		if err := unix.Mount("", srcDir, "", unix.MS_SHARED, ""); err != nil {
			return err
		}
		src := filepath.Join(srcDir, "src")
		write(t, src, "new\n")
		target := filepath.Join(dir, "file")
		write(t, target, "old\n")
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		defer f.Close()
		for _, readOnly := range []bool{true, false} {
			tg, err := OpenTarget(target, false, false)
			if err != nil {
				return err
			}
			var b Binder
			if err := b.Over(f, tg, readOnly); err != nil {
				return err
			}
			ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(target))
			if err != nil {
				return err
			}
			for _, m := range ms {
				if m.Optional != "" {
					t.Errorf("read-only %v: the mount over %s is %q; want private", readOnly, target, m.Optional)
				}
			}
		}
		return nil
	})
}
