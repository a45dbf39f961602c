package main

import (
	"errors"
	"os"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/cgroups"
	"github.com/nodeinit/nodeinit/config"
	"github.com/nodeinit/nodeinit/init/footprint"
	"github.com/nodeinit/nodeinit/init/logsink"
	"github.com/nodeinit/nodeinit/init/oomscore"
	"github.com/nodeinit/nodeinit/init/reaper"
	"github.com/nodeinit/nodeinit/init/signals"
	"github.com/nodeinit/nodeinit/init/supervisor"
	"github.com/nodeinit/nodeinit/mountns"
	"github.com/nodeinit/nodeinit/node"
	"github.com/nodeinit/nodeinit/notify"
	"github.com/nodeinit/nodeinit/restrict"
)

// start is what the phases of a start share: the configuration, the
// signals, and what each phase leaves for the next. undo runs, last first,
// when boot returns.
type start struct {
	cfg      *config.Config
	sigs     *signals.Set
	warnings []string // the configuration's, to log

	kubelet node.KubeletConfig
	// version is the executor's kubelet release, the zero value when
	// unknown (node.ReadKubeletVersion).
	version node.KubeletVersion
	plan    *restrict.Plan
	oom     *oomscore.Score
	thp     *footprint.HugePages
	cg      cgroups.Result
	ct      node.Container
	sc      supervisor.Config
	// notifier tells a service manager (NOTIFY_SOCKET) when the node is
	// ready and when it stops.
	notifier *notify.Notifier
	undo     []func()
}

// phase is one step of a start; a non-zero code ends the start with it.
type phase struct {
	name string
	run  func(*start) int
}

// phases are the steps of a start, in order. Everything that changes the
// process (its mount namespace, its mounts, its cgroup) happens before the
// first fork, so that the children inherit it. The order is a contract
// (TestPhasesKeepTheirOrder):
//   - the re-exec into a private mount namespace comes first: nothing
//     started before it (the log queue, the log pump) would survive it;
//   - the node's identity is mounted before / is made shared, so that its
//     mounts cannot propagate (identity's Apply refuses a shared mount);
//   - the container's restrictions are adjusted for before the cgroup is
//     joined (a read-only cgroupfs is remounted first);
//   - the node is sized after the join, from the limits of the cgroup
//     joined;
//   - the login1 bus listens before the executor starts: the kubelet looks
//     for it once, when it starts;
//   - nodeinit takes its OOM score and its huge-page setting before the
//     tasks are built, which hand each child the values nodeinit started
//     with.
var phases = []phase{
	{"mount namespace", (*start).mountNamespace},
	{"log", (*start).log},
	{"oom score", (*start).oomScore},
	{"huge pages", (*start).hugePages},
	{"identity", (*start).identity},
	{"rshared", (*start).rshared},
	{"container", (*start).container},
	{"cgroup", (*start).cgroup},
	{"sizing", (*start).sizing},
	{"tasks", (*start).tasks},
	{"subreaper", (*start).subreaper},
	{"notify", (*start).notify},
	{"binary pages", (*start).binaryPages},
	{"graceful shutdown", (*start).gracefulShutdown},
}

// boot prepares the process — mount namespace, cgroup, log files — before
// the first fork, phase by phase, then supervises the children and returns
// the executor's status. sigs has TERM and INT caught already; warnings are
// the configuration's, to log.
func boot(cfg *config.Config, sigs *signals.Set, warnings []string) int {
	s := &start{cfg: cfg, sigs: sigs, warnings: warnings}
	defer func() {
		for i := len(s.undo) - 1; i >= 0; i-- {
			s.undo[i]()
		}
	}()
	for _, p := range phases {
		if code := p.run(s); code != 0 {
			return code
		}
	}
	code := supervisor.New(s.sc).Run()
	// STOPPING=1 goes out before nodeinit does, within a bound.
	s.notifier.Wait(notifyBound)
	return code
}

