package main

import (
	"os"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/config"
	"github.com/nodeinit/nodeinit/init/supervisor"
	"github.com/nodeinit/nodeinit/init/supervisor/cri"
	"github.com/nodeinit/nodeinit/logfile"
	"github.com/nodeinit/nodeinit/node"
	"github.com/nodeinit/nodeinit/restrict"
)

// The supervisor's configuration: the tasks' command lines, their stdin,
// and their output on stdout or in rotated log files.

// tasks builds the supervisor's configuration: the executor's, the
// proxy's and the runtime's command lines, with their output going to
// stdout or, with --log-dir, to rotated files. closeLogs drains the log files once the
// children are gone. A non-zero code is the exit status for log files that
// cannot be made.
func tasks(cfg *config.Config, ct node.Container, kubelet node.KubeletConfig, plan *restrict.Plan) (sc supervisor.Config, closeLogs func(), code int) {
	closeLogs = func() {}
	env := plan.Environ(childEnv(cfg))
	exe := node.Executor(cfg, env, ct, kubelet, plan.KubeletArgs...)
	sc = supervisor.Config{
		Executor: supervisor.Task{Name: "executor", Path: exe.Path, Args: exe.Args, Env: exe.Env,
			Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr},
		Backoff: supervisor.Backoff{
			Initial: cfg.Proxy.RestartBackoff.Initial.Duration,
			Max:     cfg.Proxy.RestartBackoff.Max.Duration,
			Reset:   cfg.Proxy.RestartBackoff.Reset.Duration,
		},
		GracePeriod: cfg.ShutdownGracePeriod.Duration,
	}
	// As under tini, an executor on nodeinit's terminal gets the terminal:
	// it can read it, and Ctrl-C and Ctrl-Z reach it.
	if supervisor.ControllingTerminal(os.Stdin) {
		sc.Executor.Foreground = true
		klog.InfoS("Stdin is nodeinit's controlling terminal: the executor's process group gets its foreground")
	}
	if cfg.Proxy.Run {
		px, err := sidecar("proxy", node.Proxy(cfg, env, plan.ProxyArgs...))
		if err != nil {
			klog.ErrorS(err, "Cannot open the proxy's stdin")
			return sc, closeLogs, exitFailure
		}
		sc.Proxy = px
	}
	if cmd, ok := node.Runtime(cfg, env); ok {
		rt, err := sidecar("runtime", cmd)
		if err != nil {
			klog.ErrorS(err, "Cannot open the runtime's stdin")
			return sc, closeLogs, exitFailure
		}
		sc.Runtime = rt
		sc.RuntimeProbe = &cri.Probe{Socket: cfg.Runtime.Socket}
		sc.RuntimeSocket, sc.RuntimeWait = cfg.Runtime.Socket, cfg.Runtime.WaitTimeout.Duration
		_, lines := node.RuntimeEndpoint(cfg, cfg.Executor.Args, kubelet)
		for _, l := range lines {
			l.Log()
		}
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
	for _, t := range []*supervisor.Task{&sc.Executor, sc.Proxy, sc.Runtime} {
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
		// Bounded: a write to a hung log volume must not hold the exit.
		if err := pump.Close(2 * time.Second); err != nil {
			klog.ErrorS(err, "Cannot close the log files")
		}
	}, 0
}

// sidecar is a task that reads nothing, the proxy or the runtime: its stdin
// is /dev/null, and a terminal on nodeinit's stays the executor's.
func sidecar(name string, c node.Command) (*supervisor.Task, error) {
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	return &supervisor.Task{Name: name, Path: c.Path, Args: c.Args, Env: c.Env,
		Stdin: devNull, Stdout: os.Stdout, Stderr: os.Stderr}, nil
}
