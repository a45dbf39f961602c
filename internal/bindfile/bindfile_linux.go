// Package bindfile bind-mounts one file over another through descriptors
// of exactly the files it checked, for the files nodeinit mounts over
// before its first fork: /etc/machine-id, DMI's product_uuid, /dev/kmsg.
//
// A path is no promise about where a mount lands: mount(2) follows a
// symbolic link at the target, or a linked directory on the way, and a
// check of the mount that holds the literal path can be of another mount
// than the one the file lands on. So the target is opened first (O_PATH,
// not following a link in its last component), the mount it is on is found
// from that descriptor (mnt_id in /proc/self/fdinfo), that mount is checked,
// and the bind mount is made through /proc/self/fd/N of that descriptor and
// of the source's: onto exactly what was checked, from exactly what was
// read.
//
// A mount on a shared mount propagates to every peer of it, which may be
// in the host's mount namespace (a systemd host's / is shared, and a
// runtime may leave a container's root a peer of a host mount). A Binder
// refuses a shared mount, or, with Detach, makes it a slave of its peer
// group first (it still receives the peers' mounts, and sends none), and
// on Close shares it again in a peer group of its own: what is mounted
// there afterwards reaches the namespaces later copied from this one, as
// before, but never the peers it had.
package bindfile

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/internal/linux"
)

// ErrLink is returned for a target that is a symbolic link: nodeinit
// mounts over no link, whose target it did not check.
var ErrLink = errors.New("a symbolic link")

// ErrShared is returned for a target on a shared mount when the Binder may
// not detach it.
var ErrShared = errors.New("on a shared mount")

// Detached is a shared mount a Binder made a slave of its peer group.
type Detached struct {
	// Mountpoint is where the mount is, PeerGroup its "shared:N" at
	// the start.
	Mountpoint, PeerGroup string
	fd                    int
}

// Binder makes bind mounts over files.
type Binder struct {
	// Detach lets Over make a shared mount under a target a slave of its
	// peers before it mounts there; without it Over refuses the target.
	Detach bool
	// Detached lists the mounts Over detached, in order.
	Detached []Detached
}

// Target is a file to be mounted over, held open from the check to the
// mount.
type Target struct {
	path string
	fd   int
}

// OpenTarget opens path to mount over: a regular file or, with device, a
// character device; never a symbolic link (ErrLink). With create, a missing
// file is made, empty and mode 0444, in its directory (never through a
// link: O_EXCL|O_NOFOLLOW), to mount on.
func OpenTarget(path string, create, device bool) (*Target, error) {
	fd, err := linux.Open(path, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) && create {
		dir, derr := linux.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY, 0)
		if derr != nil {
			return nil, derr
		}
		f, ferr := linux.Openat(dir, filepath.Base(path), unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0o444)
		unix.Close(dir)
		if ferr != nil {
			return nil, fmt.Errorf("make a file to mount on: %w", ferr)
		}
		unix.Close(f)
		fd, err = linux.Open(path, unix.O_PATH|unix.O_NOFOLLOW, 0)
	}
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := linux.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	switch mode := st.Mode & unix.S_IFMT; {
	case mode == unix.S_IFREG, mode == unix.S_IFCHR && device:
		return &Target{path: path, fd: fd}, nil
	case mode == unix.S_IFLNK:
		unix.Close(fd)
		to, _ := os.Readlink(path)
		return nil, &os.PathError{Op: "mount over", Path: path, Err: fmt.Errorf("%w to %s", ErrLink, to)}
	default:
		unix.Close(fd)
		return nil, &os.PathError{Op: "mount over", Path: path, Err: fmt.Errorf("not a regular file (mode %#o)", mode)}
	}
}

// Close closes the target's descriptor.
func (t *Target) Close() error { return unix.Close(t.fd) }

