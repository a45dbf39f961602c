package restrict

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/nodeinit/nodeinit/internal/linux"
)

// Apply makes the plan's mounts in this process's mount namespace and
// raises the sysctls it was allowed to, before the first fork. A mount that
// fails is an error (the kubelet would exit without it); a sysctl that
// cannot be raised is a warning, returned for the log.
func (p Plan) Apply() (warnings []string, err error) {
	for _, m := range p.mounts {
		if m.create {
			f, err := os.OpenFile(m.target, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil && !errors.Is(err, fs.ErrExist) {
				return warnings, fmt.Errorf("create %s to bind %s over it: %w", m.target, m.source, err)
			}
			if f != nil {
				f.Close()
			}
		}
		if err := linux.Mount(m.source, m.target, "", m.flags, ""); err != nil {
			what := "bind " + m.source + " over " + m.target
			if m.source == "" {
				what = "remount " + m.target + " read-write"
			}
			return warnings, fmt.Errorf("%s: %w", what, err)
		}
	}
	for _, s := range p.sysctls {
		if err := os.WriteFile(s.name, []byte(s.value), 0); err != nil {
			warnings = append(warnings, fmt.Sprintf("Cannot raise %s to %s: %v", s.name, s.value, err))
		}
	}
	return warnings, nil
}
