package restrict

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/internal/linux"
)

// kernelXtables reads the iptables rules of the calling thread's network
// namespace from the kernel: the legacy tables through getsockopt, the
// nftables ones through netlink (the tables in use of each legacy family
// from the /proc below the host's root). Running iptables-save would fork
// before the first child, and nothing but the reaper may wait for a child.
type kernelXtables struct{ ct *container }

// legacyTableNames reads a /proc list of the thread's own network
// namespace; a missing one (ip_tables not loaded) is empty.
func (k kernelXtables) legacyTableNames(family int) ([]string, error) {
	name := "proc/thread-self/net/ip_tables_names"
	if family == unix.AF_INET6 {
		name = "proc/thread-self/net/ip6_tables_names"
	}
	b, err := os.ReadFile(k.ct.path(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out = append(out, l)
		}
	}
	return out, nil
}

// From linux/netfilter_ipv4/ip_tables.h: the get options (the ip6 ones are
// the same) and where struct ipt_getinfo holds the entries' size.
const (
	iptSoGetInfo     = 64
	iptSoGetEntries  = 65
	iptGetinfoSizeAt = 80
)

func (k kernelXtables) legacyTable(family int, table string) (info, entries []byte, err error) {
	if len(table) >= xtTableMaxName {
		return nil, nil, fmt.Errorf("name too long")
	}
	level := unix.SOL_IP
	if family == unix.AF_INET6 {
		level = unix.SOL_IPV6
	}
	fd, err := linux.Socket(family, unix.SOCK_RAW, unix.IPPROTO_RAW)
	if err != nil {
		return nil, nil, err
	}
	defer unix.Close(fd)
	info = make([]byte, iptGetinfoSize)
	copy(info, table)
	if _, err := linux.GetsockoptBytes(fd, level, iptSoGetInfo, info); err != nil {
		return nil, nil, err
	}
	size := binary.NativeEndian.Uint32(info[iptGetinfoSizeAt:])
	get := make([]byte, iptEntriesHead+int(size))
	copy(get, table)
	binary.NativeEndian.PutUint32(get[xtTableMaxName:], size)
	// EAGAIN: the table's size changed since IPT_SO_GET_INFO.
	if _, err := linux.GetsockoptBytes(fd, level, iptSoGetEntries, get); err != nil {
		return nil, nil, err
	}
	return info, get[iptEntriesHead:], nil
}

// nftDumpTimeout bounds each read of an nftables dump.
const nftDumpTimeout = 2 * time.Second

func (k kernelXtables) nftDump(msg uint16) (objs []nftObject, interrupted bool, err error) {
	fd, err := linux.Socket(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, false, err
	}
	defer unix.Close(fd)
	if err := linux.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, false, err
	}
	// Read before the first fork: the kernel answers a dump at once, and
	// nodeinit must not wait on it without a bound all the same.
	if err := linux.SetReceiveTimeout(fd, nftDumpTimeout); err != nil {
		return nil, false, err
	}
	const nfgenmsgLen = 4
	req := make([]byte, unix.NLMSG_HDRLEN+nfgenmsgLen)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.NFNL_SUBSYS_NFTABLES<<8|msg)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	ne.PutUint32(req[8:], 1)
	req[unix.NLMSG_HDRLEN] = unix.AF_UNSPEC
	req[unix.NLMSG_HDRLEN+1] = unix.NFNETLINK_V0
	if err := linux.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, false, err
	}
	buf := make([]byte, 1<<16)
	for {
		n, err := linux.Recvfrom(fd, buf, 0)
		if err != nil {
			return nil, false, fmt.Errorf("nftables dump: %w", err)
		}
		more, done, intr, err := parseNftReply(buf[:n])
		if err != nil {
			return nil, false, err
		}
		objs, interrupted = append(objs, more...), interrupted || intr
		if done {
			return objs, interrupted, nil
		}
	}
}
