package restrict

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math/bits"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/internal/linux"
)

// xtables reads both backends' rules of this process's network namespace
// from the kernel: the legacy tables through getsockopt, the nftables ones
// through netlink. Running iptables-save would fork before the first
// child, and nothing but the reaper may wait for a child.
func (h *host) xtables() (xtables, error) {
	var x xtables
	for _, fam := range []struct {
		names  string
		domain int
		level  int
	}{
		{"proc/self/net/ip_tables_names", unix.AF_INET, unix.SOL_IP},
		{"proc/self/net/ip6_tables_names", unix.AF_INET6, unix.SOL_IPV6},
	} {
		tables, err := readLines(h.path(fam.names))
		if err != nil {
			return x, err
		}
		for _, t := range tables {
			rules, hints, err := legacyTable(fam.domain, fam.level, t)
			if err != nil {
				return x, err
			}
			x.legacyRules += rules
			x.legacyHints = x.legacyHints || hints && t == "mangle"
		}
	}
	chains, rules, err := nftDump()
	if err != nil {
		return x, err
	}
	x.nftRules = rules
	for _, c := range chains {
		if c.table == "mangle" && slices.Contains(kubeletHintChains, c.name) {
			x.nftHints = true
		}
		if !slices.Contains([]string{"INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING"}, c.name) {
			x.nftRules++ // a user chain counts, as in the legacy tables
		}
	}
	return x, nil
}

// readLines reads a /proc list; a missing one (ip_tables not loaded) is
// empty.
func readLines(p string) ([]string, error) {
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out = append(out, l)
		}
	}
	return out, err
}

// From linux/netfilter_ipv4/ip_tables.h: the get options, and the sizes
// of struct ipt_getinfo and of struct ipt_get_entries' header (its entries
// are 8-byte aligned). The ip6 ones are the same.
const (
	iptSoGetInfo    = 64
	iptSoGetEntries = 65
	iptGetinfoSize  = 84
	iptEntriesHead  = 40
	xtTableMaxName  = 32
)

// legacyTable reads one legacy table: its entries beyond the built-in
// chains' policies and the closing one (rules and user chains), and
// whether one of the kubelet's hint chains is among them.
func legacyTable(domain, level int, table string) (rules int, hints bool, err error) {
	if len(table) >= xtTableMaxName {
		return 0, false, fmt.Errorf("legacy table name %q too long", table)
	}
	fd, err := linux.Socket(domain, unix.SOCK_RAW, unix.IPPROTO_RAW)
	if err != nil {
		return 0, false, err
	}
	defer unix.Close(fd)
	info := make([]byte, iptGetinfoSize)
	copy(info, table)
	if _, err := linux.GetsockoptBytes(fd, level, iptSoGetInfo, info); err != nil {
		return 0, false, fmt.Errorf("legacy table %s: %w", table, err)
	}
	ne := binary.NativeEndian
	validHooks := ne.Uint32(info[32:])
	entries := ne.Uint32(info[76:])
	size := ne.Uint32(info[80:])
	rules = int(entries) - bits.OnesCount32(validHooks) - 1
	get := make([]byte, iptEntriesHead+int(size))
	copy(get, table)
	ne.PutUint32(get[32:], size)
	if _, err := linux.GetsockoptBytes(fd, level, iptSoGetEntries, get); err != nil {
		return rules, false, fmt.Errorf("legacy table %s: %w", table, err)
	}
	// A user chain is an entry whose ERROR target carries its name,
	// NUL-terminated.
	for _, c := range kubeletHintChains {
		hints = hints || bytes.Contains(get[iptEntriesHead:], append([]byte(c), 0))
	}
	return max(rules, 0), hints, nil
}

// nftChain is one chain of an iptables-nft table.
type nftChain struct{ table, name string }

// nftDumpTimeout bounds each read of an nftables dump.
const nftDumpTimeout = 2 * time.Second

// nftDump lists the chains of the tables iptables-nft uses (ip and ip6
// families, iptablesTables) and counts their rules, over netlink.
func nftDump() (chains []nftChain, rules int, err error) {
	fd, err := linux.Socket(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, 0, err
	}
	defer unix.Close(fd)
	if err := linux.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, 0, err
	}
	// Read before the first fork: the kernel answers a dump at once, and
	// nodeinit must not wait on it without a bound all the same.
	if err := linux.SetReceiveTimeout(fd, nftDumpTimeout); err != nil {
		return nil, 0, err
	}
	for i, msg := range []uint16{unix.NFT_MSG_GETCHAIN, unix.NFT_MSG_GETRULE} {
		err := nftDumpEach(fd, uint32(i+1), msg, func(family uint8, attrs map[uint16][]byte) {
			table := cString(attrs[unix.NFTA_CHAIN_TABLE]) // NFTA_RULE_TABLE is 1 too
			if (family != unix.AF_INET && family != unix.AF_INET6) || !slices.Contains(iptablesTables, table) {
				return
			}
			if msg == unix.NFT_MSG_GETCHAIN {
				chains = append(chains, nftChain{table, cString(attrs[unix.NFTA_CHAIN_NAME])})
			} else {
				rules++
			}
		})
		if err != nil {
			return nil, 0, err
		}
	}
	return chains, rules, nil
}

// nftDumpEach sends one nftables dump request and calls each for every
// object it returns, with its family and top-level attributes.
func nftDumpEach(fd int, seq uint32, msg uint16, each func(family uint8, attrs map[uint16][]byte)) error {
	const nfgenmsgLen = 4
	req := make([]byte, unix.NLMSG_HDRLEN+nfgenmsgLen)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.NFNL_SUBSYS_NFTABLES<<8|msg)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	ne.PutUint32(req[8:], seq)
	req[unix.NLMSG_HDRLEN] = unix.AF_UNSPEC
	req[unix.NLMSG_HDRLEN+1] = unix.NFNETLINK_V0
	if err := linux.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 1<<16)
	for {
		n, err := linux.Recvfrom(fd, buf, 0)
		if err != nil {
			return fmt.Errorf("nftables dump: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return fmt.Errorf("nftables dump: %w", err)
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return nil
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if code := int32(ne.Uint32(m.Data)); code != 0 {
						return fmt.Errorf("nftables dump: %w", unix.Errno(-code))
					}
				}
				return nil
			}
			if len(m.Data) < nfgenmsgLen {
				continue
			}
			each(m.Data[0], netlinkAttrs(m.Data[nfgenmsgLen:]))
		}
	}
}

// netlinkAttrs splits netlink attributes by type (nested ones left whole).
func netlinkAttrs(b []byte) map[uint16][]byte {
	out := map[uint16][]byte{}
	for len(b) >= 4 {
		l := int(binary.NativeEndian.Uint16(b))
		if l < 4 || l > len(b) {
			break
		}
		out[binary.NativeEndian.Uint16(b[2:])&0x3fff] = b[4:l]
		b = b[min((l+3)&^3, len(b)):]
	}
	return out
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
