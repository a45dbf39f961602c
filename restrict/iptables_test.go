package restrict

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/nodeinit/nodeinit/config"
)

func TestChooseBackend(t *testing.T) {
	for _, tc := range []struct {
		name string
		x    xtables
		want string
	}{
		{"nothing anywhere: nft, the default", xtables{}, config.IPTablesNFT},
		{"the kubelet's hints in nft win over legacy rules", xtables{nftHints: true, legacyRules: 40}, config.IPTablesNFT},
		{"the kubelet's hints in legacy win over nft rules", xtables{legacyHints: true, nftRules: 40}, config.IPTablesLegacy},
		{"one legacy rule, none in nft", xtables{legacyRules: 1}, config.IPTablesLegacy},
		{"more rules in nft", xtables{legacyRules: 1, nftRules: 3}, config.IPTablesNFT},
		{"as many in both: nft", xtables{legacyRules: 2, nftRules: 2}, config.IPTablesNFT},
	} {
		if got, why := chooseBackend(tc.x); got != tc.want || why == "" {
			t.Errorf("%s: %s (%q); want %s", tc.name, got, why, tc.want)
		}
	}
}

func TestNetlinkAttrs(t *testing.T) {
	attr := func(typ uint16, data string) []byte {
		b := make([]byte, 4, 4+len(data)+3)
		binary.NativeEndian.PutUint16(b, uint16(4+len(data)))
		binary.NativeEndian.PutUint16(b[2:], typ)
		b = append(b, data...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		return b
	}
	msg := slices.Concat(attr(1, "mangle\x00"), attr(3|0x8000, "KUBE-IPTABLES-HINT\x00"), attr(2, "\x00\x00\x00\x01"))
	got := netlinkAttrs(append(msg, 0xff)) // a truncated attribute at the end is left out
	if cString(got[1]) != "mangle" || cString(got[3]) != "KUBE-IPTABLES-HINT" || len(got[2]) != 4 || len(got) != 3 {
		t.Errorf("attributes %v", got)
	}
}

func TestEnvironPutsTheIPTablesFirst(t *testing.T) {
	p := Plan{pathFirst: "/run/nodeinit-iptables-1"}
	got := p.Environ([]string{"HOME=/root", "PATH=/usr/sbin:/usr/bin"})
	if want := []string{"HOME=/root", "PATH=/run/nodeinit-iptables-1:/usr/sbin:/usr/bin"}; !slices.Equal(got, want) {
		t.Errorf("Environ: %q; want %q", got, want)
	}
	if got := (Plan{}).Environ([]string{"PATH=/bin"}); !slices.Equal(got, []string{"PATH=/bin"}) {
		t.Errorf("without a backend to put first, Environ changed PATH: %q", got)
	}
}
