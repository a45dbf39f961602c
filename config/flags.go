package config

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// Flags is nodeinit's command line: a flag for every setting of Config, plus
// --config and --write-flags. Flags given on the command line override the
// config file; flags left out keep the file's value (or the default).
type Flags struct {
	fs         *pflag.FlagSet
	values     Config // Default() overwritten by the flags given
	configFile string
	writeFlags bool
	bindings   []binding
	warnings   []string
}

// binding ties a flag to its field in the file.
type binding struct {
	flag, field string
	copy        func(dst, src *Config)
}

// AddFlags defines nodeinit's flags on fs and returns the handle that merges
// them with the config file after fs.Parse. It stops fs at the first
// non-flag argument, so the executor's own flags stay the executor's:
// `nodeinit --proxy-mode=ipvs kubelet --v=2`.
func AddFlags(fs *pflag.FlagSet) *Flags {
	f := &Flags{fs: fs, values: Default()}
	fs.SetInterspersed(false)

	fs.StringVar(&f.configFile, "config", "", "read settings from this "+Kind+" `FILE` (YAML or JSON); flags given on the command line override it")
	fs.BoolVar(&f.writeFlags, "write-flags", false, "print the executor's and the proxy's final command lines, shell-quoted, and exit without starting anything")

	f.addCoreFlags()
	f.addRuntimeFlags()
	// Node configuration: what the proxy and the executor are given.
	f.addProxyFlags()
	f.addExecutorFlags()
	f.addLoggingFlags()
	f.addGracefulShutdownFlags()
	f.addContainerCheckFlags()
	add(f, fs.StringVar, func(c *Config) *string { return &c.ReadyURL }, "ready-url", "readyURL",
		"with NOTIFY_SOCKET set, report READY=1 only once this `URL` answers 200 (e.g. the kubelet's http://127.0.0.1:10248/healthz)")
	f.addMountNamespaceFlags()
	f.addCgroupFlags()
	f.addIdentityFlags()
	return f
}

// addCoreFlags defines the flags of the proxy's program, arguments and
// restarts, and the grace period of a stop.
func (f *Flags) addCoreFlags() {
	add(f, f.fs.BoolVar, func(c *Config) *bool { return &c.Proxy.Run }, "run-proxy", "proxy.run",
		"run the proxy (kube-proxy) next to the executor, restarting it when it exits")
	add(f, f.fs.StringVar, func(c *Config) *string { return &c.Proxy.Path }, "proxy-path", "proxy.path",
		"the proxy `PROGRAM`: a path, or a name looked up in the children's PATH")
	add(f, f.fs.StringArrayVar, func(c *Config) *[]string { return &c.Proxy.Args }, "proxy-arg", "proxy.args",
		"an `ARG` passed to the proxy verbatim after the ones nodeinit builds (repeat for more; replaces proxy.args of the config file)")
	add(f, f.fs.DurationVar, func(c *Config) *time.Duration { return &c.ShutdownGracePeriod.Duration }, "shutdown-grace-period", "shutdownGracePeriod",
		"how long the executor and the proxy get to exit after TERM before they are killed")
	add(f, f.fs.DurationVar, func(c *Config) *time.Duration { return &c.Proxy.RestartBackoff.Initial.Duration }, "proxy-restart-backoff", "proxy.restartBackoff.initial",
		"wait this long before restarting the proxy the first time; the wait doubles on each further exit")
	add(f, f.fs.DurationVar, func(c *Config) *time.Duration { return &c.Proxy.RestartBackoff.Max.Duration }, "proxy-restart-backoff-max", "proxy.restartBackoff.max",
		"the longest wait before restarting the proxy")
	add(f, f.fs.DurationVar, func(c *Config) *time.Duration { return &c.Proxy.RestartBackoff.Reset.Duration }, "proxy-restart-backoff-reset", "proxy.restartBackoff.reset",
		"a proxy that ran this long before exiting is restarted after the shortest wait again")
}

// addRuntimeFlags defines the flags of the container runtime, when nodeinit
// runs it.
func (f *Flags) addRuntimeFlags() {
	add(f, f.fs.StringVar, func(c *Config) *string { return &c.Runtime.Path }, "runtime-path", "runtime.path",
		"run this container runtime `PROGRAM` (containerd) as the node's: started first, the proxy and the executor once it answers on --runtime-socket, respawned with the proxy's backoff, stopped last; a path, or a name looked up in the children's PATH (empty: none, the node uses the host's runtime)")
	add(f, f.fs.StringArrayVar, func(c *Config) *[]string { return &c.Runtime.Args }, "runtime-arg", "runtime.args",
		"an `ARG` passed to the runtime verbatim (repeat for more; replaces runtime.args of the config file)")
	add(f, f.fs.StringVar, func(c *Config) *string { return &c.Runtime.Socket }, "runtime-socket", "runtime.socket",
		"the unix socket `PATH` the runtime serves the CRI on: the proxy and the executor start once a CRI Version call there succeeds")
	add(f, f.fs.DurationVar, func(c *Config) *time.Duration { return &c.Runtime.WaitTimeout.Duration }, "runtime-wait-timeout", "runtime.waitTimeout",
		"how long the runtime has to answer on --runtime-socket; past it nodeinit stops it and exits 1")
	add(f, f.fs.BoolVar, func(c *Config) *bool { return &c.Runtime.PassEndpoint }, "pass-runtime-endpoint", "runtime.passEndpoint",
		"with --runtime-path, pass the executor --container-runtime-endpoint=unix://<--runtime-socket> where neither its arguments nor its kubelet configuration name an endpoint")
}

// addProxyFlags defines the flags of what the proxy is given: its addresses,
// mode, conntrack limits and API server.
func (f *Flags) addProxyFlags() {
	add(f, f.fs.BoolVar, func(c *Config) *bool { return &c.Proxy.BindAll }, "proxy-bindall", "proxy.bindAll",
		"deprecated: passes --bind-address=0.0.0.0, which since Kubernetes 1.26 binds nothing and leaves kube-proxy to find the node's IP, as no address does; wins over --proxy-bind-address")
	add(f, f.fs.StringVar, func(c *Config) *string { return &c.Proxy.BindAddress }, "proxy-bind-address", "proxy.bindAddress",
		"kube-proxy's --bind-address: the node's primary `IP` as kube-proxy sees it (since Kubernetes 1.26 it binds nothing); default: the first address of the executor's --node-ip, if it has one")
	add(f, f.fs.Int32Var, func(c *Config) *int32 { return &c.Proxy.LogV }, "proxy-logv", "proxy.logV",
		"the proxy's log verbosity, passed as --v")
	add(f, f.fs.StringVar, func(c *Config) *string { return &c.Proxy.Mode }, "proxy-mode", "proxy.mode",
		"the proxy's `MODE`: iptables, ipvs or nftables")
	addOptional(f, func(c *Config) **int32 { return &c.Proxy.Conntrack.MaxPerCore }, parseInt32, formatInt32, "int32",
		"conntrack-max-per-core", "proxy.conntrack.maxPerCore",
		"kube-proxy's --conntrack-max-per-core: conntrack entries to allow per CPU core; unset: kube-proxy's default (32768); 0 leaves the kernel's limit alone")
	addOptional(f, func(c *Config) **int32 { return &c.Proxy.Conntrack.Min }, parseInt32, formatInt32, "int32",
		"conntrack-min", "proxy.conntrack.min",
		"kube-proxy's --conntrack-min: the least conntrack entries to allow whatever the core count; unset: kube-proxy's default (131072); 0: no floor")
	addOptional(f, func(c *Config) **Duration { return &c.Proxy.Conntrack.TCPTimeoutEstablished }, parseDuration, Duration.String, "duration",
		"conntrack-tcp-timeout-established", "proxy.conntrack.tcpTimeoutEstablished",
		"kube-proxy's --conntrack-tcp-timeout-established: idle timeout of established TCP connections in conntrack; unset: kube-proxy's default (24h); 0 leaves the kernel's timeout alone")
	add(f, f.fs.StringVar, func(c *Config) *string { return &c.Proxy.Kubeconfig }, "proxy-kubeconfig", "proxy.kubeconfig",
		"the kubeconfig `FILE` the proxy uses to reach the API server")
	add(f, f.fs.StringVar, func(c *Config) *string { return &c.Proxy.Master }, "master", "proxy.master",
		"the API server's `URL` for the proxy (overrides the kubeconfig's)")
	add(f, f.fs.StringVar, func(c *Config) *string { return &c.Proxy.HostnameOverride }, "hostname-override", "proxy.hostnameOverride",
		"the node `NAME` the proxy uses instead of the host name (lower-cased)")
}

