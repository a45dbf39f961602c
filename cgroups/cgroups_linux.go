// Package cgroups owns nodeinit's place in the cgroup hierarchies: finding
// the container's cgroup (a Mesos containerizer's /<root>/<id>, the one
// --cgroup-parent names, or, for a Docker containerizer task, the engine's
// cgroup it was started in), moving nodeinit into it on every mounted v1
// hierarchy where it exists and on the v2 unified one (in a leaf child where
// v2 requires it), emptying the root of a private v2 cgroup namespace so that
// a kubelet can create pod cgroups there, and deciding whether the kubelet
// can take the container's cgroup as its cgroup root. It runs before the
// first child starts, so the executor and the proxy inherit the result. Its
// settings come defaulted and validated from config. Parsing
// /proc/self/cgroup and writing cgroup.procs go through
// github.com/opencontainers/cgroups, /proc/self/mountinfo through
// github.com/moby/sys/mountinfo.
//
// Every cgroup path nodeinit reads is relative to its cgroup namespace, and
// it acts only through mounts that show that namespace's own tree. A
// container with a private cgroup namespace (podman's and Docker's default
// on cgroup v2) and the host's /sys/fs/cgroup bind-mounted in has a mount
// whose root the kernel shows as "/.." per level above the namespace's
// root, while /proc/self/cgroup says "/": taken as it reads, the host's
// root cgroup would look like the container's, to be emptied into /init.
// Setup refuses that view before it writes anything, with one line saying
// to run the container with --cgroupns=host or not to mount the host's
// tree, and nodeinit exits 1 whatever --require-cgroup says. It does not
// adapt: it could find its own cgroup in the host's tree (the directory
// that many levels below the mount whose cgroup.procs lists its pid), but
// that would mend its own view only. The kubelet it starts would still read
// /proc/<pid>/cgroup relative to the namespace and the files of the host's
// tree, and a runtime outside the namespace (containerd on the host) writes
// host paths, so every cgroup path of the node would mean two things;
// nodeinit has no handle on the host's cgroup namespace to move the kubelet
// into. One flag of the run fixes it, and a node that half works does not.
//
// Before the first fork Setup also compares the kubelet's cgroup driver
// with what the container shows of containerd's (SystemdCgroup in
// /etc/containerd/config.toml, read bounded, by a line scan), of systemd
// (/run/systemd/system) and of the cgroup namespace, and warns in one line
// about each disagreement that makes pods fail (driver.go). A kubelet on
// the systemd driver gets its cgroup root as that driver names it, or none.
package cgroups

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/config"
)

// evacuationCgroup is where the processes of a v2 namespace root move.
const evacuationCgroup = "/init"

// Options are what Setup and Preview work from.
type Options struct {
	// Cgroup holds the settings, defaulted and validated by config.
	config.Cgroup
	// ForKubelet says the executor is to get the container's cgroup as
	// its --cgroup-root (executor.containPodResources, and it sets no
	// cgroup root itself): Setup checks that the kubelet can use it, and
	// one it cannot use is a warning, or an error with Require.
	ForKubelet bool
	// Getenv looks up the Mesos variables; nil means os.Getenv.
	Getenv func(string) string
	// Limits asks for the limits on the kubelet's cgroup root (Result's
	// Limits): the container's cgroup it gets, else OwnRoot, the cgroup
	// root it sets itself, else "/", its default.
	Limits  bool
	OwnRoot string
	// KubeletCgroupDriver is the executor's --cgroup-driver, else its
	// kubelet configuration's cgroupDriver, "" when neither sets it;
	// KubeletConfigured says the executor has a kubelet configuration,
	// where an unset driver is the kubelet's default, cgroupfs. With
	// either, Setup warns in one line about a driver that containerd's
	// configuration, the host's systemd or the cgroup namespace disagrees
	// with.
	KubeletCgroupDriver string
	KubeletConfigured   bool
	// KubeletKeepsOwnDriver says the kubelet does not take the cgroup
	// driver the runtime reports over the CRI (a release before v1.31,
	// or KubeletCgroupDriverFromCRI off: node.TakesRuntimeCgroupDriver).
	KubeletKeepsOwnDriver bool
}