// Over bind-mounts source (an open file, already checked by the caller)
// over target, read-only when readOnly says so, and closes target. A
// shared mount under target is detached from its peers first, when the
// Binder may, else refused (ErrShared).
func (b *Binder) Over(source *os.File, t *Target, readOnly bool) error {
	defer t.Close()
	under, err := mountOf(t.fd)
	if err != nil {
		return err
	}
	if group := peerGroup(under); group != "" {
		if !b.Detach {
			return &os.PathError{Op: "mount over", Path: t.path, Err: fmt.Errorf("%w (%s at %s): a mount there would propagate to its peers, which may be the host's", ErrShared, group, under.Mountpoint)}
		}
		if err := b.detach(under); err != nil {
			return err
		}
	}
	if err := linux.Mount(fdPath(int(source.Fd())), fdPath(t.fd), "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s over %s: %w", source.Name(), t.path, err)
	}
	// The new mount joined the source's peer group, if that is shared (a
	// host directory bound in): it is made private, so that nothing
	// mounted over either later shows on the other. That, and a remount,
	// needs the new mount's root, and the target's descriptor is of the
	// file under it: the path now leads to the new mount, and what it
	// leads to must be the source on a mount whose parent is the one
	// checked.
	top, err := linux.Open(t.path, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer unix.Close(top)
	m, err := mountOf(top)
	if err != nil {
		return err
	}
	var src, got unix.Stat_t
	if err := linux.Fstat(int(source.Fd()), &src); err != nil {
		return err
	}
	if err := linux.Fstat(top, &got); err != nil {
		return err
	}
	if m.Parent != under.ID || src.Dev != got.Dev || src.Ino != got.Ino {
		return fmt.Errorf("%s is not the file just mounted over it: leaving it as it is", t.path)
	}
	if err := linux.Mount("", fdPath(top), "", unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the mount over %s private: %w", t.path, err)
	}
	if readOnly {
		if err := linux.Mount("", fdPath(top), "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("make %s read-only: %w", t.path, err)
		}
	}
	return nil
}

// detach makes the shared mount m a slave of its peers, through a
// descriptor of its root that is on m itself.
func (b *Binder) detach(m *mountinfo.Info) error {
	fd, err := linux.Open(m.Mountpoint, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	if at, err := mountOf(fd); err != nil || at.ID != m.ID {
		unix.Close(fd)
		return fmt.Errorf("cannot reach the shared mount at %s to detach it from its peers (another mount covers it)", m.Mountpoint)
	}
	if err := linux.Mount("", fdPath(fd), "", unix.MS_SLAVE, ""); err != nil {
		unix.Close(fd)
		return fmt.Errorf("detach the shared mount at %s from its peers: %w", m.Mountpoint, err)
	}
	b.Detached = append(b.Detached, Detached{Mountpoint: m.Mountpoint, PeerGroup: peerGroup(m), fd: fd})
	return nil
}

// Close shares each detached mount again, in a peer group of its own.
func (b *Binder) Close() error {
	var errs []error
	for _, d := range b.Detached {
		if d.fd < 0 {
			continue
		}
		if err := linux.Mount("", fdPath(d.fd), "", unix.MS_SHARED, ""); err != nil {
			errs = append(errs, fmt.Errorf("share the mount at %s again: %w", d.Mountpoint, err))
		}
		unix.Close(d.fd)
	}
	for i := range b.Detached {
		b.Detached[i].fd = -1
	}
	return errors.Join(errs...)
}

// Shared says whether m is shared, and in which peer group ("shared:N").
func Shared(m *mountinfo.Info) (group string, ok bool) {
	g := peerGroup(m)
	return g, g != ""
}

func peerGroup(m *mountinfo.Info) string {
	for _, o := range strings.Fields(m.Optional) {
		if strings.HasPrefix(o, "shared:") {
			return o
		}
	}
	return ""
}

// MountOf is the mount that holds path, not following a link in its last
// component, as OpenTarget opens it: for a preview of what Over will find.
func MountOf(path string) (*mountinfo.Info, error) {
	fd, err := linux.Open(path, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return mountOf(fd)
}

// mountOf is the mount the descriptor fd is on: its mnt_id, looked up in
// /proc/self/mountinfo.
func mountOf(fd int) (*mountinfo.Info, error) {
	info, err := linux.ReadRegularFile("/proc/self/fdinfo/"+strconv.Itoa(fd), 64<<10, linux.FollowLink)
	if err != nil {
		return nil, err
	}
	id := -1
	for _, line := range bytes.Split(info, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("mnt_id:")); ok {
			id, err = strconv.Atoi(string(bytes.TrimSpace(v)))
			if err != nil {
				return nil, fmt.Errorf("the mnt_id of descriptor %d: %w", fd, err)
			}
		}
	}
	if id < 0 {
		return nil, fmt.Errorf("no mnt_id for descriptor %d in /proc/self/fdinfo", fd)
	}
	ms, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) { return m.ID != id, m.ID == id })
	if err != nil {
		return nil, fmt.Errorf("read the mounts: %w", err)
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("mount %d is not in /proc/self/mountinfo", id)
	}
	return ms[0], nil
}

func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }
