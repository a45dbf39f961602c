package linux

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// ErrNotRegular is returned by ReadRegularFile for anything but a regular
// file: a FIFO, a device, a socket, a directory, or (with NoFollow) a
// symbolic link.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is returned by ReadRegularFile for a file longer than its
// limit.
var ErrTooLarge = errors.New("file too large")

// Follow says whether ReadRegularFile follows a symbolic link in the last
// component of its path.
type Follow bool

const (
	// NoFollow refuses a symbolic link: for files in a directory that
	// someone else may fill (a host bind mount), where a link could point
	// nodeinit at /dev/zero or at a file it was not meant to read.
	NoFollow Follow = false
	// FollowLink follows one: for a file an operator names, which may
	// well be a link (a ConfigMap volume's files are).
	FollowLink Follow = true
)

// ReadRegularFile reads the whole of the regular file at path, at most limit
// bytes, without ever waiting on what it finds there. The open is
// non-blocking, so a FIFO cannot hold it; what was opened must be a regular
// file by fstat(2), or the error wraps ErrNotRegular; a file longer than
// limit is refused with ErrTooLarge rather than read in part. With NoFollow
// a symbolic link as the last component is refused (ErrNotRegular).
// Directories on the way are followed as usual. Errors are *os.PathError.
func ReadRegularFile(path string, limit int64, follow Follow) ([]byte, error) {
	flags := unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY
	if follow == NoFollow {
		flags |= unix.O_NOFOLLOW
	}
	fd, err := Open(path, flags, 0)
	if err != nil {
		if follow == NoFollow && errors.Is(err, unix.ELOOP) {
			return nil, &os.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: a symbolic link", ErrNotRegular)}
		}
		return nil, err
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "read", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, &os.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: %s", ErrNotRegular, fileType(st.Mode))}
	}
	if st.Size > limit {
		return nil, &os.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: %d bytes, at most %d read", ErrTooLarge, st.Size, limit)}
	}
	// The size can change under the read: read one byte past the limit
	// to tell a file that grew from one that fits.
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, &os.PathError{Op: "read", Path: path, Err: err}
	}
	if int64(len(b)) > limit {
		return nil, &os.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: more than %d bytes", ErrTooLarge, limit)}
	}
	return b, nil
}

// fileType names a file's type from its stat mode, for an error message.
func fileType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFLNK:
		return "a symbolic link"
	}
	return fmt.Sprintf("file type %#o", mode&unix.S_IFMT)
}

// Exists says whether path names a file of any kind, a symbolic link
// followed: a link to nothing is no file.
func Exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// IsRegular says whether path names a regular file, a symbolic link
// followed: a program to run or a configuration file to read, not a
// directory, a device or a FIFO there.
func IsRegular(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}