// Result is what Setup found and did.
type Result struct {
	// ContainerID is the Mesos container id, empty when none: the executor
	// gets it as MESOS_EXECUTOR_CONTAINER_UUID.
	ContainerID string
	// Cgroup is the cgroup nodeinit joined or tried to join (never the v2
	// leaf); empty when it stayed where it was started.
	Cgroup string
	// Joined maps each hierarchy nodeinit moved in ("cpu,cpuacct",
	// "unified", ...) to the cgroup it is in now.
	Joined map[string]string
	// Evacuated says the processes of the v2 namespace root moved to /init.
	Evacuated bool
	// KubeletRoot is the container's cgroup as the kubelet's --cgroup-root
	// takes it, set only with ForKubelet and only where the kubelet can
	// use it: nodeinit is in it, and it exists in every mounted hierarchy
	// the kubelet validates (on v2, with the controllers the kubelet needs
	// available). It is "/" where the cgroup mounts show the container's
	// cgroup as their root (a private cgroup namespace), the kubelet's own
	// default.
	KubeletRoot string
	// Limits are the memory, CPU and pids limits of LimitsRoot, the
	// kubelet's cgroup root as it will take it, and its ancestors, read
	// with Options.Limits; LimitsErr says what could not be read.
	Limits     Limits
	LimitsRoot string
	LimitsErr  error
	// rootPath is the cgroup KubeletRoot names, where they differ: a
	// kubelet with the systemd cgroup driver takes /a/b for
	// /a.slice/a-b.slice.
	rootPath string
	// KubeletCgroupDriver is the cgroup driver the kubelet will run with,
	// "" when unknown: the one containerd reports over the CRI where it
	// does and the kubelet takes it, else the kubelet's own (driver.go).
	// The cgroup root, the limits read and the system-bus check follow it.
	KubeletCgroupDriver string
}

// Setup evacuates the root of a v2 cgroup namespace when asked (or by
// default, see evacuateByDefault), then discovers the container's cgroup,
// moves this process into it where that is what the runtime expects, and
// decides whether the kubelet can take it as its cgroup root. Without
// Require every failure is logged as a warning and nodeinit carries on
// where it is; with Require, a cgroup it cannot find, join or (with
// ForKubelet) hand to the kubelet is an error. A cgroup mount that shows
// cgroups outside this process's cgroup namespace is always an error, before
// anything is written (see the package doc).
func Setup(o Options) (Result, error) { return prepare(o, true) }

// Preview is Setup without its effects and without its log: what Setup
// would find, for --write-flags. It assumes every join Setup would try
// succeeds.
func Preview(o Options) (Result, error) { return prepare(o, false) }

func prepare(o Options, act bool) (Result, error) {
	res, err := place(o, act)
	if err != nil || !o.Limits {
		return res, err
	}
	res.LimitsRoot = res.KubeletRoot
	if res.rootPath != "" {
		res.LimitsRoot = res.rootPath
	}
	if res.LimitsRoot == "" {
		res.LimitsRoot = o.OwnRoot
		if o.OwnRoot != "" && res.KubeletCgroupDriver == DriverSystemd {
			res.LimitsRoot = systemdPath(o.OwnRoot)
		}
	}
	if res.LimitsRoot == "" {
		res.LimitsRoot = "/"
	}
	layout, err := ReadLayout("/")
	if err != nil {
		res.LimitsErr = err
		return res, nil
	}
	res.Limits, res.LimitsErr = ReadLimits(layout, "/", res.LimitsRoot)
	return res, nil
}

// place is prepare's part that finds, joins and checks the container's
// cgroup.
func place(o Options, act bool) (Result, error) {
	log := logger{quiet: !act}
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	layout, err := ReadLayout("/")
	if err != nil {
		return Result{}, log.failure(o.Require, err)
	}
	// Nothing below may act on a tree that is not the namespace's own:
	// fatal whatever Require says (see the package doc).
	if err := checkNamespaceView(layout); err != nil {
		return Result{}, log.failure(true, err)
	}
	var res Result
	layout = settleRoot(o, act, layout, &res)

	target, err := discover(o.Parent, o.MesosPrefix, getenv)
	if err != nil {
		return res, log.failure(o.Require, err)
	}
	res.ContainerID = target.ContainerID
	own := target.Cgroup
	var in func(Hierarchy) bool
	switch {
	case target.Cgroup != "" && act:
		log.Infof("cgroup %s (from %s) on %s", target.Cgroup, target.Source, layout.Mode())
		res.Cgroup = target.Cgroup
		res.Joined, err = join(layout, target.Cgroup, o.V2Leaf, o.ForKubelet)
		if err != nil {
			if err := log.failure(o.Require, err); err != nil {
				return res, err
			}
		}
		in = func(h Hierarchy) bool { _, ok := res.Joined[h.Name()]; return ok }
	case target.Cgroup != "":
		res.Cgroup = target.Cgroup
		planned := map[string]bool{}
		for _, s := range planJoin(layout, "/", target.Cgroup, o.V2Leaf, o.ForKubelet) {
			planned[s.Hierarchy.Name()] = s.Missing == ""
		}
		in = func(h Hierarchy) bool { return planned[h.Name()] }
	case target.InOwn:
		log.Infof("%s: a Docker containerizer task, whose cgroup is its engine's: staying in %s",
			target.Source, describe(layout, nil))
		in = func(Hierarchy) bool { return true }
	default:
		log.Infof("no cgroup to join (none of --cgroup-parent, %s, %s, %s names one): staying in %s",
			EnvMesosContainerName, EnvMesosSandbox, EnvMesosDirectory, describe(layout, nil))
		return res, nil
	}
	if !o.ForKubelet {
		return res, nil
	}
	return res, handToKubelet(o, act, log, layout, target, own, in, &res)
}

// settleRoot settles the cgroup drivers (res.KubeletCgroupDriver, and a
// warning for each disagreement when act) and, where asked or by default
// at the root of a private v2 namespace, evacuates that root. It returns
// the layout as this process sees it afterwards.
func settleRoot(o Options, act bool, layout Layout, res *Result) Layout {
	evacuate := evacuateByDefault(os.Getpid(), layout)
	drivers := readDrivers("/", o.KubeletCgroupDriver, o.KubeletConfigured)
	drivers.KubeletKeepsOwn = o.KubeletKeepsOwnDriver
	drivers.PrivateRoot = evacuate
	res.KubeletCgroupDriver = drivers.kubelet()
	if act {
		for _, w := range drivers.warnings() {
			klog.Warning(w)
		}
	}
	if o.V2Evacuate != nil {
		evacuate = *o.V2Evacuate
	}
	if evacuate && act {
		if err := evacuateRoot(layout); err != nil {
			klog.Warningf("cgroup v2 root evacuation: %v", err)
		} else {
			res.Evacuated = true
			// This process moved too: what follows must see /init.
			if moved, err := ReadLayout("/"); err == nil {
				layout = moved
			}
		}
	}
	return layout
}