// mountNamespace re-executes nodeinit into a private mount namespace when
// asked. A TERM caught so far is carried across it.
func (s *start) mountNamespace() int {
	if s.cfg.MountNamespace.Private {
		if err := mountns.Enter(func() []string { return []string{s.sigs.ForExec()} }); err != nil {
			klog.ErrorS(err, "Cannot enter a private mount namespace")
			return exitFailure
		}
	} else if err := mountns.ForgetMarker(); err != nil {
		klog.ErrorS(err, "Cannot clean the environment")
		return exitFailure
	}
	return 0
}

// log catches the signals that would end, crash or stop nodeinit while it
// prepares (the rest once the executor runs: the supervisor does that), and
// sends nodeinit's log to stdout through a queue, so that a stdout nobody
// reads never blocks reaping or signal handling.
func (s *start) log() int {
	s.sigs.CatchBeforeFork()
	sink := logsink.New(os.Stdout, logsink.DefaultLimit)
	klog.SetOutput(sink)
	s.undo = append(s.undo, func() { sink.Flush(logFlushBound) })

	klog.InfoS("Starting nodeinit", "version", version, "pid", os.Getpid())
	for _, w := range s.warnings {
		klog.Warning(w)
	}
	if len(s.sigs.IgnoredAtStart) > 0 {
		names := make([]string, len(s.sigs.IgnoredAtStart))
		for i, sig := range s.sigs.IgnoredAtStart {
			names[i] = signals.Name(sig)
		}
		klog.InfoS("Signals ignored when nodeinit started stay ignored, for it and its children", "signals", strings.Join(names, ","))
	}
	if mountns.InPrivate() {
		klog.InfoS("Running in a private mount namespace; host mounts propagate in, the node's do not leak out")
	}
	return 0
}

// oomScore makes nodeinit the OOM killer's last choice (package oomscore):
// its death would end the node container. Where it may not, one line says
// so and what it means; that is no reason not to run the node.
func (s *start) oomScore() int {
	oom, err := oomscore.Lower()
	switch {
	case errors.Is(err, oomscore.ErrNotPermitted):
		klog.Warningf("nodeinit's OOM score adjustment stays at %d: %v; "+
			"the OOM killer may choose nodeinit, and that ends the node container", oom.Start, oomscore.ErrNotPermitted)
	case err != nil:
		klog.Warningf("Cannot lower nodeinit's OOM score adjustment: %v; "+
			"the OOM killer may choose nodeinit, and that ends the node container", err)
	case oom.Lowered:
		klog.InfoS("Lowered nodeinit's OOM score adjustment: the OOM killer never chooses it; its children start at the value it started with",
			"oomScoreAdj", oomscore.Min, "children", oom.Start)
	}
	s.oom = oom
	return 0
}

// hugePages turns transparent huge pages off for nodeinit's own memory
// (package footprint); where the kernel has none, it has nothing to turn
// off.
func (s *start) hugePages() int {
	thp, err := footprint.DisableHugePages()
	if err != nil {
		klog.V(1).InfoS("nodeinit's memory keeps the kernel's transparent-huge-page setting", "reason", err)
	}
	s.thp = thp
	return 0
}

// identity gives the node its machine-id and product_uuid, when asked.
func (s *start) identity() int {
	if s.cfg.Identity.MachineID || s.cfg.Identity.ProductUUID {
		nodeIdentity(s.cfg)
	}
	return 0
}

// rshared makes / recursively shared for the kubelet's mount propagation,
// when asked.
func (s *start) rshared() int {
	if !s.cfg.MountNamespace.MakeRShared {
		return 0
	}
	if err := mountns.MakeRShared(); err != nil {
		klog.ErrorS(err, "Cannot make / recursively shared")
		return exitFailure
	}
	klog.InfoS("Made / rshared for the kubelet's mount propagation")
	return 0
}