// addExecutorFlags defines the flags of what the executor is given: its
// PATH, its cgroup root and its sizing.
func (f *Flags) addExecutorFlags() {
	add(f, f.fs.StringVar, func(c *Config) *string { return &c.PathOverride }, "path-override", "pathOverride",
		"the `PATH` for the executor and the proxy instead of nodeinit's own ($PWD/bin is appended either way)")
	add(f, f.fs.BoolVar, func(c *Config) *bool { return &c.Executor.ContainPodResources }, "contain-pod-resources", "executor.containPodResources",
		"keep pods inside this container's cgroup by passing --cgroup-root=<that cgroup> to the executor, where the kubelet can use it and the executor sets no cgroup root itself")
	add(f, f.fs.BoolVar, func(c *Config) *bool { return &c.Executor.SizeNodeToContainer }, "size-node-to-container", "executor.sizeNodeToContainer",
		"when the kubelet's cgroup root or an ancestor limits memory, CPU or pids, pass the executor --system-reserved so that the Node's allocatable fits in those limits (the kubelet's own larger systemReserved holds)")
}

// addLoggingFlags defines the flags of the children's output in rotated log
// files (--log-dir).
func (f *Flags) addLoggingFlags() {
	add(f, f.fs.StringVar, func(c *Config) *string { return &c.Logging.Dir }, "log-dir", "logging.dir",
		"write the executor's, the proxy's and the runtime's output to executor.log, proxy.log and runtime.log in this `DIR`, rotated, instead of stdout")
	addValue(f, func(c *Config) *Mebibytes { return &c.Logging.MaxSize }, "max-log-size", "logging.maxSize",
		"rotate a log file of --log-dir at this size: a quantity like 10Mi or 1Gi, or bytes; rounded to whole MiB")
	add(f, f.fs.IntVar, func(c *Config) *int { return &c.Logging.MaxBackups }, "max-log-backups", "logging.maxBackups",
		"the `COUNT` of rotated log files to keep per child (0 keeps all)")
	add(f, f.fs.IntVar, func(c *Config) *int { return &c.Logging.MaxAge }, "max-log-age", "logging.maxAge",
		"`DAYS` to keep rotated log files (0 keeps them regardless of age)")
}

// addGracefulShutdownFlags defines the flags of the kubelet's graceful node
// shutdown: the login1 bus, the pass-through, the host's shutdown.
func (f *Flags) addGracefulShutdownFlags() {
	add(f, f.fs.BoolVar, func(c *Config) *bool { return &c.GracefulNodeShutdown.Enabled }, "graceful-node-shutdown", "gracefulNodeShutdown.enabled",
		"on TERM or INT, let the kubelet drain the node's pods before it gets the signal: nodeinit serves it the login1 D-Bus API of systemd-logind (its Graceful Node Shutdown)")
	add(f, f.fs.DurationVar, func(c *Config) *time.Duration { return &c.GracefulNodeShutdown.Delay.Duration }, "graceful-node-shutdown-delay", "gracefulNodeShutdown.delay",
		"the longest the drain may take, reported to the kubelet as logind's InhibitDelayMaxUSec (0: the kubelet's shutdownGracePeriod from its --config, at least 5s)")
	add(f, f.fs.BoolVar, func(c *Config) *bool { return &c.GracefulNodeShutdown.SystemBusPassThrough }, "system-bus-pass-through", "gracefulNodeShutdown.systemBusPassThrough",
		"with --graceful-node-shutdown, pass the executor's D-Bus messages that are not for logind on to the container's own system bus, where it has one")
	add(f, f.fs.BoolVar, func(c *Config) *bool { return &c.GracefulNodeShutdown.DrainOnHostShutdown }, "drain-on-host-shutdown", "gracefulNodeShutdown.drainOnHostShutdown",
		"with --graceful-node-shutdown, where the container has the host's system bus, hold a delay lock on the host's logind and drain the node when the host shuts down (reboot, poweroff, the power button); the executor runs on until the container is stopped")
}

// addContainerCheckFlags defines the flags of the checks of the container
// and what nodeinit adjusts for them.
func (f *Flags) addContainerCheckFlags() {
	add(f, f.fs.StringSliceVar, func(c *Config) *[]string { return &c.ContainerChecks.Skip }, "skip-container-checks", "containerChecks.skip",
		"leave out these `CHECKS` of the container and what nodeinit adjusts for them, comma-separated: "+strings.Join(ContainerCheckNames, ", ")+", or all")
	add(f, f.fs.BoolVar, func(c *Config) *bool { return &c.ContainerChecks.RaiseInotifyLimits }, "raise-inotify-limits", "containerChecks.raiseInotifyLimits",
		"raise the host's fs.inotify.max_user_instances and max_user_watches to what a node needs when they are lower and writable, instead of only warning")
	add(f, f.fs.StringVar, func(c *Config) *string { return &c.ContainerChecks.IPTablesBackend }, "iptables-backend", "containerChecks.iptablesBackend",
		"the iptables `BACKEND` whose commands the executor and the proxy find first in PATH: auto (the one the network namespace's rules are in), legacy, nft, or none (PATH as it is)")
}

