package restrict

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/config"
	"github.com/nodeinit/nodeinit/internal/adjustment"
	"github.com/nodeinit/nodeinit/test/testenv"
)

// standIn applies the /dev/kmsg stand-in as checkKmsg plans it for a
// missing /dev/kmsg, on an OS thread of its own in a new private mount
// namespace whose /dev is a tmpfs of the test's, with /dev/null. dev sets
// /dev up first; check looks afterwards, in the same namespace. The thread
// is thrown away.
func standIn(t *testing.T, missing bool, dev, check func() error) (adjusted []adjustment.Line, applyErr error) {
	t.Helper()
	err := testenv.InPrivateMountNamespace(t, func() error {
		if err := unix.Mount("tmpfs", "/dev", "tmpfs", 0, "mode=755"); err != nil {
			return err
		}
		if err := unix.Mknod("/dev/null", unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
			return err
		}
		if err := dev(); err != nil {
			return err
		}
		p := Plan{}
		checkKmsgMount(&p, missing)
		p.adjust(config.CheckKmsg, "bind /dev/null over /dev/kmsg", "the test's")
		_, applyErr = p.Apply()
		adjusted = p.Adjustments
		return check()
	})
	if err != nil {
		t.Fatal(err)
	}
	return adjusted, applyErr
}

// checkKmsgMount adds the mount checkKmsg plans for a /dev/kmsg that is
// missing (or, missing false, not readable).
func checkKmsgMount(p *Plan, missing bool) {
	p.mounts = append(p.mounts, kmsgStandIn(missing))
}

// /dev/kmsg is a link (kind once linked it to /dev/console): the stand-in
// goes over no link, and the link's target stays as it was.
func TestKmsgStandInRefusesALink(t *testing.T) {
	var console []byte
	_, err := standIn(t, false, func() error {
		if err := os.WriteFile("/dev/console", []byte("console\n"), 0o600); err != nil {
			return err
		}
		return os.Symlink("/dev/console", "/dev/kmsg")
	}, func() error {
		console, _ = os.ReadFile("/dev/console")
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "symbolic link to /dev/console: remove the link") || string(console) != "console\n" {
		t.Errorf("Apply over a linked /dev/kmsg: %v; /dev/console reads %q", err, console)
	}
}

// /dev is shared with a peer (the host's /dev, bound in): the stand-in is
// there for the kubelet, and nothing reaches the peer.
func TestKmsgStandInOnASharedDevReachesNoPeer(t *testing.T) {
	peer := t.TempDir()
	var seen, peerSeen string
	adjusted, err := standIn(t, true, func() error {
		if err := unix.Mount("", "/dev", "", unix.MS_SHARED, ""); err != nil {
			return err
		}
		return unix.Mount("/dev", peer, "", unix.MS_BIND, "")
	}, func() error {
		seen = statDev("/dev/kmsg")
		peerSeen = statDev(peer + "/kmsg")
		return nil
	})
	if err != nil || seen != "char 1:3" {
		t.Errorf("/dev/kmsg is %s (Apply: %v); want /dev/null, char 1:3", seen, err)
	}
	if len(adjusted) != 1 || !strings.Contains(fmt.Sprint(adjusted[0].Value("change")), "detached the shared mount at /dev (shared:") {
		t.Errorf("the adjustments %+v; want one, saying /dev was detached from its peers", adjusted)
	}
	if peerSeen == "char 1:3" {
		t.Errorf("the peer's kmsg is /dev/null: the stand-in propagated")
	}
}

func statDev(path string) string {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return err.Error()
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return "not a device"
	}
	return "char " + itoa(unix.Major(st.Rdev)) + ":" + itoa(unix.Minor(st.Rdev))
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }
