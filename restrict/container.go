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

// container is what the checks read of the container below root, once:
// this process's user and network namespaces, capabilities, limits, mounts
// and cgroups, as its /proc shows them.
type container struct {
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

// readContainer reads the container below root; what cannot be read stays
// the zero value.
func readContainer(root string) *container {
	ct := &container{root: root}
	if b, err := os.ReadFile(ct.path("proc/self/uid_map")); err == nil {
		ct.uidMap = strings.Join(strings.Fields(string(b)), " ")
		ct.userNS = ct.uidMap != fullUIDMap
	}
	// The kernel refuses to name an owner outside this process's user
	// namespace (EPERM): then it is an ancestor's.
	switch dev, ino, err := linux.NamespaceOwner(ct.path("proc/self/ns/net")); {
	case errors.Is(err, unix.EPERM):
		ct.foreignNetns = true
	case err == nil:
		var own unix.Stat_t
		if unix.Stat(ct.path("proc/self/ns/user"), &own) == nil {
			ct.foreignNetns = own.Dev != dev || own.Ino != ino
		}
	}
	if st, err := procstatus.Read(ct.path("proc/self/status")); err == nil {
		ct.capSysAdmin, _ = st.Effective(unix.CAP_SYS_ADMIN)
	}
	if b, err := os.ReadFile(ct.path("proc/self/limits")); err == nil {
		for l := range strings.SplitSeq(string(b), "\n") {
			if rest, ok := strings.CutPrefix(l, "Max open files"); ok {
				if f := strings.Fields(rest); len(f) > 0 {
					ct.nofile, _ = strconv.ParseUint(f[0], 10, 64)
				}
			}
		}
	}
	ct.cgroupNS, _ = os.Readlink(ct.path("proc/self/ns/cgroup"))
	if b, err := os.ReadFile(ct.path("proc/self/cgroup")); err == nil {
		for l := range strings.SplitSeq(string(b), "\n") {
			if _, rest, ok := strings.Cut(l, ":"); ok {
				ctrls, path, _ := strings.Cut(rest, ":")
				var line cgroupLine
				if ctrls != "" {
					line.controllers = strings.Split(ctrls, ",")
				}
				line.path = path
				ct.cgroups = append(ct.cgroups, line)
			}
		}
	}
	if f, err := os.Open(ct.path("proc/self/mountinfo")); err == nil {
		ct.mounts, _ = mountinfo.GetMountsFromReader(f, nil)
		f.Close()
	}
	return ct
}

// path is p (absolute in the container) below the root.
func (ct *container) path(p string) string { return filepath.Join(ct.root, p) }

// readInt reads a number from a file such as a sysctl; ok is false when
// the file is missing or holds no number.
func (ct *container) readInt(p string) (int64, bool) {
	b, err := os.ReadFile(ct.path(p))
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
func (ct *container) writable(p string) bool {
	fi, err := os.Stat(ct.path(p))
	if err != nil || fi.Mode().Perm()&0o222 == 0 {
		return false
	}
	return unix.Access(ct.path(p), unix.W_OK) == nil
}

// cadvisorMount is the mount the kubelet's cAdvisor takes to hold p
// (absolute in the container) when it looks for a directory's file system
// (fs.mountInfoFromDir): the one whose mount point is p or its nearest
// parent, the last listed of those, links not followed. It predicts the
// kubelet; where a file really is, nodeinit asks through a descriptor
// (bindfile.MountOf).
func (ct *container) cadvisorMount(p string) *mountinfo.Info {
	var best *mountinfo.Info
	for _, m := range ct.mounts {
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
func (ct *container) nameservers(p string) (servers []string, ok bool) {
	b, err := os.ReadFile(ct.path(p))
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
func (ct *container) ownCgroupMount(m *mountinfo.Info) (own bool, why string) {
	cg, found := ct.cgroupIn(m)
	root := m.Root
	switch {
	case root == ".." || strings.HasPrefix(root, "/.."):
		return false, fmt.Sprintf("its root %s lies outside nodeinit's cgroup namespace", root)
	case !found:
		return false, fmt.Sprintf("nodeinit is in no cgroup of its hierarchy (root %s)", root)
	case strings.HasPrefix(cg, "/.."):
		return false, fmt.Sprintf("nodeinit's cgroup %s in it lies outside its cgroup namespace", cg)
	case root == "/" && (ct.cgroupNS == "" || ct.cgroupNS == initialCgroupNS):
		return false, "is the host's whole cgroup tree (root / in the host's cgroup namespace)"
	case root == "/", cg == root, strings.HasPrefix(cg, root+"/"):
		return true, ""
	}
	return false, fmt.Sprintf("its root %s does not hold nodeinit's cgroup %s", root, cg)
}

// cgroupMountRoot says what a cgroup mount of the container's own shows,
// for the log.
func (ct *container) cgroupMountRoot(m *mountinfo.Info) string {
	if m.Root == "/" {
		return "root / of the container's cgroup namespace " + ct.cgroupNS
	}
	return "root " + m.Root + ", which holds nodeinit's cgroup"
}

// cgroupIn is this process's cgroup in the hierarchy of the cgroup mount m:
// the cgroup v2 line for a cgroup2 mount, else the line of the v1
// hierarchy whose controllers are among the mount's options.
func (ct *container) cgroupIn(m *mountinfo.Info) (string, bool) {
	for _, l := range ct.cgroups {
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
