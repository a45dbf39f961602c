package logfile

import (
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/internal/linux"
)

// backupTimeFormat names a rotated file after the moment of its rotation,
// in UTC to the millisecond: NAME-2006-01-02T15-04-05.000.log. These are
// the names lumberjack gave backups before this package rotated files
// itself, so backups of earlier runs are counted and expired with the new.
const backupTimeFormat = "2006-01-02T15-04-05.000"

// newFilePerm is the mode of a log file nodeinit creates (less the umask):
// the children's output may hold secrets. A file that replaces another at a
// rotation takes the permission bits of the one it replaces instead, so an
// operator's chmod outlives rotations.
const newFilePerm = 0o600

// rotatingFile is one task's log file, DIR/NAME.log, rotated by size into
// NAME-<time>.log backups. Every name it touches is a single component
// relative to the held directory, and no call follows a symbolic link:
// the file is opened with O_NOFOLLOW and must be a regular file with one
// link; a rotation renames inside the directory and never over an existing
// entry; expiry removes only regular files (unlinkat never touches what a
// link points to anyway). A rotatingFile is used by one goroutine at a time.
type rotatingFile struct {
	dir        *logDir
	name       string // the task's name
	max        int64
	maxBackups int
	maxAge     time.Duration

	fd         int    // the open log file; -1 when none is (its open failed)
	size       int64  // bytes in it
	perm       uint32 // the permission bits the next file gets
	lastBackup time.Time
	pruneErr   bool             // the last expiry failed (logged once)
	now        func() time.Time // the clock that names backups and ages them
}

// openFile opens (or creates) the task's log file, rotating it first when
// it is already at its maximum size, and expires old backups.
func openFile(dir *logDir, name string, rot Rotation) (*rotatingFile, error) {
	f := &rotatingFile{
		dir: dir, name: name, max: maxBytes(rot.MaxSizeMiB), maxBackups: rot.MaxBackups,
		maxAge: time.Duration(rot.MaxAgeDays) * 24 * time.Hour, fd: -1, perm: newFilePerm, now: time.Now,
	}
	if err := f.open(); err != nil {
		return nil, err
	}
	if f.size < f.max {
		f.prune()
		return f, nil
	}
	if err := f.rotate(); err != nil {
		f.close()
		return nil, err
	}
	return f, nil
}

// maxBytes is a size of mib MiB in bytes, at most the largest int64: the
// configuration allows up to 8 EiB, one byte more. The comparison is in
// int64: an int on arm/v7 and 386 cannot hold 1<<43 (and never reaches it).
func maxBytes(mib int) int64 {
	if int64(mib) >= 1<<43 {
		return math.MaxInt64
	}
	return int64(mib) << 20
}

// base is the name of the current file in the directory.
func (f *rotatingFile) base() string { return f.name + ".log" }

// path is the current file's path, for messages.
func (f *rotatingFile) path() string { return filepath.Join(f.dir.path, f.base()) }

// open opens the current file for appending, creating it if missing. It
// refuses a symbolic link, anything but a regular file (a FIFO is opened
// non-blocking, so that one without a reader cannot hang nodeinit), and a
// file with more than one link, which would send the output to the other
// name too, wherever that is.
func (f *rotatingFile) open() error {
	const flags = unix.O_WRONLY | unix.O_APPEND | unix.O_NOFOLLOW | unix.O_NONBLOCK
	// Exclusive creation first: after a rotation the name is free, and
	// the new file gets the mode of the one it replaces. An existing entry,
	// a link included, is then opened as it is, never followed.
	fd, err := linux.Openat(f.dir.fd, f.base(), flags|unix.O_CREAT|unix.O_EXCL, f.perm)
	if errors.Is(err, unix.EEXIST) {
		fd, err = linux.Openat(f.dir.fd, f.base(), flags, 0)
	}
	switch {
	case errors.Is(err, unix.ELOOP):
		return fmt.Errorf("log file %s is a symbolic link: nodeinit follows no link in its log dir (remove it)", f.path())
	case errors.Is(err, unix.ENXIO):
		return fmt.Errorf("log file %s is not a regular file but a FIFO or a socket (remove it)", f.path())
	case err != nil:
		return fmt.Errorf("open log file %s: %w", f.path(), err)
	}
	var st unix.Stat_t
	err = linux.Fstat(fd, &st)
	switch {
	case err != nil:
		err = fmt.Errorf("log file %s: %w", f.path(), err)
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		err = fmt.Errorf("log file %s is not a regular file (file type %#o; remove it)", f.path(), st.Mode&unix.S_IFMT)
	case st.Nlink != 1:
		err = fmt.Errorf("log file %s has %d hard links: nodeinit writes only to a file with one name (remove it)", f.path(), st.Nlink)
	default:
		err = linux.SetNonblock(fd, false)
	}
	if err != nil {
		unix.Close(fd)
		return err
	}
	f.fd, f.size = fd, st.Size
	return nil
}

