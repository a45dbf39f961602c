package cluster

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// hostSysctls are the machine-wide kernel settings a node's kubelet sets
// from inside its container (kernel.panic and the rest are not
// namespaced) and podman's network turns on (forwarding): Delete puts them
// back.
var hostSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
	"net/ipv4/ip_forward", "net/ipv4/conf/all/forwarding",
	"fs/inotify/max_user_instances", "fs/inotify/max_user_watches",
}

// HostState is what of the machine a cluster changes, read before and
// after: the kernel settings, the network devices, the netfilter rules
// (iptables-nft's included), the mounts, the cgroups, the processes.
type HostState struct {
	Sysctls map[string]string `json:"sysctls"`
	Links   []string          `json:"links"`
	Rules   []string          `json:"rules"`
	Mounts  []string          `json:"mounts"`
	Cgroups []string          `json:"cgroups"`
}

// ReadHost reads the machine's state.
func ReadHost() (*HostState, error) {
	h := &HostState{Sysctls: map[string]string{}}
	for _, s := range hostSysctls {
		b, err := os.ReadFile("/proc/sys/" + s)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		h.Sysctls[s] = strings.TrimSpace(string(b))
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	for _, i := range ifs {
		h.Links = append(h.Links, i.Name)
	}
	// -s: no counters, which traffic moves; -n: no name lookups.
	out, err := run(time.Minute, "nft", "-s", "-n", "list", "ruleset")
	if err != nil {
		return nil, err
	}
	for l := range strings.SplitSeq(out, "\n") {
		if l = strings.TrimSpace(l); l != "" && l != "}" {
			h.Rules = append(h.Rules, l)
		}
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 4 {
			h.Mounts = append(h.Mounts, f[4])
		}
	}
	h.Cgroups = clusterCgroups("")
	sort.Strings(h.Links)
	sort.Strings(h.Mounts)
	return h, nil
}

// clusterCgroups are the cgroup directories of clusters (named by
// cgroupPrefix) in every v1 hierarchy and the v2 tree; name narrows them
// to one cluster's.
func clusterCgroups(name string) []string {
	var dirs []string
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	roots := []string{"/sys/fs/cgroup"}
	for _, e := range entries {
		if e.IsDir() {
			roots = append(roots, filepath.Join("/sys/fs/cgroup", e.Name()))
		}
	}
	for _, r := range roots {
		if name != "" {
			if _, err := os.Stat(filepath.Join(r, cgroupPrefix+name)); err == nil {
				dirs = append(dirs, filepath.Join(r, cgroupPrefix+name))
			}
			continue
		}
		matches, _ := filepath.Glob(filepath.Join(r, cgroupPrefix+"*"))
		dirs = append(dirs, matches...)
	}
	return dirs
}

// Leftovers compares the machine now with before (a HostState read before
// the cluster was made): the processes that run in or name the cluster,
// its mounts, cgroups, netfilter rules and network devices that were not
// there before, the kernel settings not as they were. Empty: nothing left.
// Another user of the machine may add rules or devices meanwhile: what is
// new counts only where it names the cluster's addresses or devices.
func (c *Cluster) Leftovers(before *HostState) []string {
	now, err := ReadHost()
	if err != nil {
		return []string{err.Error()}
	}
	var left []string
	for s, v := range before.Sysctls {
		if now.Sysctls[s] != v {
			left = append(left, fmt.Sprintf("kernel setting %s is %s, was %s", strings.ReplaceAll(s, "/", "."), now.Sysctls[s], v))
		}
	}
	marks := []string{c.Subnet, strings.TrimSuffix(c.Subnet, "0/24"), "10.244.", "10.96.", "KUBE-", "FLANNEL", "CNI-", "cni0", "flannel", c.Name}
	for _, r := range now.Rules {
		if !slices.Contains(before.Rules, r) && containsAny(r, marks) {
			left = append(left, "netfilter: "+r)
		}
	}
	for _, l := range now.Links {
		if !slices.Contains(before.Links, l) && !c.othersLink(l) {
			left = append(left, "network device "+l)
		}
	}
	for _, m := range now.Mounts {
		if !slices.Contains(before.Mounts, m) && (strings.HasPrefix(m, c.Dir) || strings.Contains(m, c.Name)) {
			left = append(left, "mount "+m)
		}
	}
	for _, d := range clusterCgroups(c.Name) {
		left = append(left, "cgroup "+d)
	}
	for _, p := range c.processes() {
		left = append(left, "process "+p)
	}
	sort.Strings(left)
	return left
}

// othersLink is whether a network device is another cluster's: its
// bridge, or a container's end of a pair on that bridge.
func (c *Cluster) othersLink(name string) bool {
	if strings.HasPrefix(name, "nic-") && name != c.Bridge() {
		return true
	}
	master, err := os.Readlink(filepath.Join("/sys/class/net", name, "master"))
	return err == nil && filepath.Base(master) != c.Bridge()
}

func containsAny(s string, subs []string) bool {
	for _, x := range subs {
		if x != "" && strings.Contains(s, x) {
			return true
		}
	}
	return false
}

// processes are the processes of the cluster: in one of its cgroups, or
// naming its directory or its containers on their command line (conmon
// names its container).
func (c *Cluster) processes() []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	self := fmt.Sprint(os.Getpid())
	for _, e := range entries {
		if e.Name() == self || e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || len(cmdline) == 0 {
			continue
		}
		cg, _ := os.ReadFile("/proc/" + e.Name() + "/cgroup")
		cmd := strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " ")
		if strings.Contains(string(cg), "/"+cgroupPrefix+c.Name+"/") || strings.Contains(cmd, c.Dir) {
			out = append(out, e.Name()+" "+cmd)
		}
	}
	return out
}

