package restrict

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/config"
)

func TestChooseBackend(t *testing.T) {
	unreadable := errors.New("permission denied")
	for _, tc := range []struct {
		name string
		x    xtables
		want string // "" when it cannot tell
	}{
		{"nothing anywhere: nft, the default", xtables{}, config.IPTablesNFT},
		{"the kubelet's hints in nft win over legacy rules", xtables{nft: backendRules{hints: true}, legacy: backendRules{count: 40}}, config.IPTablesNFT},
		{"the kubelet's hints in legacy win over nft rules", xtables{legacy: backendRules{hints: true}, nft: backendRules{count: 40}}, config.IPTablesLegacy},
		{"one legacy rule, none in nft", xtables{legacy: backendRules{count: 1}}, config.IPTablesLegacy},
		{"more rules in nft", xtables{legacy: backendRules{count: 1}, nft: backendRules{count: 3}}, config.IPTablesNFT},
		{"as many in both: nft", xtables{legacy: backendRules{count: 2}, nft: backendRules{count: 2}}, config.IPTablesNFT},
		{"legacy unreadable, nft's rules answer", xtables{legacy: backendRules{err: unreadable}, nft: backendRules{count: 3}}, config.IPTablesNFT},
		{"legacy unreadable, nft's hints answer", xtables{legacy: backendRules{err: unreadable}, nft: backendRules{hints: true}}, config.IPTablesNFT},
		{"nft unreadable, legacy's rules answer", xtables{nft: backendRules{err: unreadable}, legacy: backendRules{count: 3}}, config.IPTablesLegacy},
		{"nft unreadable, legacy's hints answer", xtables{nft: backendRules{err: unreadable}, legacy: backendRules{hints: true}}, config.IPTablesLegacy},
		{"an unreadable backend's count is no answer", xtables{nft: backendRules{err: unreadable, count: 9}, legacy: backendRules{count: 1}}, config.IPTablesLegacy},
		{"legacy unreadable, nft empty: cannot tell", xtables{legacy: backendRules{err: unreadable}}, ""},
		{"nft unreadable, legacy empty: cannot tell", xtables{nft: backendRules{err: unreadable}}, ""},
		{"both unreadable: cannot tell", xtables{legacy: backendRules{err: unreadable}, nft: backendRules{err: unreadable}}, ""},
	} {
		got, why := chooseBackend(tc.x)
		if got != tc.want || why == "" {
			t.Errorf("%s: %q (%q); want %q", tc.name, got, why, tc.want)
		}
		if (tc.x.legacy.err != nil || tc.x.nft.err != nil) && !strings.Contains(why, "cannot be read (permission denied)") {
			t.Errorf("%s: %q does not say which backend cannot be read, and why", tc.name, why)
		}
	}
}

// table builds a legacy table's answers as the kernel gives them: chains
// by name (the built-in ones, by hook, first), each with its rules' target
// names ("" is the standard target).
type table struct {
	family int
	hooks  []string            // built-in chains, in hook order
	chains []string            // user chains, in order
	rules  map[string][]string // by chain: each rule's target
}

func (tb table) answers() (info, entries []byte) {
	l := entryLayouts[tb.family]
	ne := binary.NativeEndian
	entry := func(target, data string) []byte {
		e := make([]byte, l.size+xtTargetHead+len(data)+8)
		size := len(e) &^ 7
		e = e[:size]
		ne.PutUint16(e[l.targetOffset:], uint16(l.size))
		ne.PutUint16(e[l.nextOffset:], uint16(size))
		t := e[l.size:]
		ne.PutUint16(t, uint16(size-l.size))
		copy(t[xtTargetName:], target)
		copy(t[xtTargetHead:], data)
		return e
	}
	for _, c := range tb.hooks {
		for _, r := range tb.rules[c] {
			entries = append(entries, entry(r, "")...)
		}
		entries = append(entries, entry("", "policy")...)
	}
	for _, c := range tb.chains {
		entries = append(entries, entry("ERROR", c+"\x00")...)
		for _, r := range tb.rules[c] {
			entries = append(entries, entry(r, "")...)
		}
		entries = append(entries, entry("", "return")...)
	}
	entries = append(entries, entry("ERROR", "ERROR\x00")...)
	info = make([]byte, iptGetinfoSize)
	ne.PutUint32(info[iptGetinfoValidHooks:], 1<<len(tb.hooks)-1)
	return info, entries
}