// Write appends p to the file in one piece: a rotation comes before it
// when p would take the file past its maximum size. On an error nothing of
// p stays in the file (a write cut short by a full disk is truncated away),
// so the file never holds part of what it was given; the next Write tries
// again, opening the file if it has none.
func (f *rotatingFile) Write(p []byte) error {
	if f.fd < 0 {
		if err := f.open(); err != nil {
			return err
		}
	}
	if f.size > 0 && f.size+int64(len(p)) > f.max {
		if err := f.rotate(); err != nil {
			return err
		}
	}
	written := 0
	for written < len(p) {
		n, err := linux.Write(f.fd, p[written:])
		written += max(n, 0)
		if err == nil && n == 0 {
			err = io.ErrShortWrite
		}
		if err != nil {
			f.takeBack(written)
			return fmt.Errorf("write log file %s: %w", f.path(), err)
		}
	}
	f.size += int64(len(p))
	return nil
}

// hasRoom says whether the file's file system has a block available: a
// write that worked on a full one fitted in what the file's last page had
// left, and the next may not. Available blocks (f_bavail) are what counts,
// not free ones (f_bfree): ext4 keeps free blocks that no one may write,
// root included, so a full ext4 disk has free blocks and fails every write
// that needs one. The blocks a file system keeps for root are left out with
// them (statfs tells the two apart only in f_bavail): while nodeinit writes
// into those, the loss is reported over once writes have worked for
// lossReportEvery. A file system that tells nothing of its blocks has room.
func (f *rotatingFile) hasRoom() bool {
	var fs unix.Statfs_t
	if f.fd < 0 || linux.Fstatfs(f.fd, &fs) != nil || fs.Blocks == 0 {
		return true
	}
	return fs.Bavail > 0
}

// takeBack truncates away the written bytes of a write that failed. The
// size comes from the file, not from the count, in case the file was
// truncated by hand in the meantime.
func (f *rotatingFile) takeBack(written int) {
	var st unix.Stat_t
	if err := linux.Fstat(f.fd, &st); err != nil {
		return
	}
	f.size = st.Size
	if written > 0 && st.Size >= int64(written) && linux.Ftruncate(f.fd, st.Size-int64(written)) == nil {
		f.size -= int64(written)
	}
}

// rotate renames the current file to a new backup name, opens a new
// current file and expires old backups. A failed rename leaves the current
// file as it was; a failed open leaves none, and the next Write opens it. A
// failed expiry is logged, not returned: the output is written all the same.
func (f *rotatingFile) rotate() error {
	if f.fd >= 0 {
		var st unix.Stat_t
		if linux.Fstat(f.fd, &st) == nil {
			f.perm = st.Mode & 0o777
		}
	}
	if err := f.renameToBackup(); err != nil {
		return err
	}
	f.close()
	if err := f.open(); err != nil {
		return err
	}
	f.prune()
	return nil
}

