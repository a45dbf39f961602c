package restrict

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/nodeinit/nodeinit/config"
	"github.com/nodeinit/nodeinit/internal/adjustment"
	"github.com/nodeinit/nodeinit/internal/linux"
)

// Apply makes the plan's mounts in this process's mount namespace, links
// the chosen iptables commands, and raises the sysctls it was allowed to,
// before the first fork. A mount that fails is an error (the kubelet would
// exit without it); iptables commands that cannot be linked, or a sysctl
// that cannot be raised, are warnings, returned for the log.
func (p *Plan) Apply() (warnings []string, err error) {
	for _, m := range p.mounts {
		if m.standIn {
			if err := p.bindStandIn(m); err != nil {
				return warnings, err
			}
			continue
		}
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
	if p.iptables != "" {
		if err := p.linkIPTables(); err != nil {
			warnings = append(warnings, fmt.Sprintf("Cannot link the iptables commands of %s: %v; the image's default iptables stays", p.iptables, err))
			p.Adjustments = slices.DeleteFunc(p.Adjustments, func(a adjustment.Line) bool { return a.Value("check") == config.CheckIPTables })
		}
	}
	for _, s := range p.sysctls {
		if err := os.WriteFile(s.name, []byte(s.value), 0); err != nil {
			warnings = append(warnings, fmt.Sprintf("Cannot raise %s to %s: %v", s.name, s.value, err))
		}
	}
	return warnings, nil
}

// linkIPTables links the chosen backend's commands into a directory of
// their own, for Environ.
func (p *Plan) linkIPTables() error {
	dir, err := os.MkdirTemp(iptablesDir, "nodeinit-iptables-")
	if err != nil {
		return err
	}
	for _, c := range iptablesCommands {
		if err := os.Symlink(p.iptables, filepath.Join(dir, c)); err != nil {
			os.RemoveAll(dir)
			return err
		}
	}
	p.pathFirst = dir
	return nil
}

// Close removes what Apply made for the children alone: the directory of
// iptables commands. Mounts stay: they go with the mount namespace.
func (p *Plan) Close() {
	if p.pathFirst != "" {
		_ = os.RemoveAll(p.pathFirst)
	}
}
