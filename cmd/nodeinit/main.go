// Command nodeinit is the PID 1 of a Kubernetes node container: it starts
// the node's executor (the kubelet or a kubelet-executor) and kube-proxy,
// reaps every zombie, forwards signals, and exits with the executor's status.
//
//	nodeinit [flags] [--] EXECUTOR [ARG...]
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/init/logsink"
	"github.com/nodeinit/nodeinit/init/reaper"
	"github.com/nodeinit/nodeinit/init/supervisor"
)

// version is stamped by the build (-X main.version=...).
var version = "dev"

// Exit codes of nodeinit itself; the executor's own status passes through.
const (
	exitFailure = 1 // nodeinit could not do its job
	exitUsage   = 2 // bad command line
)

func main() { os.Exit(run(os.Args[1:])) }

// options are nodeinit's command-line settings.
type options struct {
	runProxy     bool
	proxyPath    string
	proxyArgs    []string
	gracePeriod  time.Duration
	backoff      supervisor.Backoff
	printVersion bool
}

func newFlagSet(o *options) *pflag.FlagSet {
	fs := pflag.NewFlagSet("nodeinit", pflag.ContinueOnError)
	// Everything after EXECUTOR belongs to the executor.
	fs.SetInterspersed(false)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.SortFlags = false

	d := supervisor.DefaultBackoff
	fs.BoolVar(&o.runProxy, "run-proxy", true, "also run the proxy (kube-proxy) as a respawned sidecar")
	fs.StringVar(&o.proxyPath, "proxy-path", "kube-proxy", "the proxy program, looked up in PATH unless it holds a slash")
	fs.StringArrayVar(&o.proxyArgs, "proxy-arg", nil, "an argument passed to the proxy as is, after the others (repeatable)")
	fs.DurationVar(&o.gracePeriod, "shutdown-grace-period", 10*time.Second, "how long the executor has after a forwarded TERM or INT, and the rest after the executor has ended, before SIGKILL")
	fs.DurationVar(&o.backoff.Initial, "proxy-restart-backoff", d.Initial, "delay before the proxy's first restart; doubles after each quick exit")
	fs.DurationVar(&o.backoff.Max, "proxy-restart-backoff-max", d.Max, "longest delay between proxy restarts")
	fs.DurationVar(&o.backoff.Reset, "proxy-restart-backoff-reset", d.Reset, "a proxy run this long resets the restart delay")
	fs.BoolVar(&o.printVersion, "version", false, "print the version and exit")
	fs.BoolP("help", "h", false, "print this help and exit")

	// klog's verbosity flags, and only those: its log always goes to stdout.
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlag(klogFlags.Lookup("v"))
	fs.AddGoFlag(klogFlags.Lookup("vmodule"))
	// One copy of each line, on stdout; nothing on stderr.
	for name, value := range map[string]string{"logtostderr": "false", "alsologtostderr": "false", "one_output": "true", "stderrthreshold": "FATAL"} {
		_ = klogFlags.Set(name, value)
	}
	return fs
}

func usage(fs *pflag.FlagSet) string {
	return "Usage: nodeinit [flags] [--] EXECUTOR [ARG...]\n\n" +
		"nodeinit is the PID 1 of a Kubernetes node container. It runs EXECUTOR (the kubelet)\n" +
		"as the main task and the proxy (kube-proxy) as a respawned sidecar, reaps every\n" +
		"zombie, forwards TERM, INT and HUP, and exits with the executor's status.\n\nFlags:\n" +
		fs.FlagUsages()
}

// usageError prints one line and a hint on stderr, and returns exit code 2.
func usageError(format string, a ...any) int {
	fmt.Fprintf(os.Stderr, "nodeinit: "+format+"\n", a...)
	fmt.Fprintln(os.Stderr, "Run 'nodeinit --help' for usage.")
	return exitUsage
}

func run(args []string) int {
	var o options
	fs := newFlagSet(&o)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Print(usage(fs))
			return 0
		}
		return usageError("%v", err)
	}
	if help, _ := fs.GetBool("help"); help {
		fmt.Print(usage(fs))
		return 0
	}
	if o.printVersion {
		fmt.Println("nodeinit", version)
		return 0
	}
	// nodeinit's log goes to stdout through a queue, so that a stdout
	// nobody reads never blocks reaping or signal handling.
	sink := logsink.New(os.Stdout, logsink.DefaultLimit)
	klog.SetOutput(sink)
	defer sink.Flush(2 * time.Second)
	defer klog.Flush()
	if fs.NArg() == 0 {
		return usageError("no EXECUTOR given")
	}
	if o.gracePeriod < 0 {
		return usageError("--shutdown-grace-period must not be negative, got %v", o.gracePeriod)
	}
	if o.backoff.Initial <= 0 || o.backoff.Max < o.backoff.Initial || o.backoff.Reset < 0 {
		return usageError("proxy restart backoff must satisfy 0 < --proxy-restart-backoff <= --proxy-restart-backoff-max, and a non-negative reset")
	}

	env := os.Environ()
	path := os.Getenv("PATH")
	executorPath, err := supervisor.Resolve("executor", fs.Arg(0), path)
	if err != nil {
		return startFailure(err)
	}
	cfg := supervisor.Config{
		Executor: supervisor.Task{
			Name: "executor", Path: executorPath, Args: fs.Args()[1:], Env: env,
			Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		},
		Backoff:     o.backoff,
		GracePeriod: o.gracePeriod,
	}
	if o.runProxy {
		proxyPath, err := supervisor.Resolve("proxy", o.proxyPath, path)
		if err != nil {
			return startFailure(err)
		}
		devNull, err := os.Open(os.DevNull)
		if err != nil {
			klog.ErrorS(err, "Cannot open the proxy's stdin")
			return exitFailure
		}
		defer devNull.Close()
		cfg.Proxy = &supervisor.Task{
			Name: "proxy", Path: proxyPath, Args: o.proxyArgs, Env: env,
			Stdin: devNull, Stdout: os.Stdout, Stderr: os.Stderr,
		}
	}

	klog.InfoS("Starting nodeinit", "version", version, "pid", os.Getpid())
	sub, err := reaper.BecomeSubreaper()
	if err != nil {
		klog.ErrorS(err, "Cannot become a child subreaper; orphans would escape nodeinit")
		return exitFailure
	}
	if sub {
		klog.InfoS("Not PID 1: registered as child subreaper, orphans of the executor and the proxy are reaped here")
	}
	return supervisor.New(cfg).Run()
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
