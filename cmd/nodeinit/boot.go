package main

import (
	"context"
	"errors"
	"os"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/cgroups"
	"github.com/nodeinit/nodeinit/config"
	"github.com/nodeinit/nodeinit/init/logsink"
	"github.com/nodeinit/nodeinit/init/reaper"
	"github.com/nodeinit/nodeinit/init/supervisor"
	"github.com/nodeinit/nodeinit/logfile"
	"github.com/nodeinit/nodeinit/mountns"
	"github.com/nodeinit/nodeinit/node"
	"github.com/nodeinit/nodeinit/notify"
)

// writeFlags prints the executor's and the proxy's final command lines
// without touching namespaces or cgroups: the container comes from the
// environment alone.
func writeFlags(cfg *config.Config) int {
	env := childEnv(cfg)
	t, err := cgroups.Discover(cfg.Cgroup.Parent, cfg.Cgroup.MesosPrefix, os.Getenv)
	if err != nil {
		klog.ErrorS(err, "Cannot discover the container")
		return exitFailure
	}
	cmds := []node.Command{node.Executor(cfg, env, node.Container{Cgroup: t.Cgroup, ID: t.ContainerID})}
	if cfg.Proxy.Run {
		cmds = append(cmds, node.Proxy(cfg, env))
	}
	if err := node.WriteFlags(os.Stdout, cmds...); err != nil {
		return exitFailure
	}
	return 0
}

// childEnv is the children's environment: nodeinit's own, with PATH as the
// configuration says, and without NOTIFY_SOCKET (only PID 1 speaks to the
// service manager).
func childEnv(cfg *config.Config) []string {
	wd, _ := os.Getwd()
	return notify.Environ(node.Environ(os.Environ(), cfg.PathOverride, wd))
}

// boot prepares the process — mount namespace, cgroup, log files — before
// the first fork, so that the children inherit all of it, then supervises
// them and returns the executor's status.
func boot(cfg *config.Config) int {
	// The re-exec into a private mount namespace comes first: nothing
	// started before it (the log queue, the log pump) would survive it.
	if cfg.MountNamespace.Private {
		if err := mountns.Enter(); err != nil {
			klog.ErrorS(err, "Cannot enter a private mount namespace")
			return exitFailure
		}
	}
	// Catching completes while nodeinit prepares, and before the first fork;
	// a TERM caught before the executor runs is kept for it. (One that comes
	// sooner, while the Go runtime starts or the catching is under way, ends
	// nodeinit before it has started anything.)
	signals := supervisor.CatchSignals()
	// From here on nodeinit's log goes to stdout through a queue, so that a
	// stdout nobody reads never blocks reaping or signal handling.
	sink := logsink.New(os.Stdout, logsink.DefaultLimit)
	klog.SetOutput(sink)
	defer sink.Flush(2 * time.Second)

	klog.InfoS("Starting nodeinit", "version", version, "pid", os.Getpid())
	for _, w := range cfg.Warnings() {
		klog.Warning(w)
	}
	if mountns.InPrivate() {
		klog.InfoS("Running in a private mount namespace; host mounts propagate in, the node's do not leak out")
	}
	if cfg.MountNamespace.MakeRShared {
		if err := mountns.MakeRShared(); err != nil {
			klog.ErrorS(err, "Cannot make / recursively shared")
			return exitFailure
		}
		klog.InfoS("Made / rshared for the kubelet's mount propagation")
	}
	cg, err := cgroups.Setup(cgroups.Options{
		Parent: cfg.Cgroup.Parent, Prefix: cfg.Cgroup.MesosPrefix, Leaf: cfg.Cgroup.V2Leaf,
		Require: cfg.Cgroup.Require, Evacuate: cfg.Cgroup.V2Evacuate,
	})
	if err != nil {
		klog.ErrorS(err, "Cannot join the container's cgroup")
		return exitFailure
	}

	sc, closeLogs, code := tasks(cfg, node.Container{Cgroup: cg.Cgroup, ID: cg.ContainerID})
	if code != 0 {
		return code
	}
	defer closeLogs()

	sub, err := reaper.BecomeSubreaper()
	if err != nil {
		klog.ErrorS(err, "Cannot become a child subreaper; orphans would escape nodeinit")
		return exitFailure
	}
	if sub {
		klog.InfoS("Not PID 1: registered as child subreaper, orphans of the executor and the proxy are reaped here")
	}

	sc.Signals = signals
	ready, cancelReady := context.WithCancel(context.Background())
	defer cancelReady()
	sc.OnExecutorStarted = func() { notify.ReadyWhenHealthy(ready, notify.Probe{URL: cfg.ReadyURL}) }
	sc.OnShutdown = func() {
		cancelReady()
		notify.Stopping()
	}
	return supervisor.New(sc).Run()
}