// addMountNamespaceFlags defines the flags of nodeinit's mount namespace and
// the propagation of /.
func (f *Flags) addMountNamespaceFlags() {
	add(f, f.fs.BoolVar, func(c *Config) *bool { return &c.MountNamespace.Private }, "private-mountns", "mountNamespace.private",
		"run in a mount namespace of its own that receives the host's mounts but does not leak its own (slave propagation)")
	add(f, f.fs.BoolVar, func(c *Config) *bool { return &c.MountNamespace.MakeRShared }, "make-rshared", "mountNamespace.makeRShared",
		"make / recursively shared, so mounts made by pods reach the host (cannot be combined with --private-mountns)")
}

// addCgroupFlags defines the flags of the cgroup nodeinit joins and what it
// does there on cgroup v2.
func (f *Flags) addCgroupFlags() {
	add(f, f.fs.StringVar, func(c *Config) *string { return &c.Cgroup.Parent }, "cgroup-parent", "cgroup.parent",
		"join this absolute `CGROUP` instead of the discovered Mesos container cgroup")
	add(f, f.fs.StringVar, func(c *Config) *string { return &c.Cgroup.MesosPrefix }, "mesos-cgroup-prefix", "cgroup.mesosPrefix",
		"the Mesos agent's --cgroups_root `ROOT`: a Mesos containerizer's container is in /ROOT/<id>, a nested one in /ROOT/<parent>/mesos/<child>")
	add(f, f.fs.BoolVar, func(c *Config) *bool { return &c.Cgroup.Require }, "require-cgroup", "cgroup.require",
		"fail when the container's cgroup cannot be found or joined, or cannot be handed to the executor as its --cgroup-root, instead of carrying on with a warning")
	f.fs.Var(autoBool{&f.values.Cgroup.V2Evacuate}, "cgroup-v2-evacuate",
		"on cgroup v2, move every process of the cgroup namespace's root into /init and enable all controllers in the root, so the kubelet can create pod cgroups: true, false or auto (true when nodeinit is PID 1 at the root of a v2 cgroup namespace)")
	f.fs.Lookup("cgroup-v2-evacuate").NoOptDefVal = "true"
	bind(f, "cgroup-v2-evacuate", "cgroup.v2Evacuate", func(c *Config) **bool { return &c.Cgroup.V2Evacuate })
	add(f, f.fs.StringVar, func(c *Config) *string { return &c.Cgroup.V2Leaf }, "cgroup-v2-leaf", "cgroup.v2Leaf",
		"the `NAME` of the leaf below the joined cgroup that nodeinit uses on cgroup v2 when that cgroup enables controllers for its children, or (on a pure v2 host) offers any")
}

// addIdentityFlags defines the flags of the node's own machine-id and
// product_uuid.
func (f *Flags) addIdentityFlags() {
	add(f, f.fs.BoolVar, func(c *Config) *bool { return &c.Identity.MachineID }, "node-machine-id", "identity.machineID",
		"when /etc/machine-id is missing, empty, uninitialized or --image-machine-id, bind-mount a machine-id of the node's own over it: the host's when nodeinit shares the host's pid namespace, else one generated once and kept in --identity-dir")
	add(f, f.fs.StringVar, func(c *Config) *string { return &c.Identity.ImageMachineID }, "image-machine-id", "identity.imageMachineID",
		"the machine-`ID` baked into the node image, shared by every container of it: replaced like an uninitialized one")
	add(f, f.fs.StringVar, func(c *Config) *string { return &c.Identity.Dir }, "identity-dir", "identity.dir",
		"the `DIR` that keeps the node's generated machine-id and product_uuid across restarts; default: nodeinit/ in the kubelet's --root-dir")
	add(f, f.fs.BoolVar, func(c *Config) *bool { return &c.Identity.ProductUUID }, "node-product-uuid", "identity.productUUID",
		"bind-mount a product_uuid of the node's own (generated once, kept in --identity-dir) over /sys/class/dmi/id/product_uuid, for several nodes on one host")
}

