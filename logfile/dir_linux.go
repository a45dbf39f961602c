package logfile

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/internal/linux"
)

// errUnsafeDir starts the error for a log dir that nodeinit refuses to
// write in: one that someone other than its owner can write to, or that an
// ordinary user owns.
var errUnsafeDir = errors.New("unsafe log dir")

// logDir is the log directory, held open: every file in it is opened,
// renamed and removed relative to this descriptor, so that once the
// directory has passed its checks no rename or symbolic link along its path
// can send a later write anywhere else.
type logDir struct {
	path string // as the operator gave it, for messages
	fd   int
}

// openDir creates path (0755) if it is missing, opens it and checks it as
// sshd's StrictModes checks a user's files:
//
//   - it must be owned by root or by nodeinit's own user, since its owner can
//     plant anything in it;
//   - no one but its owner may write to it: neither its group nor others,
//     sticky bit or not. The sticky bit stops others from removing or renaming
//     nodeinit's files, but not from creating entries under the names nodeinit
//     is about to use (the file a rotation creates, the next backup), nor from
//     filling the directory; and the checks would then depend on the kernel's
//     protected_symlinks and protected_hardlinks settings, which a container
//     cannot see or rely on.
//
// The permission bits are what is checked: with POSIX ACLs the group bits
// are the ACL mask, so a named user or group granted write shows there too.
// The path itself is the operator's: it is resolved once, here, symbolic
// links included, and the checks apply to the directory it leads to.
func openDir(path string) (*logDir, error) {
	if err := os.MkdirAll(path, 0o755); err != nil {
		return nil, fmt.Errorf("create log dir %s: %w", path, err)
	}
	fd, err := linux.Open(path, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, fmt.Errorf("open log dir: %w", err)
	}
	var st unix.Stat_t
	if err := linux.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("log dir %s: %w", path, err)
	}
	if err := checkDir(path, &st, os.Geteuid()); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &logDir{path: path, fd: fd}, nil
}

// checkDir applies openDir's rules to the directory described by st, for a
// nodeinit running as euid. Each refusal says which rule it breaks and how to
// fix it, on one line.
func checkDir(path string, st *unix.Stat_t, euid int) error {
	mode := st.Mode & 0o7777
	switch {
	case st.Uid != 0 && int(st.Uid) != euid:
		return fmt.Errorf("%w %s: owned by uid %d, but it must be owned by root or by nodeinit's own uid %d (chown it, or choose another --log-dir)",
			errUnsafeDir, path, st.Uid, euid)
	case mode&0o002 != 0:
		return fmt.Errorf("%w %s: mode %04o lets every user write to it (sticky bit or not), but only its owner may (chmod go-w it)",
			errUnsafeDir, path, mode)
	case mode&0o020 != 0:
		return fmt.Errorf("%w %s: mode %04o lets its group (gid %d) write to it, but only its owner may (chmod g-w it)",
			errUnsafeDir, path, mode, st.Gid)
	}
	return nil
}

// close releases the directory.
func (d *logDir) close() {
	unix.Close(d.fd)
}