func TestLegacyCount(t *testing.T) {
	for _, tc := range []struct {
		name  string
		table table
		count int
		hints bool
	}{
		{"an empty filter table", table{family: unix.AF_INET, hooks: []string{"INPUT", "FORWARD", "OUTPUT"}}, 0, false},
		{"rules in built-in chains", table{family: unix.AF_INET, hooks: []string{"INPUT", "FORWARD", "OUTPUT"},
			rules: map[string][]string{"INPUT": {"", "ACCEPT"}, "OUTPUT": {"REJECT"}}}, 3, false},
		{"an empty user chain counts once", table{family: unix.AF_INET, hooks: []string{"INPUT"}, chains: []string{"KUBE-FIREWALL"}}, 1, false},
		{"user chains with rules", table{family: unix.AF_INET6, hooks: []string{"PREROUTING", "OUTPUT"}, chains: []string{"A", "B"},
			rules: map[string][]string{"A": {"", ""}, "B": {"MARK"}, "OUTPUT": {""}}}, 6, false},
		{"the kubelet's hint chain", table{family: unix.AF_INET6, hooks: []string{"PREROUTING"}, chains: []string{"KUBE-IPTABLES-HINT"}}, 1, true},
		{"a rule jumping to no hint is no hint", table{family: unix.AF_INET, hooks: []string{"INPUT"}, chains: []string{"KUBE-KUBELET-CANARY-NOT"}}, 1, false},
	} {
		info, entries := tc.table.answers()
		count, hints, err := legacyCount(tc.table.family, info, entries)
		if err != nil || count != tc.count || hints != tc.hints {
			t.Errorf("%s: %d rules and user chains, hints %v, %v; want %d, %v", tc.name, count, hints, err, tc.count, tc.hints)
		}
	}
	info, entries := table{family: unix.AF_INET, hooks: []string{"INPUT"}}.answers()
	for name, bad := range map[string][]byte{
		"truncated":        entries[:len(entries)-8],
		"no entries":       nil,
		"a zero next":      slices.Concat(make([]byte, 200), entries),
		"the wrong family": nil,
	} {
		family := unix.AF_INET
		if name == "the wrong family" {
			family, bad = unix.AF_UNIX, entries
		}
		if _, _, err := legacyCount(family, info, bad); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, _, err := legacyCount(unix.AF_INET, info[:10], entries); err == nil {
		t.Error("a short table information: no error")
	}
}

// fakeXtables answers the probe from values: legacy tables by family and
// name, each answer in turn (the last one repeats); nft dumps by message.
type fakeXtables struct {
	names     map[int][]string
	namesErr  error
	answers   map[string][]legacyAnswer // by "family/table"
	nft       map[uint16][]nftAnswer
	legacyGot map[string]int
	nftGot    map[uint16]int
}

type legacyAnswer struct {
	table table
	err   error
}

type nftAnswer struct {
	objs        []nftObject
	interrupted bool
	err         error
}

func (f *fakeXtables) legacyTableNames(family int) ([]string, error) {
	return f.names[family], f.namesErr
}

func (f *fakeXtables) legacyTable(family int, name string) ([]byte, []byte, error) {
	key := fmt.Sprintf("%d/%s", family, name)
	if f.legacyGot == nil {
		f.legacyGot = map[string]int{}
	}
	as := f.answers[key]
	a := as[min(f.legacyGot[key], len(as)-1)]
	f.legacyGot[key]++
	if a.err != nil {
		return nil, nil, a.err
	}
	info, entries := a.table.answers()
	return info, entries, nil
}

func (f *fakeXtables) nftDump(msg uint16) ([]nftObject, bool, error) {
	if f.nftGot == nil {
		f.nftGot = map[uint16]int{}
	}
	as := f.nft[msg]
	if len(as) == 0 {
		return nil, false, nil
	}
	a := as[min(f.nftGot[msg], len(as)-1)]
	f.nftGot[msg]++
	return a.objs, a.interrupted, a.err
}

func nftChainObj(family uint8, table, name string, base bool) nftObject {
	o := nftObject{family: family, attrs: map[uint16][]byte{unix.NFTA_CHAIN_TABLE: []byte(table + "\x00"), unix.NFTA_CHAIN_NAME: []byte(name + "\x00")}}
	if base {
		o.attrs[unix.NFTA_CHAIN_HOOK] = []byte{}
	}
	return o
}

func nftRuleObj(family uint8, table string) nftObject {
	return nftObject{family: family, attrs: map[uint16][]byte{unix.NFTA_RULE_TABLE: []byte(table + "\x00")}}
}

func TestProbeXtables(t *testing.T) {
	filter := table{family: unix.AF_INET, hooks: []string{"INPUT", "FORWARD", "OUTPUT"}, chains: []string{"KUBE-FIREWALL"},
		rules: map[string][]string{"INPUT": {""}}}
	mangle := table{family: unix.AF_INET, hooks: []string{"PREROUTING", "OUTPUT"}, chains: []string{"KUBE-IPTABLES-HINT"}}
	eagain := fmt.Errorf("getsockopt: %w", unix.EAGAIN)
	nftTables := map[uint16][]nftAnswer{
		unix.NFT_MSG_GETCHAIN: {{objs: []nftObject{
			nftChainObj(unix.AF_INET, "filter", "INPUT", true), nftChainObj(unix.AF_INET, "filter", "KUBE-SERVICES", false),
			nftChainObj(unix.AF_INET6, "mangle", "KUBE-KUBELET-CANARY", false),
			nftChainObj(unix.AF_INET, "kube-proxy", "services", false), // not iptables-nft's table
			nftChainObj(unix.AF_BRIDGE, "filter", "X", false),          // nor its family
		}}},
		unix.NFT_MSG_GETRULE: {{objs: []nftObject{nftRuleObj(unix.AF_INET, "filter"), nftRuleObj(unix.AF_INET, "kube-proxy")}}},
	}
	for _, tc := range []struct {
		name        string
		src         fakeXtables
		legacy, nft backendRules
		errs        []string // words of the legacy, nft error
	}{
		{name: "both read; a user chain counts once in each",
			src: fakeXtables{names: map[int][]string{unix.AF_INET: {"filter", "mangle"}},
				answers: map[string][]legacyAnswer{"2/filter": {{table: filter}}, "2/mangle": {{table: mangle}}}, nft: nftTables},
			legacy: backendRules{count: 3, hints: true}, nft: backendRules{count: 3, hints: true}},
		{name: "EAGAIN: the table is read again",
			src: fakeXtables{names: map[int][]string{unix.AF_INET: {"filter"}},
				answers: map[string][]legacyAnswer{"2/filter": {{err: eagain}, {err: eagain}, {table: filter}}}},
			legacy: backendRules{count: 2}},
		{name: "EAGAIN every time: an error after a bounded number of tries, nft still answers",
			src: fakeXtables{names: map[int][]string{unix.AF_INET: {"filter"}},
				answers: map[string][]legacyAnswer{"2/filter": {{err: eagain}}}, nft: nftTables},
			nft:  backendRules{count: 3, hints: true},
			errs: []string{"legacy table filter: getsockopt: resource temporarily unavailable", ""}},
		{name: "legacy unreadable: nft's answer stays",
			src:  fakeXtables{namesErr: unix.EACCES, nft: nftTables},
			nft:  backendRules{count: 3, hints: true},
			errs: []string{"permission denied", ""}},
		{name: "nft unreadable: legacy's answer stays",
			src: fakeXtables{names: map[int][]string{unix.AF_INET: {"filter"}},
				answers: map[string][]legacyAnswer{"2/filter": {{table: filter}}},
				nft:     map[uint16][]nftAnswer{unix.NFT_MSG_GETCHAIN: {{err: unix.EPROTONOSUPPORT}}}},
			legacy: backendRules{count: 2},
			errs:   []string{"", "protocol not supported"}},
		{name: "an interrupted nft dump is read again",
			src: fakeXtables{nft: map[uint16][]nftAnswer{
				unix.NFT_MSG_GETCHAIN: {{interrupted: true}, {objs: []nftObject{nftChainObj(unix.AF_INET, "nat", "KUBE-SVC-1", false)}}},
				unix.NFT_MSG_GETRULE:  {{}}}},
			nft: backendRules{count: 1}},
		{name: "nft interrupted every time: an error",
			src:  fakeXtables{nft: map[uint16][]nftAnswer{unix.NFT_MSG_GETCHAIN: {{interrupted: true}}}},
			errs: []string{"", "nftables changed while each of 10 dumps was read"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := probeXtables(&tc.src)
			for i, got := range []backendRules{x.legacy, x.nft} {
				want := []backendRules{tc.legacy, tc.nft}[i]
				wantErr := ""
				if len(tc.errs) > i {
					wantErr = tc.errs[i]
				}
				if (got.err == nil) != (wantErr == "") || got.err != nil && !strings.Contains(got.err.Error(), wantErr) {
					t.Errorf("%s: error %v, want %q", []string{"legacy", "nft"}[i], got.err, wantErr)
				}
				if got.err == nil && (got.count != want.count || got.hints != want.hints) {
					t.Errorf("%s: %+v, want %+v", []string{"legacy", "nft"}[i], got, want)
				}
			}
			for key, n := range tc.src.legacyGot {
				if n > legacyAttempts {
					t.Errorf("legacy table %s read %d times, more than %d", key, n, legacyAttempts)
				}
			}
		})
	}
}

func TestParseNftReply(t *testing.T) {
	ne := binary.NativeEndian
	msg := func(typ, flags uint16, data []byte) []byte {
		b := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+len(data)+3)
		ne.PutUint32(b, uint32(unix.NLMSG_HDRLEN+len(data)))
		ne.PutUint16(b[4:], typ)
		ne.PutUint16(b[6:], flags)
		b = append(b, data...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		return b
	}
	// nfgenmsg, then NFTA_CHAIN_TABLE "nat" (an attribute of 8 bytes).
	// The attribute's header is in host order, as the kernel writes it.
	chain := []byte{unix.AF_INET, 0, 0, 0, 0, 0, 0, 0, 'n', 'a', 't', 0}
	ne.PutUint16(chain[4:], 8)
	ne.PutUint16(chain[6:], unix.NFTA_CHAIN_TABLE)
	newChain := uint16(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWCHAIN)
	errMsg := make([]byte, 4)
	code := -int32(unix.EPERM)
	ne.PutUint32(errMsg, uint32(code))
	for _, tc := range []struct {
		name              string
		buf               []byte
		objs              int
		done, interrupted bool
		err               string
	}{
		{name: "objects, more to come", buf: slices.Concat(msg(newChain, unix.NLM_F_MULTI, chain), msg(newChain, unix.NLM_F_MULTI, chain)), objs: 2},
		{name: "the last object and DONE", buf: slices.Concat(msg(newChain, unix.NLM_F_MULTI, chain), msg(unix.NLMSG_DONE, unix.NLM_F_MULTI, make([]byte, 4))), objs: 1, done: true},
		{name: "interrupted", buf: slices.Concat(msg(newChain, unix.NLM_F_MULTI|unix.NLM_F_DUMP_INTR, chain), msg(unix.NLMSG_DONE, unix.NLM_F_MULTI|unix.NLM_F_DUMP_INTR, make([]byte, 4))), objs: 1, done: true, interrupted: true},
		{name: "an error", buf: msg(unix.NLMSG_ERROR, 0, errMsg), done: true, err: "operation not permitted"},
		{name: "not netlink: a length beyond the datagram", buf: slices.Concat([]byte{100, 0, 0, 0}, make([]byte, 12)), err: "nftables dump"},
	} {
		objs, done, intr, err := parseNftReply(tc.buf)
		if len(objs) != tc.objs || done != tc.done || intr != tc.interrupted || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %d objects, done %v, interrupted %v, %v", tc.name, len(objs), done, intr, err)
		}
		for _, o := range objs {
			if o.family != unix.AF_INET || cString(o.attrs[unix.NFTA_CHAIN_TABLE]) != "nat" {
				t.Errorf("%s: object %+v", tc.name, o)
			}
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