// add defines a flag with a pflag XxxVar function, its default taken from Default().
func add[T any](f *Flags, define func(p *T, name string, value T, usage string), field func(*Config) *T, flag, path, usage string) {
	p := field(&f.values)
	define(p, flag, *p, usage)
	bind(f, flag, path, field)
}

// addValue defines a flag whose type is its own pflag.Value.
func addValue[T any, P interface {
	*T
	pflag.Value
}](f *Flags, field func(*Config) *T, flag, path, usage string) {
	f.fs.Var(P(field(&f.values)), flag, usage)
	bind(f, flag, path, field)
}

// addOptional defines a flag for a setting that may be left unset (a nil
// pointer), which differs from every value it can be set to, 0 included.
func addOptional[T any](f *Flags, field func(*Config) **T, parse func(string) (T, error), format func(T) string, typ, flag, path, usage string) {
	f.fs.Var(optional[T]{field(&f.values), parse, format, typ}, flag, usage)
	bind(f, flag, path, field)
}

func bind[T any](f *Flags, flag, path string, field func(*Config) *T) {
	f.bindings = append(f.bindings, binding{flag, path, func(dst, src *Config) { *field(dst) = *field(src) }})
}

// Warnings are what Resolve found worth telling the operator about a usable
// configuration, one line each, for the log.
func (f *Flags) Warnings() []string { return f.warnings }

// WriteFlags reports whether --write-flags was given: print the command
// lines and exit 0 without touching namespaces or cgroups.
func (f *Flags) WriteFlags() bool { return f.writeFlags }

// Resolve builds the final Config after fs.Parse: the --config file (if
// any) over the defaults, the flags given on the command line over the file,
// and args (fs.Args(): EXECUTOR [ARG...]) over the file's executor. If fs
// also holds klog's -v and --vmodule, the file's logging.v and
// logging.vmodule are applied to them unless given on the command line.
//
// It returns a *UsageError (exit 2) for a bad flag value, a missing EXECUTOR
// or flags that exclude each other, and a *FileError (exit 255) for a config
// file that cannot be read or has bad fields; otherwise the Config is valid.
func (f *Flags) Resolve(args []string) (Config, error) {
	given := map[string]bool{} // fields set on the command line
	for _, b := range f.bindings {
		if f.fs.Changed(b.flag) {
			given[b.field] = true
		}
	}
	withArgs := func(c *Config) {
		if len(args) > 0 {
			c.Executor.Path, c.Executor.Args = args[0], append([]string(nil), args[1:]...)
		}
	}
	if len(args) > 0 {
		given["executor.path"], given["executor.args"] = true, true
	}

	// A bad flag is a usage error whatever the file holds. Checks between two
	// fields wait for the merge: the file may hold the other one.
	flagsOnly := f.values
	withArgs(&flagsOnly)
	var single []FieldError
	for _, e := range flagsOnly.Validate() {
		if e.related == "" {
			single = append(single, e)
		}
	}
	if err := f.usageError(single, given); err != nil {
		return Config{}, err
	}

	c := Default()
	if f.configFile != "" {
		var (
			warning string
			err     error
		)
		if c, warning, err = load(f.configFile); err != nil {
			return Config{}, err
		}
		if warning != "" {
			f.warnings = append(f.warnings, warning)
		}
	}
	for _, b := range f.bindings {
		if given[b.field] {
			b.copy(&c, &f.values)
		}
	}
	withArgs(&c)

	errs := append(f.syncKlog(&c), c.Validate()...)
	if err := f.usageError(errs, given); err != nil {
		return Config{}, err
	}
	if len(errs) > 0 {
		if f.configFile == "" {
			return Config{}, &UsageError{errs[0].Error()}
		}
		return Config{}, &FileError{File: f.configFile, Fields: errs}
	}
	if c.Executor.Path == "" {
		return Config{}, &UsageError{"no EXECUTOR given: name the program to run after nodeinit's flags, or as executor.path in the --config file"}
	}
	return c, nil
}