// container reads the kubelet's configuration and adjusts for what the
// container lacks or restricts.
func (s *start) container() int {
	var err error
	s.kubelet, err = node.ReadKubeletConfig(s.cfg.Executor.Args)
	if err != nil {
		klog.Warningf("%v; taking it to set no cgroup root", err)
	}
	s.version = node.ReadKubeletVersion(s.cfg.Executor.Path, childEnv(s.cfg))
	if s.version.Known() {
		klog.InfoS("The executor's kubelet release, from its Go build information", "version", s.version, "from", s.version.From)
	}
	plan, ok := adjustForContainer(s.cfg, s.kubelet, s.version)
	s.plan = plan
	s.undo = append(s.undo, func() { plan.Close() })
	if !ok {
		return exitFailure
	}
	return 0
}

// cgroup joins the container's cgroup (and its v2 leaf) and finds the
// kubelet's cgroup root and the limits there.
func (s *start) cgroup() int {
	root, own := node.OwnCgroupRoot(s.cfg.Executor.Args, s.kubelet)
	if own != "" {
		klog.InfoS("The executor sets its own cgroup root, so nodeinit adds none", "cgroupRoot", root, "from", own)
	}
	cg, err := cgroups.Setup(cgroupOptions(s.cfg, root, own, s.kubelet, s.version))
	if err != nil {
		klog.ErrorS(err, "Cannot join the container's cgroup")
		return exitFailure
	}
	s.cg = cg
	s.ct = node.Container{Cgroup: cg.KubeletRoot, ID: cg.ContainerID}
	return 0
}

// sizing sizes the node to its container's limits, when asked.
func (s *start) sizing() int {
	if s.cfg.Executor.SizeNodeToContainer {
		s.ct.Sizing = node.SizeToContainer(s.cfg.Executor.Args, s.kubelet, s.cg.Limits, s.cg.LimitsRoot, s.cg.LimitsErr)
		for _, n := range s.ct.Sizing.Notes {
			n.Log()
		}
	}
	return 0
}

// tasks builds the executor's and the proxy's commands and their output.
func (s *start) tasks() int {
	sc, closeLogs, code := tasks(s.cfg, s.ct, s.kubelet, s.plan)
	if code != 0 {
		return code
	}
	s.sc = sc
	s.sc.Signals = s.sigs
	s.sc.OOMScore = s.oom
	s.sc.HugePages = s.thp
	s.undo = append(s.undo, closeLogs)
	return 0
}

// subreaper makes nodeinit the children's subreaper where it is not PID 1.
func (s *start) subreaper() int {
	sub, err := reaper.BecomeSubreaper()
	if err != nil {
		klog.ErrorS(err, "Cannot become a child subreaper; orphans would escape nodeinit")
		return exitFailure
	}
	if sub {
		klog.InfoS("Not PID 1: registered as child subreaper, orphans of the executor and the proxy are reaped here")
	}
	return 0
}

// notify tells a service manager that the node is ready once the executor
// is healthy, and that it stops when the shutdown begins.
func (s *start) notify() int {
	s.notifier = notify.New()
	s.sc.OnExecutorStarted = func(int) { s.notifier.ReadyWhenHealthy(notify.Probe{URL: s.cfg.ReadyURL}) }
	s.sc.OnShutdown = s.notifier.Stopping
	return 0
}

// binarySettle is how long after the executor's start nodeinit gives back
// its binary's pages: by then the kubelet has registered, reached the bus
// and the runtime, and reported the node Ready (about a second after its
// start on a host, some 20 s in an emulated guest), so that what nodeinit
// touches again is what it touches while the node runs.
const binarySettle = 30 * time.Second

// binaryPages gives back the pages of nodeinit's binary that only its
// start used (package footprint), binarySettle after the executor started,
// unless the stop has begun by then (the first TERM or INT, or the
// executor's end): the stop runs code the start did.
func (s *start) binaryPages() int {
	var release *time.Timer // set and stopped from the loop
	started := s.sc.OnExecutorStarted
	s.sc.OnExecutorStarted = func(pid int) {
		release = time.AfterFunc(binarySettle, func() {
			n, err := footprint.ReleaseBinaryPages()
			if err != nil {
				klog.V(1).InfoS("nodeinit keeps its binary's pages mapped", "reason", err)
				return
			}
			klog.V(1).InfoS("Gave back the pages of nodeinit's binary that only this process mapped", "mappedBytes", n)
		})
		if started != nil {
			started(pid)
		}
	}
	keep := func() {
		if release != nil {
			release.Stop()
		}
	}
	stop, stopping := s.sc.OnStop, s.sc.OnShutdown
	s.sc.OnStop = func() {
		keep()
		if stop != nil {
			stop()
		}
	}
	s.sc.OnShutdown = func() {
		keep()
		if stopping != nil {
			stopping()
		}
	}
	return 0
}