// runningDir is where the clusters that run on the machine are listed,
// a file each, named after the cluster and holding its directory: Create
// adds the cluster's, Delete removes it. It is on /run, which a reboot
// empties as it resets the kernel settings.
const runningDir = "/run/nodeinit-cluster"

// register lists the cluster as running on the machine.
func (c *Cluster) register() error {
	if err := os.MkdirAll(runningDir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(runningDir, c.Name), []byte(c.Dir+"\n"), 0o644)
}

// unregister takes the cluster off the list, and the list's directory
// with the last cluster.
func (c *Cluster) unregister() error {
	if err := os.Remove(filepath.Join(runningDir, c.Name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	_ = os.Remove(runningDir)
	return nil
}

// otherClusters are the other clusters on the machine, by name, with
// their directory where it is known: the listed ones whose directory
// still holds them and, on a cgroup v1 host, every cluster whose top
// cgroup is there, listed or not.
func (c *Cluster) otherClusters() map[string]string {
	others := map[string]string{}
	entries, _ := os.ReadDir(runningDir)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(runningDir, e.Name()))
		dir := strings.TrimSpace(string(b))
		if err != nil || e.Name() == c.Name || dir == c.Dir {
			continue
		}
		if _, err := os.Stat(statePath(dir)); err == nil {
			others[e.Name()] = dir
		}
	}
	for _, d := range clusterCgroups("") {
		if name := strings.TrimPrefix(filepath.Base(d), cgroupPrefix); name != c.Name {
			if _, ok := others[name]; !ok {
				others[name] = ""
			}
		}
	}
	return others
}

// machineSettings are the kernel settings the machine had before the
// first of the clusters that run now: Create takes them from another
// running cluster's record where there is one, so that the last cluster
// deleted puts back what was there before any.
func (c *Cluster) machineSettings(others map[string]string) {
	for _, dir := range others {
		if dir == "" {
			continue
		}
		b, err := os.ReadFile(statePath(dir))
		var o Cluster
		if err == nil && json.Unmarshal(b, &o) == nil && o.Host != nil && len(o.Host.Sysctls) > 0 {
			c.Host.Sysctls = o.Host.Sysctls
			return
		}
	}
}

// inotifyNeeds are the inotify limits a node needs (kind's known issues:
// one node's containers use up max_user_instances=128), as nodeinit's
// --raise-inotify-limits raises them (restrict/checks.go).
var inotifyNeeds = map[string]int{"fs/inotify/max_user_instances": 512, "fs/inotify/max_user_watches": 524288}

// raiseInotifyLimits raises the machine's inotify limits to what a node
// needs where they are lower, as the nodeinit flavor's nodes do
// themselves: a systemd node does not. Delete puts them back.
func raiseInotifyLimits() error {
	for s, need := range inotifyNeeds {
		b, err := os.ReadFile("/proc/sys/" + s)
		if err != nil {
			return err
		}
		if have, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && have >= need {
			continue
		}
		if err := os.WriteFile("/proc/sys/"+s, []byte(strconv.Itoa(need)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// putBack restores the kernel settings the nodes or podman's network
// changed, unless another cluster still runs: they are machine-wide, and
// its nodes use them.
func (c *Cluster) putBack() []error {
	var errs []error
	if c.Host == nil {
		return nil
	}
	if others := c.otherClusters(); len(others) > 0 {
		names := make([]string, 0, len(others))
		for n := range others {
			names = append(names, n)
		}
		sort.Strings(names)
		c.logf("the kernel settings are left as they are: cluster %s still runs", strings.Join(names, ", "))
		return nil
	}
	for s, v := range c.Host.Sysctls {
		p := "/proc/sys/" + s
		if v == "" {
			continue
		}
		if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) != v {
			if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errs
}

// removeCgroups removes the cluster's cgroups in every hierarchy, deepest
// first: the nodes' and their pods' which the kubelet and runc left, once
// their processes have ended.
func (c *Cluster) removeCgroups() []error {
	var errs []error
	for _, top := range clusterCgroups(c.Name) {
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := removeCgroup(dirs[i]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errs
}

// removeCgroup removes one empty cgroup; a cgroup whose last process has
// just ended may be busy for a moment.
func removeCgroup(dir string) error {
	var err error
	for range 50 {
		if err = os.Remove(dir); err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}
