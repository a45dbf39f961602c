package restrict

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/internal/linux"
	"github.com/nodeinit/nodeinit/internal/procstatus"
)

// host is what the checks share of the container below root.
type host struct {
	root string
	// userNS: this process's uid_map is not the whole range, so it runs
	// in a user namespace (uidMap as read, for the log).
	userNS bool
	uidMap string
	// capSysAdmin: CAP_SYS_ADMIN is in this process's effective set.
	capSysAdmin bool
	// foreignNetns: the network namespace belongs to a user namespace
	// other than this process's (rootless, on the host's network), where
	// no capability of the container's root reaches.
	foreignNetns bool
	// nofile is RLIMIT_NOFILE's soft limit, 0 when unknown.
	nofile uint64
	mounts []*mountinfo.Info
	// cgroupNS names this process's cgroup namespace ("cgroup:[INODE]"),
	// empty where the kernel has none; cgroups are its cgroups, by
	// hierarchy (/proc/self/cgroup).
	cgroupNS string
	cgroups  []cgroupLine
}

// cgroupLine is one line of /proc/self/cgroup: a hierarchy's controllers
// (empty for cgroup v2; name=NAME for a named v1 hierarchy) and the
// process's cgroup in it, relative to its cgroup namespace's root.
type cgroupLine struct {
	controllers []string
	path        string
}

// fullUIDMap is the initial user namespace's uid_map: every uid to itself.
const fullUIDMap = "0 0 4294967295"

func readHost(root string) *host {
	h := &host{root: root}
	if b, err := os.ReadFile(h.path("proc/self/uid_map")); err == nil {
		h.uidMap = strings.Join(strings.Fields(string(b)), " ")
		h.userNS = h.uidMap != fullUIDMap
	}
	// The kernel refuses to name an owner outside this process's user
	// namespace (EPERM): then it is an ancestor's.
	switch dev, ino, err := linux.NamespaceOwner(h.path("proc/self/ns/net")); {
	case errors.Is(err, unix.EPERM):
		h.foreignNetns = true
	case err == nil:
		var own unix.Stat_t
		if unix.Stat(h.path("proc/self/ns/user"), &own) == nil {
			h.foreignNetns = own.Dev != dev || own.Ino != ino
		}
	}
	if st, err := procstatus.Read(h.path("proc/self/status")); err == nil {
		h.capSysAdmin, _ = st.Effective(unix.CAP_SYS_ADMIN)
	}
	if b, err := os.ReadFile(h.path("proc/self/limits")); err == nil {
		for l := range strings.SplitSeq(string(b), "\n") {
			if rest, ok := strings.CutPrefix(l, "Max open files"); ok {
				if f := strings.Fields(rest); len(f) > 0 {
					h.nofile, _ = strconv.ParseUint(f[0], 10, 64)
				}
			}
		}
	}
	h.cgroupNS, _ = os.Readlink(h.path("proc/self/ns/cgroup"))
	if b, err := os.ReadFile(h.path("proc/self/cgroup")); err == nil {
		for l := range strings.SplitSeq(string(b), "\n") {
			if _, rest, ok := strings.Cut(l, ":"); ok {
				ctrls, path, _ := strings.Cut(rest, ":")
				var line cgroupLine
				if ctrls != "" {
					line.controllers = strings.Split(ctrls, ",")
				}
				line.path = path
				h.cgroups = append(h.cgroups, line)
			}
		}
	}
	if f, err := os.Open(h.path("proc/self/mountinfo")); err == nil {
		h.mounts, _ = mountinfo.GetMountsFromReader(f, nil)
		f.Close()
	}
	return h
}

// path is p (absolute in the container) below the root.
func (h *host) path(p string) string { return filepath.Join(h.root, p) }