// syncKlog makes klog's flags, when fs has them, and logging.v/vmodule agree:
// the command line wins, else the file's value is set on the flag.
func (f *Flags) syncKlog(c *Config) []FieldError {
	var errs []FieldError
	def := Default()
	for _, k := range []struct {
		flag, field string
		file, def   string
		set         func(string) error
	}{
		{"v", "logging.v", strconv.Itoa(int(c.Logging.V)), strconv.Itoa(int(def.Logging.V)), func(s string) error {
			v, err := strconv.ParseInt(s, 10, 32)
			c.Logging.V = int32(v)
			return err
		}},
		{"vmodule", "logging.vmodule", c.Logging.VModule, def.Logging.VModule, func(s string) error { c.Logging.VModule = s; return nil }},
	} {
		fl := f.fs.Lookup(k.flag)
		switch {
		case fl == nil:
		case f.fs.Changed(k.flag):
			if err := k.set(fl.Value.String()); err != nil {
				errs = append(errs, FieldError{Type: ErrorTypeInvalid, Field: k.field, BadValue: fl.Value.String(), Detail: err.Error()})
			}
		case k.file != k.def:
			if err := f.fs.Set(k.flag, k.file); err != nil {
				errs = append(errs, FieldError{Type: ErrorTypeInvalid, Field: k.field, BadValue: k.file, Detail: err.Error()})
			}
		}
	}
	return errs
}

// usageError turns the first error about a field given on the command line
// into a one-line usage error that names the flag.
func (f *Flags) usageError(errs []FieldError, given map[string]bool) error {
	for _, e := range errs {
		field := e.Field
		if i := strings.IndexByte(field, '['); i >= 0 {
			field = field[:i]
		}
		if !given[field] && (e.related == "" || !given[e.related]) {
			continue
		}
		if field == "executor.path" || field == "executor.args" {
			return &UsageError{"invalid EXECUTOR command: " + e.Error()}
		}
		flag, detail := f.flagOf(field), f.flagNames(e.Detail)
		if !given[field] {
			// The flag given is the other one: blame it, and show the value
			// it conflicts with.
			detail = fmt.Sprintf("--%s (%v) %s", flag, e.BadValue, detail)
			flag = f.flagOf(e.related)
		}
		value := strconv.Quote(f.fs.Lookup(flag).Value.String())
		if e.BadValue != nil && given[field] {
			value = renderValue(e.BadValue)
		}
		return &UsageError{fmt.Sprintf("invalid argument %s for %q flag: %s", value, "--"+flag, detail)}
	}
	return nil
}

func (f *Flags) flagOf(field string) string {
	for _, b := range f.bindings {
		if b.field == field {
			return b.flag
		}
	}
	return ""
}

// flagNames rewrites the field paths in a detail message as the flags that
// set them, longest first so no path is cut by a shorter one.
func (f *Flags) flagNames(detail string) string {
	bs := append([]binding(nil), f.bindings...)
	sort.Slice(bs, func(i, j int) bool { return len(bs[i].field) > len(bs[j].field) })
	for _, b := range bs {
		detail = strings.ReplaceAll(detail, b.field, "--"+b.flag)
	}
	return detail
}

// autoBool is a flag for a *bool setting where nil means "decide at run
// time".
type autoBool struct{ p **bool }

func (a autoBool) String() string {
	if a.p == nil || *a.p == nil {
		return "auto"
	}
	return strconv.FormatBool(**a.p)
}

func (a autoBool) Set(s string) error {
	if s == "auto" {
		*a.p = nil
		return nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("must be true, false or auto")
	}
	*a.p = &b
	return nil
}

func (a autoBool) Type() string { return "bool" }

// optional is the flag value of a setting held as a pointer: nil until the
// flag is given, and shown as empty in the help.
type optional[T any] struct {
	p      **T
	parse  func(string) (T, error)
	format func(T) string
	typ    string
}

func (o optional[T]) String() string {
	if o.p == nil || *o.p == nil {
		return ""
	}
	return o.format(**o.p)
}

func (o optional[T]) Set(s string) error {
	v, err := o.parse(s)
	if err != nil {
		return err
	}
	*o.p = &v
	return nil
}

func (o optional[T]) Type() string { return o.typ }

func parseInt32(s string) (int32, error) {
	v, err := strconv.ParseInt(s, 0, 32)
	if err != nil {
		return 0, errors.New("must be a whole number that fits in 32 bits")
	}
	return int32(v), nil
}

func formatInt32(v int32) string { return strconv.Itoa(int(v)) }

func parseDuration(s string) (Duration, error) {
	v, err := time.ParseDuration(s)
	if err != nil {
		return Duration{}, errors.New(`must be a duration like "24h" or "1h30m"`)
	}
	return Duration{v}, nil
}
