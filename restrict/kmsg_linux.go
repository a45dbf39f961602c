package restrict

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/config"
	"github.com/nodeinit/nodeinit/internal/bindfile"
	"github.com/nodeinit/nodeinit/internal/linux"
)

// bindStandIn binds m.source (a character device: /dev/null) over m.target
// through descriptors of exactly the files checked: never over a link
// (kind once linked /dev/kmsg to /dev/console, which a bind through the
// link would cover), and never onto a shared mount that would carry the
// stand-in to its peers (the host's /dev, bound into the container, or
// what --make-rshared left shared): such a mount is detached from its
// peers first and shared again after, which the kmsg adjustment's line
// then says.
func (p *Plan) bindStandIn(m mount) error {
	fd, err := linux.Open(m.source, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("bind %s over %s: %w", m.source, m.target, err)
	}
	src := os.NewFile(uintptr(fd), m.source)
	defer src.Close()
	var st unix.Stat_t
	if err := linux.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return fmt.Errorf("bind %s over %s: %s is not a character device", m.source, m.target, m.source)
	}
	target, err := bindfile.OpenTarget(m.target, m.create, true)
	if errors.Is(err, bindfile.ErrLink) {
		return fmt.Errorf("bind %s over %s: %w: remove the link, or give the container the host's /dev/kmsg (--device /dev/kmsg), or skip the check (--skip-container-checks=kmsg)", m.source, m.target, err)
	}
	if err != nil {
		return fmt.Errorf("bind %s over %s: %w", m.source, m.target, err)
	}
	b := bindfile.Binder{Detach: true}
	err = b.Over(src, target, false)
	if cerr := b.Close(); err == nil {
		err = cerr
	}
	// The kmsg adjustment stays one line: it says what was detached.
	for _, d := range b.Detached {
		for i, a := range p.Adjustments {
			if a.Value("check") == config.CheckKmsg {
				p.Adjustments[i] = a.With("change", fmt.Sprint(a.Value("change"), "; detached the shared mount at ", d.Mountpoint, " (", d.PeerGroup, ") from its peers first and shared it again in a peer group of its own")).
					With("reason", fmt.Sprint(a.Value("reason"), "; a mount on a shared mount propagates to its peers, which may be the host's"))
			}
		}
	}
	if err != nil {
		return fmt.Errorf("bind %s over %s: %w", m.source, m.target, err)
	}
	return nil
}