// handToKubelet is place's last part: the cgroup root the kubelet can be
// given (res.KubeletRoot), where nodeinit verifiably is (in) and the
// kubelet's cgroup driver can name it. own is the container's cgroup.
func handToKubelet(o Options, act bool, log logger, layout Layout, found target, own string, in func(Hierarchy) bool, res *Result) error {
	var err error
	if found.InOwn {
		if own, err = ownCgroup(layout, res.Evacuated); err != nil {
			return log.kubeletFailure(o, err)
		}
		if !res.Evacuated {
			if res.Joined, err = ownLeaf(layout, o.V2Leaf, act); err != nil {
				return log.kubeletFailure(o, err)
			}
		}
	}
	root, err := kubeletRoot(layout, "/", own, in)
	if err != nil {
		return log.kubeletFailure(o, err)
	}
	res.KubeletRoot = root
	if res.KubeletCgroupDriver == DriverSystemd && root != "/" {
		named, ok := systemdRoot(root)
		if !ok {
			res.KubeletRoot = ""
			return log.kubeletFailure(o, fmt.Errorf("cgroup %s cannot be the kubelet's cgroup root: its cgroup driver is systemd, "+
				"which takes a root only as nested slices it names itself (--cgroup-root=/a/b is /a.slice/a-b.slice), and %s is none", root, root))
		}
		res.KubeletRoot, res.rootPath = named, root
		log.Infof("the kubelet can take cgroup %s as its cgroup root, which its systemd cgroup driver names %s: nodeinit is in it in every hierarchy the kubelet checks (%s)",
			root, named, names(Layout{Hierarchies: KubeletHierarchies(layout)}))
		return nil
	}
	if root == "/" {
		log.Infof("the container's cgroup %s is the root of the cgroup mounts, which is the kubelet's default cgroup root", own)
	} else {
		log.Infof("the kubelet can take cgroup %s as its cgroup root: nodeinit is in it in every hierarchy the kubelet checks (%s)",
			root, names(Layout{Hierarchies: KubeletHierarchies(layout)}))
	}
	return nil
}

// ownCgroup is the cgroup the container runtime started this process in,
// as the hierarchies the kubelet uses show it: "/" after the evacuation of
// a v2 namespace root, which moved nodeinit from the root to /init.
func ownCgroup(l Layout, evacuated bool) (string, error) {
	if evacuated {
		return "/", nil
	}
	var own string
	var all []string
	for _, h := range KubeletHierarchies(l) {
		all = append(all, h.Name()+":"+h.Current)
		if own == "" {
			own = h.Current
		} else if h.Current != own {
			own = "-"
		}
	}
	switch own {
	case "":
		return "", fmt.Errorf("no hierarchy the kubelet uses is mounted (%s)", names(l))
	case "-":
		return "", fmt.Errorf("the container is in different cgroups of the hierarchies the kubelet uses (%s), so none can be its cgroup root", strings.Join(all, " "))
	}
	return own, nil
}

// logger is Setup's log; Preview's is quiet, for --write-flags prints
// command lines only.
type logger struct{ quiet bool }

func (l logger) Infof(format string, args ...any) {
	if !l.quiet {
		klog.InfofDepth(1, format, args...)
	}
}

// failure turns err into Setup's error with Require, or into a warning.
func (l logger) failure(require bool, err error) error {
	if require {
		return fmt.Errorf("cgroup: %w", err)
	}
	if !l.quiet {
		klog.WarningfDepth(1, "cgroup: %v; carrying on in the current cgroups", err)
	}
	return nil
}

// kubeletFailure reports a cgroup the kubelet cannot take as its root: an
// error with Require, else a warning.
func (l logger) kubeletFailure(o Options, err error) error {
	if o.Require {
		return fmt.Errorf("cgroup: %w", err)
	}
	if !l.quiet {
		klog.WarningfDepth(1, "%v; the executor gets no --cgroup-root", err)
	}
	return nil
}

// plural names the items of list with the noun that fits their number:
// "cpu hierarchy", "cpu memory hierarchies".
func plural(list []string, one, many string) string {
	if len(list) == 1 {
		return list[0] + " " + one
	}
	return strings.Join(list, " ") + " " + many
}

// names lists the hierarchies of l for a message.
func names(l Layout) string {
	var n []string
	for _, h := range l.Hierarchies {
		n = append(n, h.Name())
	}
	return strings.Join(n, " ")
}

// describe lists every hierarchy with this process's cgroup in it: from now
// where it has the hierarchy, else from l.
func describe(l Layout, now map[string]string) string {
	var parts []string
	for _, h := range l.Hierarchies {
		p, ok := now[h.Name()]
		if !ok {
			p = h.Current
		}
		parts = append(parts, h.Name()+":"+p)
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return "no cgroup hierarchy"
	}
	return strings.Join(parts, " ")
}