// gracefulShutdown serves login1 to the executor, when asked, and takes a
// delay lock on the host's logind where the container has the host's
// system bus, so that the host's shutdown drains the node too. It comes
// after notify: the bus admits the executor, then the notifier is told.
func (s *start) gracefulShutdown() int {
	if !s.cfg.GracefulNodeShutdown.Enabled {
		return 0
	}
	drain, env, err := startNodeDrain(s.cfg.GracefulNodeShutdown, s.kubelet, s.cg.KubeletCgroupDriver)
	if err != nil {
		klog.ErrorS(err, "Cannot serve login1 for graceful node shutdown")
		return exitFailure
	}
	s.undo = append(s.undo, drain.close)
	drain.wire(&s.sc)
	// The executor alone: the proxy has no node to drain. Any bus address
	// it had is replaced: its D-Bus library takes the first.
	key, addr, _ := strings.Cut(env, "=")
	s.sc.Executor.Env = node.Setenv(s.sc.Executor.Env, key, addr)
	return 0
}

// adjustForContainer checks what the container lacks or restricts, logs
// every adjustment once with its reason, makes its mounts, and says false
// (after one line why) when the node cannot run here.
func adjustForContainer(cfg *config.Config, kubelet node.KubeletConfig, version node.KubeletVersion) (*restrict.Plan, bool) {
	plan := restrict.Inspect(restrict.Input{Root: "/", Config: cfg, Kubelet: kubelet, KubeletVersion: version})
	for _, w := range plan.Warnings {
		klog.Warning(w)
	}
	if plan.Refusal != "" {
		klog.ErrorS(nil, plan.Refusal)
		return &plan, false
	}
	warnings, err := plan.Apply()
	for _, w := range warnings {
		klog.Warning(w)
	}
	if err != nil {
		klog.ErrorS(err, "Cannot adjust the node to its container")
		return &plan, false
	}
	for _, a := range plan.Adjustments {
		a.Log()
	}
	return &plan, true
}

// Bounds on what nodeinit waits for on its way out: a stdout or a service
// manager that takes nothing must not keep it alive.
const (
	logFlushBound = 2 * time.Second
	notifyBound   = time.Second
)

// cgroupOptions are the cgroup settings, with the container's cgroup to be
// handed to the executor when executor.containPodResources is on and own
// (node.OwnCgroupRoot) says the executor sets no cgroup root itself, and,
// with executor.sizeNodeToContainer, the limits to read on the kubelet's
// cgroup root (root: the one the executor sets, if any), and the kubelet's
// cgroup driver to check: its own, and whether its release (version)
// takes the runtime's over it.
func cgroupOptions(cfg *config.Config, root, own string, kubelet node.KubeletConfig, version node.KubeletVersion) cgroups.Options {
	return cgroups.Options{Cgroup: cfg.Cgroup, ForKubelet: cfg.Executor.ContainPodResources && own == "",
		Limits: cfg.Executor.SizeNodeToContainer, OwnRoot: root,
		KubeletCgroupDriver: kubelet.CgroupDriver(), KubeletConfigured: len(kubelet.Files) > 0,
		KubeletKeepsOwnDriver: !node.TakesRuntimeCgroupDriver(cfg.Executor.Args, kubelet, version)}
}

// childEnv is the children's environment: nodeinit's own, with PATH as the
// configuration says, and without NOTIFY_SOCKET (only PID 1 speaks to the
// service manager).
func childEnv(cfg *config.Config) []string {
	wd, _ := os.Getwd()
	return notify.Environ(node.Environ(os.Environ(), cfg.PathOverride, wd))
}
