package config

import (
	"fmt"
	"os"
	"syscall"
)

// ownerWarning says, in one line, why a --config file is a risk when
// nodeinit runs as root: whoever can write it decides what nodeinit runs
// as root. It is empty for a file only root can write. The file is still
// used: refusing it would stop a node over a mode that an image build or a
// volume left behind, and the operator may have reasons.
func ownerWarning(file string, fi os.FileInfo) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	switch {
	case st.Uid != 0:
		return fmt.Sprintf("the config file %s is owned by uid %d, who can change what nodeinit runs as root: make root its owner", file, st.Uid)
	case fi.Mode().Perm()&0o002 != 0:
		return fmt.Sprintf("the config file %s is writable by everyone (mode %04o), who can change what nodeinit runs as root: chmod o-w it", file, fi.Mode().Perm())
	case fi.Mode().Perm()&0o020 != 0 && st.Gid != 0:
		return fmt.Sprintf("the config file %s is writable by group %d (mode %04o), whose members can change what nodeinit runs as root: chmod g-w it", file, st.Gid, fi.Mode().Perm())
	}
	return ""
}