// tasks builds the supervisor's configuration: the executor's and the
// proxy's command lines, resolved to programs that exist, with their output
// going to stdout or, with --log-dir, to rotated files. closeLogs drains
// the log files once the children are gone. A non-zero code is the exit
// status for a task that cannot be started or log files that cannot be made.
func tasks(cfg *config.Config, ct node.Container) (sc supervisor.Config, closeLogs func(), code int) {
	closeLogs = func() {}
	env := childEnv(cfg)
	exe := node.Executor(cfg, env, ct)
	exePath, err := supervisor.Resolve("executor", exe.Path, exe.Getenv("PATH"))
	if err != nil {
		return sc, closeLogs, startFailure(err)
	}
	sc = supervisor.Config{
		Executor: supervisor.Task{Name: "executor", Path: exePath, Args: exe.Args, Env: exe.Env,
			Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr},
		Backoff: supervisor.Backoff{
			Initial: cfg.Proxy.RestartBackoff.Initial.Duration,
			Max:     cfg.Proxy.RestartBackoff.Max.Duration,
			Reset:   cfg.Proxy.RestartBackoff.Reset.Duration,
		},
		GracePeriod: cfg.ShutdownGracePeriod.Duration,
	}
	if cfg.Proxy.Run {
		px := node.Proxy(cfg, env)
		pxPath, err := supervisor.Resolve("proxy", px.Path, px.Getenv("PATH"))
		if err != nil {
			return sc, closeLogs, startFailure(err)
		}
		// The proxy reads nothing; a terminal on stdin stays the executor's.
		devNull, err := os.Open(os.DevNull)
		if err != nil {
			klog.ErrorS(err, "Cannot open the proxy's stdin")
			return sc, closeLogs, exitFailure
		}
		sc.Proxy = &supervisor.Task{Name: "proxy", Path: pxPath, Args: px.Args, Env: px.Env,
			Stdin: devNull, Stdout: os.Stdout, Stderr: os.Stderr}
	}
	if cfg.Logging.Dir == "" {
		return sc, closeLogs, 0
	}
	pump, err := logfile.NewPump(logfile.Rotation{Dir: cfg.Logging.Dir, MaxSizeMiB: int(cfg.Logging.MaxSize),
		MaxBackups: cfg.Logging.MaxBackups, MaxAgeDays: cfg.Logging.MaxAge})
	if err != nil {
		klog.ErrorS(err, "Cannot set up the log files")
		return sc, closeLogs, exitFailure
	}
	for _, t := range []*supervisor.Task{&sc.Executor, sc.Proxy} {
		if t == nil {
			continue
		}
		out, err := pump.Add(t.Name)
		if err != nil {
			klog.ErrorS(err, "Cannot set up the log files")
			return sc, closeLogs, exitFailure
		}
		t.Stdout, t.Stderr = out, out
	}
	pump.Start()
	klog.InfoS("Children's output goes to rotated log files", "dir", cfg.Logging.Dir, "maxSizeMiB", cfg.Logging.MaxSize,
		"maxBackups", cfg.Logging.MaxBackups, "maxAgeDays", cfg.Logging.MaxAge)
	return sc, func() {
		if err := pump.Close(); err != nil {
			klog.ErrorS(err, "Cannot close the log files")
		}
	}, 0
}

// startFailure reports a task that cannot be started with its 126 or 127.
func startFailure(err error) int {
	klog.ErrorS(err, "Cannot start")
	var se *supervisor.StartError
	if errors.As(err, &se) {
		return se.Code
	}
	return exitFailure
}