// renameToBackup renames the current file to NAME-<now>.log, never over an
// existing entry: a name that is taken (a rotation in the same millisecond,
// or anything put there) moves the time on by a millisecond. Names thus stay
// distinct and in rotation order without waiting for the clock.
func (f *rotatingFile) renameToBackup() error {
	t := f.now().UTC().Truncate(time.Millisecond)
	if !t.After(f.lastBackup) {
		t = f.lastBackup.Add(time.Millisecond)
	}
	for range 1000 {
		err := f.renameNoReplace(f.base(), backupName(f.name, t))
		switch {
		case err == nil:
			f.lastBackup = t
			return nil
		case errors.Is(err, unix.EEXIST):
			t = t.Add(time.Millisecond)
		case errors.Is(err, unix.ENOENT):
			// Removed or moved away by hand: there is nothing to keep.
			return nil
		default:
			return fmt.Errorf("rotate log file %s: %w", f.path(), err)
		}
	}
	return fmt.Errorf("rotate log file %s: the next 1000 backup names are all taken", f.path())
}

// renameNoReplace renames old to new within the directory unless new
// exists. A file system without RENAME_NOREPLACE (NFS, for one) gets a
// check first; only the directory's owner or root could slip an entry in
// between, and a rename replaces a link itself, never what it points to.
func (f *rotatingFile) renameNoReplace(old, new string) error {
	err := linux.Renameat2(f.dir.fd, old, new, unix.RENAME_NOREPLACE)
	if !errors.Is(err, unix.EINVAL) {
		return err
	}
	var st unix.Stat_t
	switch err := linux.Fstatat(f.dir.fd, new, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil:
		return unix.EEXIST
	case !errors.Is(err, unix.ENOENT):
		return err
	}
	return linux.Renameat2(f.dir.fd, old, new, 0)
}

// prune removes backups beyond MaxBackups (the oldest first) and older than
// MaxAge, by the time in their names. Only regular files count as backups:
// a link or a directory under a backup's name is left alone. A failure is
// logged once, until an expiry succeeds again.
func (f *rotatingFile) prune() {
	if f.maxBackups == 0 && f.maxAge == 0 {
		return
	}
	err := f.removeExpired()
	if err != nil && !f.pruneErr {
		klog.ErrorS(err, "Cannot expire old log backups; they are kept until an expiry succeeds", "file", f.path())
	}
	f.pruneErr = err != nil
}

func (f *rotatingFile) removeExpired() error {
	names, err := linux.ReadDirNames(f.dir.fd)
	if err != nil {
		return fmt.Errorf("list log dir %s: %w", f.dir.path, err)
	}
	type backup struct {
		name string
		t    time.Time
	}
	var backups []backup
	for _, n := range names {
		t, ok := backupTime(f.name, n)
		if !ok {
			continue
		}
		var st unix.Stat_t
		if linux.Fstatat(f.dir.fd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		backups = append(backups, backup{n, t})
	}
	slices.SortFunc(backups, func(a, b backup) int { return b.t.Compare(a.t) }) // newest first
	cutoff := f.now().Add(-f.maxAge)
	var errs []error
	for i, b := range backups {
		if (f.maxBackups > 0 && i >= f.maxBackups) || (f.maxAge > 0 && b.t.Before(cutoff)) {
			if err := linux.Unlinkat(f.dir.fd, b.name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("remove expired log backup %s: %w", filepath.Join(f.dir.path, b.name), err))
			}
		}
	}
	return errors.Join(errs...)
}

// close closes the current file, if one is open.
func (f *rotatingFile) close() error {
	if f.fd < 0 {
		return nil
	}
	fd := f.fd
	f.fd = -1
	if err := unix.Close(fd); err != nil {
		return fmt.Errorf("close log file %s: %w", f.path(), err)
	}
	return nil
}

// backupName is the name of task name's backup made at t.
func backupName(name string, t time.Time) string {
	return name + "-" + t.UTC().Format(backupTimeFormat) + ".log"
}

// backupTime reports whether file is a backup of task name, and when it
// was made.
func backupTime(name, file string) (time.Time, bool) {
	ts, ok := strings.CutPrefix(file, name+"-")
	if !ok {
		return time.Time{}, false
	}
	if ts, ok = strings.CutSuffix(ts, ".log"); !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(backupTimeFormat, ts)
	return t, err == nil
}
