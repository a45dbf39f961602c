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
	"runtime"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/cgroups"
	"github.com/nodeinit/nodeinit/config"
	"github.com/nodeinit/nodeinit/init/signals"
)

// version is stamped by the build (-X main.version=...).
var version = "dev"

// Exit codes of nodeinit itself; the executor's own status passes through.
const (
	exitFailure       = 1   // nodeinit could not do its job
	exitUsage         = 2   // bad command line
	exitInvalidConfig = 255 // bad --config file
)

func main() { os.Exit(run(os.Args[1:])) }

// commandLine is nodeinit's flag set: config's flags for every setting, and
// --version, --help and klog's verbosity.
type commandLine struct {
	fs      *pflag.FlagSet
	flags   *config.Flags
	version bool
	help    bool
}

func newCommandLine() *commandLine {
	c := &commandLine{fs: pflag.NewFlagSet("nodeinit", pflag.ContinueOnError)}
	c.fs.SetOutput(io.Discard) // errors are reported by run, on one line
	c.fs.Usage = func() {}
	c.fs.SortFlags = false
	c.flags = config.AddFlags(c.fs)
	c.fs.BoolVar(&c.version, "version", false, "print the version and exit")
	c.fs.BoolVarP(&c.help, "help", "h", false, "print this help and exit")

	// klog's verbosity flags, and only those: its log always goes to stdout,
	// one copy of each line, nothing on stderr.
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	c.fs.AddGoFlag(klogFlags.Lookup("v"))
	c.fs.AddGoFlag(klogFlags.Lookup("vmodule"))
	for name, value := range map[string]string{"logtostderr": "false", "alsologtostderr": "false", "one_output": "true", "stderrthreshold": "FATAL"} {
		_ = klogFlags.Set(name, value)
	}
	klog.SetOutput(os.Stdout)
	return c
}

func (c *commandLine) usage() string {
	return "Usage: nodeinit [flags] [--] EXECUTOR [ARG...]\n\n" +
		"nodeinit is the PID 1 of a Kubernetes node container. It runs EXECUTOR (the kubelet)\n" +
		"as the main task and the proxy (kube-proxy) as a respawned sidecar (with\n" +
		"--runtime-path, the node's container runtime too: started first, stopped last),\n" +
		"reaps every zombie, passes on every signal it can catch (TERM and INT with a\n" +
		"grace period), and exits with the executor's status.\n\nFlags:\n" +
		c.fs.FlagUsages()
}

// usageError prints one line and a hint on stderr, and returns exit code 2.
func usageError(err error) int {
	fmt.Fprintf(os.Stderr, "nodeinit: %v\n", err)
	fmt.Fprintln(os.Stderr, "Run 'nodeinit --help' for usage.")
	return exitUsage
}

func run(args []string) int {
	// TERM and INT are caught before anything else: one sent while nodeinit
	// starts is kept for the executor, not fatal to nodeinit.
	carried, err := signals.TakeCarried()
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodeinit: %v\n", err)
		return exitFailure
	}
	sigs := signals.CatchTerminating(carried)

	c := newCommandLine()
	// --help is a flag of ours, so Parse never returns pflag.ErrHelp.
	if err := c.fs.Parse(args); err != nil {
		return usageError(err)
	}
	if c.help {
		fmt.Print(c.usage())
		return 0
	}
	if c.version {
		// The platform too: an image index carries one binary per
		// architecture, and this says which one a node got.
		fmt.Println("nodeinit", version, runtime.GOOS+"/"+runtime.GOARCH)
		return 0
	}
	// Process-wide, once: opencontainers/cgroups logs through logrus.
	cgroups.RouteLibraryLogs()
	cfg, err := c.flags.Resolve(c.fs.Args())
	var fileErr *config.FileError
	switch {
	case errors.As(err, &fileErr):
		fmt.Fprintln(os.Stderr, err)
		return exitInvalidConfig
	case err != nil:
		return usageError(err)
	}
	if c.flags.WriteFlags() {
		// stdout holds the command lines only.
		for _, w := range cfg.Warnings() {
			fmt.Fprintln(os.Stderr, "nodeinit: warning:", w)
		}
		return writeFlags(&cfg)
	}
	return boot(&cfg, sigs, append(c.flags.Warnings(), cfg.Warnings()...))
}
