package config

import (
	"errors"
	goflag "flag"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
)

// parse runs the command line the way main does and returns Resolve's result.
func parse(t *testing.T, argv ...string) (Config, error) {
	t.Helper()
	fs := pflag.NewFlagSet("nodeinit", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := AddFlags(fs)
	if err := fs.Parse(argv); err != nil {
		t.Fatalf("Parse(%q): %v", argv, err)
	}
	return f.Resolve(fs.Args())
}

func TestFlagsHaveTheContractsNamesAndDefaults(t *testing.T) {
	want := map[string]string{
		"config": "", "write-flags": "false",
		"run-proxy": "true", "proxy-path": "kube-proxy", "proxy-arg": "[]", "shutdown-grace-period": "10s",
		"proxy-restart-backoff": "1s", "proxy-restart-backoff-max": "30s", "proxy-restart-backoff-reset": "1m0s",
		"proxy-bindall": "false", "proxy-bind-address": "", "proxy-logv": "0", "proxy-mode": "iptables",
		"conntrack-max-per-core": "", "conntrack-min": "", "conntrack-tcp-timeout-established": "",
		"proxy-kubeconfig": "", "master": "", "hostname-override": "", "path-override": "",
		"contain-pod-resources": "true", "size-node-to-container": "true", "log-dir": "", "max-log-size": "10Mi", "max-log-backups": "5",
		"max-log-age": "7", "ready-url": "", "graceful-node-shutdown": "false", "graceful-node-shutdown-delay": "0s",
		"system-bus-pass-through": "true", "drain-on-host-shutdown": "true",
		"skip-container-checks": "[]", "raise-inotify-limits": "false", "iptables-backend": "auto",
		"private-mountns": "false", "make-rshared": "false", "cgroup-parent": "", "mesos-cgroup-prefix": "mesos",
		"require-cgroup": "false", "cgroup-v2-evacuate": "auto", "cgroup-v2-leaf": "nodeinit",
		"node-machine-id": "true", "image-machine-id": "", "identity-dir": "", "node-product-uuid": "false",
		"runtime-path": "", "runtime-arg": "[]", "runtime-socket": "/run/containerd/containerd.sock", "runtime-wait-timeout": "1m0s",
		"pass-runtime-endpoint": "true",
	}
	fs := pflag.NewFlagSet("nodeinit", pflag.ContinueOnError)
	AddFlags(fs)
	got := map[string]string{}
	fs.VisitAll(func(fl *pflag.Flag) {
		got[fl.Name] = fl.DefValue
		if len(fl.Usage) < 20 {
			t.Errorf("--%s: help %q says too little for an operator", fl.Name, fl.Usage)
		}
	})
	if !reflect.DeepEqual(got, want) {
		t.Errorf("flags and defaults:\n got %v\nwant %v", got, want)
	}
}

func TestNoFlagsGiveTheDefaults(t *testing.T) {
	got, err := parse(t, "kubelet")
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Executor.Path = "kubelet"
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

func TestEveryFlagSetsItsField(t *testing.T) {
	got, err := parse(t,
		"--run-proxy=false", "--proxy-path=/opt/kube-proxy", "--proxy-arg=--a", "--proxy-arg", "-b c",
		"--shutdown-grace-period=1m", "--proxy-restart-backoff=2s", "--proxy-restart-backoff-max=40s",
		"--proxy-restart-backoff-reset=2m", "--proxy-bindall", "--proxy-bind-address=10.1.2.3", "--proxy-logv=4",
		"--proxy-mode=nftables", "--conntrack-max-per-core=100", "--conntrack-min=0",
		"--conntrack-tcp-timeout-established=24h", "--proxy-kubeconfig=/k", "--master=https://m:6443",
		"--hostname-override=Node-A", "--path-override=/p", "--contain-pod-resources=false", "--size-node-to-container=false", "--log-dir=/l",
		"--max-log-size=1.5Gi", "--max-log-backups=0", "--max-log-age=30", "--ready-url=http://127.0.0.1:10248/healthz",
		"--skip-container-checks=swap,kmsg", "--raise-inotify-limits", "--iptables-backend=legacy",
		"--system-bus-pass-through=false", "--drain-on-host-shutdown=false", "--make-rshared", "--cgroup-parent=/x", "--mesos-cgroup-prefix=mesos-agent", "--require-cgroup",
		"--cgroup-v2-evacuate", "--cgroup-v2-leaf=init", "--node-machine-id=false",
		"--image-machine-id=0123456789abcdef0123456789abcdef", "--identity-dir=/id", "--node-product-uuid",
		"--runtime-path=/bin/containerd", "--runtime-arg=--config", "--runtime-arg", "/etc/c.toml", "--runtime-socket=/run/c.sock",
		"--runtime-wait-timeout=5s", "--pass-runtime-endpoint=false", "--", "/bin/kubelet", "--v=2")
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	want := Config{
		Kind: Kind, APIVersion: APIVersion,
		Executor: Executor{Path: "/bin/kubelet", Args: []string{"--v=2"}},
		Proxy: Proxy{Run: false, Path: "/opt/kube-proxy", Args: []string{"--a", "-b c"}, Mode: "nftables", BindAll: true,
			BindAddress: "10.1.2.3", LogV: 4, Conntrack: Conntrack{i32(100), i32(0), &Duration{24 * time.Hour}}, Kubeconfig: "/k",
			Master: "https://m:6443", HostnameOverride: "Node-A",
			RestartBackoff: Backoff{Duration{2 * time.Second}, Duration{40 * time.Second}, Duration{2 * time.Minute}}},
		Runtime:             Runtime{Path: "/bin/containerd", Args: []string{"--config", "/etc/c.toml"}, Socket: "/run/c.sock", WaitTimeout: Duration{5 * time.Second}},
		ShutdownGracePeriod: Duration{time.Minute},
		Logging:             Logging{Dir: "/l", MaxSize: 1536, MaxBackups: 0, MaxAge: 30},
		MountNamespace:      MountNamespace{MakeRShared: true},
		Cgroup:              Cgroup{Parent: "/x", MesosPrefix: "mesos-agent", Require: true, V2Evacuate: &yes, V2Leaf: "init"},
		ContainerChecks:     ContainerChecks{Skip: []string{"swap", "kmsg"}, RaiseInotifyLimits: true, IPTablesBackend: "legacy"},
		Identity:            Identity{ImageMachineID: "0123456789abcdef0123456789abcdef", Dir: "/id", ProductUUID: true},
		ReadyURL:            "http://127.0.0.1:10248/healthz",
		PathOverride:        "/p",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestFlagsOverrideTheFileAndTheFileOverridesDefaults(t *testing.T) {
	p := writeFile(t, "c.yaml", header+`
executor:
  path: /usr/bin/kubelet
  args: [--node-ip=10.0.0.5]
proxy:
  mode: ipvs
  args: [--from-file]
  restartBackoff:
    max: 2m
shutdownGracePeriod: 20s
cgroup:
  v2Evacuate: false
`)
	got, err := parse(t, "--config", p, "--proxy-mode=nftables", "--proxy-arg=--from-flag", "--cgroup-v2-evacuate=auto",
		"--proxy-restart-backoff=1m")
	if err != nil {
		t.Fatal(err)
	}
	if got.Proxy.Mode != "nftables" || !reflect.DeepEqual(got.Proxy.Args, []string{"--from-flag"}) || got.Cgroup.V2Evacuate != nil {
		t.Errorf("flags did not override the file: mode %q, args %q, v2Evacuate %v", got.Proxy.Mode, got.Proxy.Args, got.Cgroup.V2Evacuate)
	}
	// A max from the file and an initial from a flag are checked together.
	if got.Proxy.RestartBackoff.Initial.Duration != time.Minute || got.Proxy.RestartBackoff.Max.Duration != 2*time.Minute {
		t.Errorf("backoff: %+v", got.Proxy.RestartBackoff)
	}
	if got.ShutdownGracePeriod.Duration != 20*time.Second || got.Executor.Path != "/usr/bin/kubelet" ||
		!reflect.DeepEqual(got.Executor.Args, []string{"--node-ip=10.0.0.5"}) {
		t.Errorf("flags not given changed the file's values: %+v", got)
	}

	// EXECUTOR ARG... replaces the file's executor, arguments included; nodeinit's
	// flags end at the first argument that is not one.
	got, err = parse(t, "--config="+p, "--proxy-mode=iptables", "kubelet", "--proxy-mode=ipvs")
	if err != nil {
		t.Fatal(err)
	}
	if got.Executor.Path != "kubelet" || !reflect.DeepEqual(got.Executor.Args, []string{"--proxy-mode=ipvs"}) || got.Proxy.Mode != "iptables" {
		t.Errorf("executor %q %q, proxy mode %q", got.Executor.Path, got.Executor.Args, got.Proxy.Mode)
	}

	// A bad value in the file is fine when a flag replaces it.
	bad := writeFile(t, "bad.yaml", header+"executor: {path: kubelet}\nproxy: {mode: userspace}\n")
	if _, err := parse(t, "--config="+bad, "--proxy-mode=ipvs"); err != nil {
		t.Errorf("flag over a bad file value: %v", err)
	}
}

func TestBadCommandLinesAreUsageErrors(t *testing.T) {
	withRShared := writeFile(t, "rshared.yaml", header+"mountNamespace: {makeRShared: true}\nproxy: {restartBackoff: {max: 5s}}\n")
	badFile := writeFile(t, "bad.yaml", header+"proxy: {mode: userspace}\n")
	withKubeconfig := writeFile(t, "kubeconfig.yaml", header+"proxy: {kubeconfig: /etc/kubernetes/proxy.conf}\n")
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"--proxy-mode=userspace", "kubelet"},
			`invalid argument "userspace" for "--proxy-mode" flag: supported values: "iptables", "ipvs", "nftables"`},
		{[]string{"--shutdown-grace-period=-1s", "kubelet"},
			`invalid argument "-1s" for "--shutdown-grace-period" flag: must be non-negative`},
		{[]string{"--private-mountns", "--make-rshared", "kubelet"},
			`invalid argument true for "--make-rshared" flag: may not be combined with --private-mountns: a private namespace cannot share its mounts`},
		{[]string{"--config=" + withRShared, "--private-mountns", "kubelet"},
			`invalid argument "true" for "--private-mountns" flag: --make-rshared (true) may not be combined with --private-mountns: a private namespace cannot share its mounts`},
		{[]string{"--config=" + withRShared, "--proxy-restart-backoff=10s", "kubelet"},
			`invalid argument "10s" for "--proxy-restart-backoff" flag: --proxy-restart-backoff-max (5s) must not be less than --proxy-restart-backoff (10s)`},
		{[]string{"--proxy-restart-backoff-max=500ms", "kubelet"},
			`invalid argument "500ms" for "--proxy-restart-backoff-max" flag: must not be less than --proxy-restart-backoff (1s)`},
		{[]string{"--proxy-path=", "kubelet"},
			`invalid argument "" for "--proxy-path" flag: the proxy is run (--run-proxy), so its program must be named`},
		{[]string{"--proxy-bind-address=node-1", "kubelet"},
			`invalid argument "node-1" for "--proxy-bind-address" flag: must be an IP address like 10.0.0.5 or fd00::5`},
		{[]string{"--hostname-override=node_1", "kubelet"},
			`invalid argument "node_1" for "--hostname-override" flag: must be a node name: DNS labels of letters, digits and '-', joined by '.', at most 253 characters`},
		{[]string{"--proxy-logv=-2", "kubelet"}, `invalid argument -2 for "--proxy-logv" flag: must be non-negative`},
		{[]string{"--ready-url=localhost:10248", "kubelet"},
			`invalid argument "localhost:10248" for "--ready-url" flag: must be an http URL (no TLS: the kubelet's healthz is plain HTTP) like http://127.0.0.1:10248/healthz`},
		{[]string{"--cgroup-v2-leaf=a/b", "kubelet"}, `invalid argument "a/b" for "--cgroup-v2-leaf" flag: must be a single cgroup directory name`},
		{[]string{"--cgroup-parent=node", "kubelet"},
			`invalid argument "node" for "--cgroup-parent" flag: must be an absolute cgroup path such as "/kubepods/node", without "." or ".." elements`},
		{[]string{"--mesos-cgroup-prefix=/", "kubelet"},
			`invalid argument "/" for "--mesos-cgroup-prefix" flag: must be the Mesos agent's --cgroups_root, a cgroup path such as "mesos" or "system.slice/mesos", without empty, "." or ".." elements`},
		{nil, "no EXECUTOR given: name the program to run after nodeinit's flags, or as executor.path in the --config file"},
		{[]string{"--proxy-mode=userspace"}, `invalid argument "userspace" for "--proxy-mode" flag: supported values: "iptables", "ipvs", "nftables"`},
		{[]string{"--proxy-arg=--config=/etc/kube-proxy.yaml", "--proxy-mode=nftables", "kubelet"},
			`invalid argument "nftables" for "--proxy-mode" flag: ignored by kube-proxy, which takes its settings from --config=/etc/kube-proxy.yaml (in --proxy-arg): set it in that KubeProxyConfiguration instead`},
		{[]string{"--proxy-arg=--config", "--proxy-arg=/k.yaml", "--conntrack-max-per-core=0", "kubelet"},
			`invalid argument 0 for "--conntrack-max-per-core" flag: ignored by kube-proxy, which takes its settings from --config=/k.yaml (in --proxy-arg): set it in that KubeProxyConfiguration instead`},
		{[]string{"--config=" + withKubeconfig, "--proxy-arg=--config=/k.yaml", "kubelet"},
			`invalid argument "[--config=/k.yaml]" for "--proxy-arg" flag: --proxy-kubeconfig (/etc/kubernetes/proxy.conf) ignored by kube-proxy, which takes its settings from --config=/k.yaml (in --proxy-arg): set it in that KubeProxyConfiguration instead`},
		{[]string{"--runtime-path=containerd", "--runtime-socket=run/c.sock", "kubelet"},
			`invalid argument "run/c.sock" for "--runtime-socket" flag: must be the absolute path of a unix socket, like /run/containerd/containerd.sock (without unix://)`},
		{[]string{"--runtime-path=containerd", "--runtime-wait-timeout=0s", "kubelet"},
			`invalid argument "0s" for "--runtime-wait-timeout" flag: must be positive`},
		{[]string{"--runtime-arg=--config=/c.toml", "kubelet"},
			`invalid argument ["--config=/c.toml"] for "--runtime-arg" flag: given without the runtime to run (--runtime-path)`},
		// A bad flag is reported before the file is even read.
		{[]string{"--config=" + badFile, "--proxy-mode=ipvs", "--conntrack-min=-1", "kubelet"},
			`invalid argument -1 for "--conntrack-min" flag: must be non-negative`},
	} {
		_, err := parse(t, tc.argv...)
		var ue *UsageError
		if !errors.As(err, &ue) || err.Error() != tc.want {
			t.Errorf("%q:\n got %T %v\nwant UsageError %s", tc.argv, err, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: usage error spans lines", tc.argv)
		}
	}
}

func TestBadFlagSyntaxFailsParse(t *testing.T) {
	for _, tc := range []struct{ arg, want string }{
		{"--max-log-size=10MB", `invalid argument "10MB" for "--max-log-size" flag: must be a quantity like "10Mi", "1.5Gi", "500M" or plain bytes`},
		{"--max-log-size=-1Mi", `invalid argument "-1Mi" for "--max-log-size" flag: must not be negative`},
		{"--cgroup-v2-evacuate=maybe", `invalid argument "maybe" for "--cgroup-v2-evacuate" flag: must be true, false or auto`},
		{"--conntrack-min=many", `invalid argument "many" for "--conntrack-min" flag: must be a whole number that fits in 32 bits`},
		{"--conntrack-tcp-timeout-established=1d", `invalid argument "1d" for "--conntrack-tcp-timeout-established" flag: must be a duration like "24h" or "1h30m"`},
		{"--shutdown-grace-period=10", `invalid argument "10" for "--shutdown-grace-period" flag: must be a duration like "30s" or "5m"`},
		{"--no-such-flag", "unknown flag: --no-such-flag"},
	} {
		fs := pflag.NewFlagSet("nodeinit", pflag.ContinueOnError)
		fs.SetOutput(io.Discard)
		AddFlags(fs)
		if err := fs.Parse([]string{tc.arg, "kubelet"}); err == nil || err.Error() != tc.want {
			t.Errorf("Parse(%s): %v; want %s", tc.arg, err, tc.want)
		}
	}
}

func TestBadFilesAreFileErrors(t *testing.T) {
	p := writeFile(t, "c.yaml", header+"executor: {path: kubelet}\nproxy: {mode: userspace}\nshutdownGracePeriod: -1s\n")
	_, err := parse(t, "--config="+p)
	var fe *FileError
	want := "Invalid NodeInitConfig " + p + `
  proxy.mode: Unsupported value: "userspace": supported values: "iptables", "ipvs", "nftables"
  shutdownGracePeriod: Invalid value: "-1s": must be non-negative`
	if !errors.As(err, &fe) || err.Error() != want {
		t.Errorf("got %T:\n%v\nwant FileError:\n%s", err, err, want)
	}

	// Arguments without a program are the file's fault, not a missing EXECUTOR.
	p = writeFile(t, "args.yaml", header+"executor: {args: [--v=2]}\n")
	if _, err := parse(t, "--config="+p); !errors.As(err, &fe) ||
		err.Error() != "Invalid NodeInitConfig "+p+"\n  executor.path: Required value: executor.args are given without the program to run" {
		t.Errorf("file with executor.args only: %T %v", err, err)
	}

	// The runtime's settings are checked with a runtime to run.
	p = writeFile(t, "runtime.yaml", header+"executor: {path: kubelet}\nruntime: {path: containerd, socket: containerd.sock, waitTimeout: 0s}\n")
	if _, err := parse(t, "--config="+p); !errors.As(err, &fe) || err.Error() != "Invalid NodeInitConfig "+p+`
  runtime.socket: Invalid value: "containerd.sock": must be the absolute path of a unix socket, like /run/containerd/containerd.sock (without unix://)
  runtime.waitTimeout: Invalid value: "0s": must be positive` {
		t.Errorf("file with a bad runtime: %T %v", err, err)
	}

	// Without kind and apiVersion the file is not a NodeInitConfig.
	p = writeFile(t, "nokind.yaml", "executor: {path: kubelet}\n")
	if _, err := parse(t, "--config="+p); !errors.As(err, &fe) || !strings.Contains(err.Error(), "  kind: Required value") {
		t.Errorf("file without kind: %v", err)
	}

	_, err = parse(t, "--config=/nonexistent/nodeinit.yaml", "kubelet")
	if !errors.As(err, &fe) || err.Error() != "cannot read config file /nonexistent/nodeinit.yaml: no such file or directory" {
		t.Errorf("missing file: %T %v", err, err)
	}
}

func TestTheFilesVerbosityReachesKlog(t *testing.T) {
	newFlags := func() (*pflag.FlagSet, *Flags) {
		gofs := goflag.NewFlagSet("klog", goflag.ContinueOnError)
		klog.InitFlags(gofs)
		fs := pflag.NewFlagSet("nodeinit", pflag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f := AddFlags(fs)
		fs.AddGoFlagSet(gofs)
		return fs, f
	}
	t.Cleanup(func() {
		gofs := goflag.NewFlagSet("reset", goflag.ContinueOnError)
		klog.InitFlags(gofs)
		_ = gofs.Set("v", "0")
		_ = gofs.Set("vmodule", "")
	})

	p := writeFile(t, "c.yaml", header+"logging: {v: 3, vmodule: 'supervisor=5'}\n")
	fs, f := newFlags()
	if err := fs.Parse([]string{"--config", p, "kubelet"}); err != nil {
		t.Fatal(err)
	}
	c, err := f.Resolve(fs.Args())
	if err != nil {
		t.Fatal(err)
	}
	if !klog.V(3).Enabled() || klog.V(4).Enabled() || c.Logging.V != 3 || fs.Lookup("vmodule").Value.String() != "supervisor=5" {
		t.Errorf("file's logging.v 3 and vmodule: klog V(3)=%v V(4)=%v, config v %d, vmodule %q",
			klog.V(3).Enabled(), klog.V(4).Enabled(), c.Logging.V, fs.Lookup("vmodule").Value)
	}

	fs, f = newFlags()
	if err := fs.Parse([]string{"--config", p, "-v", "1", "kubelet"}); err != nil {
		t.Fatal(err)
	}
	if c, err = f.Resolve(fs.Args()); err != nil || c.Logging.V != 1 || klog.V(2).Enabled() || !klog.V(1).Enabled() {
		t.Errorf("-v 1 over the file's 3: config v %d, klog V(2)=%v, err %v", c.Logging.V, klog.V(2).Enabled(), err)
	}

	bad := writeFile(t, "bad.yaml", header+"logging: {vmodule: 'x=y'}\n")
	fs, f = newFlags()
	if err := fs.Parse([]string{"--config", bad, "kubelet"}); err != nil {
		t.Fatal(err)
	}
	var fe *FileError
	if _, err := f.Resolve(fs.Args()); !errors.As(err, &fe) || !strings.Contains(err.Error(), `  logging.vmodule: Invalid value: "x=y": `) {
		t.Errorf("bad vmodule in the file: %v", err)
	}
}