// readInt reads a number from a file such as a sysctl; ok is false when
// the file is missing or holds no number.
func (h *host) readInt(p string) (int64, bool) {
	b, err := os.ReadFile(h.path(p))
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// writable says whether this process may write the file at p: not when
// it is missing, when no one may write it (a sysctl outside the namespace
// that owns it shows as 0444, also to root), or when access(2) says no (a
// read-only mount, a sysctl of a namespace another user namespace owns).
func (h *host) writable(p string) bool {
	fi, err := os.Stat(h.path(p))
	if err != nil || fi.Mode().Perm()&0o222 == 0 {
		return false
	}
	return unix.Access(h.path(p), unix.W_OK) == nil
}

// mountOf is the mount that holds p (absolute in the container): the last
// mount whose mount point is p or one of its parents.
func (h *host) mountOf(p string) *mountinfo.Info {
	var best *mountinfo.Info
	for _, m := range h.mounts {
		mp := m.Mountpoint
		if p == mp || mp == "/" || strings.HasPrefix(p, strings.TrimSuffix(mp, "/")+"/") {
			if best == nil || len(mp) >= len(best.Mountpoint) {
				best = m
			}
		}
	}
	return best
}

// nameservers lists the nameserver lines of a resolv.conf; ok is false
// when the file cannot be read.
func (h *host) nameservers(p string) (servers []string, ok bool) {
	b, err := os.ReadFile(h.path(p))
	if err != nil {
		return nil, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "nameserver" {
			servers = append(servers, f[1])
		}
	}
	return servers, true
}

// hasOption says whether a comma-separated mount option list holds opt.
func hasOption(list, opt string) bool {
	return slices.Contains(strings.Split(list, ","), opt)
}

// initialCgroupNS is the host's own cgroup namespace as /proc/PID/ns/cgroup
// names it: the kernel numbers its initial namespaces with fixed inodes
// (PROC_CGROUP_INIT_INO).
const initialCgroupNS = "cgroup:[4026531835]"

// ownCgroupMount says whether the cgroup mount m shows the container's own
// cgroups, so that making it writable gives the container no cgroup of
// the host's: its root (as this process's cgroup namespace shows it) is a
// cgroup namespace root of the process's own, not the host's initial one
// (a container with --cgroupns=private), or holds the process's cgroup in
// that hierarchy (a runtime's bind of the container's cgroup, docker's on
// cgroup v1). why says what it is when it is not.
func (h *host) ownCgroupMount(m *mountinfo.Info) (own bool, why string) {
	cg, found := h.cgroupIn(m)
	root := m.Root
	switch {
	case root == ".." || strings.HasPrefix(root, "/.."):
		return false, fmt.Sprintf("its root %s lies outside nodeinit's cgroup namespace", root)
	case !found:
		return false, fmt.Sprintf("nodeinit is in no cgroup of its hierarchy (root %s)", root)
	case strings.HasPrefix(cg, "/.."):
		return false, fmt.Sprintf("nodeinit's cgroup %s in it lies outside its cgroup namespace", cg)
	case root == "/" && (h.cgroupNS == "" || h.cgroupNS == initialCgroupNS):
		return false, "is the host's whole cgroup tree (root / in the host's cgroup namespace)"
	case root == "/", cg == root, strings.HasPrefix(cg, root+"/"):
		return true, ""
	}
	return false, fmt.Sprintf("its root %s does not hold nodeinit's cgroup %s", root, cg)
}

// cgroupMountRoot says what a cgroup mount of the container's own shows,
// for the log.
func (h *host) cgroupMountRoot(m *mountinfo.Info) string {
	if m.Root == "/" {
		return "root / of the container's cgroup namespace " + h.cgroupNS
	}
	return "root " + m.Root + ", which holds nodeinit's cgroup"
}

// cgroupIn is this process's cgroup in the hierarchy of the cgroup mount m:
// the cgroup v2 line for a cgroup2 mount, else the line of the v1
// hierarchy whose controllers are among the mount's options.
func (h *host) cgroupIn(m *mountinfo.Info) (string, bool) {
	for _, l := range h.cgroups {
		if m.FSType == "cgroup2" {
			if len(l.controllers) == 0 {
				return l.path, true
			}
			continue
		}
		for _, c := range l.controllers {
			if hasOption(m.VFSOptions, c) {
				return l.path, true
			}
		}
	}
	return "", false
}
