// Package config owns nodeinit's settings: the NodeInitConfig file format,
// the command-line flags that override it, their defaults, and validation.
// Every other package reads its settings from a Config built here.
package config

import (
	"encoding/json"
	"fmt"
	"time"
)

// Kind and APIVersion identify a NodeInitConfig file.
const (
	Kind       = "NodeInitConfig"
	APIVersion = "nodeinit/v1alpha1"
)

// Proxy modes kube-proxy still has; userspace was removed in Kubernetes 1.26.
var proxyModes = []string{"iptables", "ipvs", "nftables"}

// Config is every setting of nodeinit. Its JSON names are the file format.
type Config struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`

	// Executor is the main task (the kubelet or a kubelet-executor).
	Executor Executor `json:"executor"`
	// Proxy is the sidecar (kube-proxy), respawned with backoff.
	Proxy Proxy `json:"proxy"`
	// Runtime is the node's container runtime (containerd), when nodeinit
	// runs it: off by default, the node using the host's.
	Runtime Runtime `json:"runtime"`
	// ShutdownGracePeriod is how long the children get after TERM before KILL.
	ShutdownGracePeriod Duration       `json:"shutdownGracePeriod"`
	Logging             Logging        `json:"logging"`
	MountNamespace      MountNamespace `json:"mountNamespace"`
	Cgroup              Cgroup         `json:"cgroup"`
	// GracefulNodeShutdown drains the node's pods when nodeinit is stopped.
	GracefulNodeShutdown GracefulNodeShutdown `json:"gracefulNodeShutdown"`
	// ContainerChecks are what nodeinit checks of its container before the
	// first fork, and adjusts for what the container lacks or restricts.
	ContainerChecks ContainerChecks `json:"containerChecks"`
	// Identity gives the node a machine-id (and product_uuid) of its own.
	Identity Identity `json:"identity"`
	// ReadyURL, when set, must answer 200 before READY=1 is sent to systemd.
	ReadyURL string `json:"readyURL,omitempty"`
	// PathOverride replaces PATH in the children's environment.
	PathOverride string `json:"pathOverride,omitempty"`
}

// Executor is the executor's command line.
type Executor struct {
	Path string   `json:"path,omitempty"`
	Args []string `json:"args,omitempty"`
	// ContainPodResources passes --cgroup-root=<the container's cgroup>
	// where the kubelet can use that cgroup and the executor's own
	// arguments and kubelet configuration set no cgroup root.
	ContainPodResources bool `json:"containPodResources"`
	// SizeNodeToContainer passes --system-reserved so that the Node's
	// allocatable memory, cpu and pids fit the limits of the kubelet's
	// cgroup root and its ancestors, which the kubelet does not read; the
	// kubelet's own larger systemReserved holds.
	SizeNodeToContainer bool `json:"sizeNodeToContainer"`
}

// Proxy is how kube-proxy is run and which flags nodeinit passes to it.
type Proxy struct {
	Run  bool   `json:"run"`
	Path string `json:"path"`
	// Args are appended verbatim after the flags nodeinit assembles.
	Args []string `json:"args,omitempty"`
	Mode string   `json:"mode"`
	// BindAll passes --bind-address=0.0.0.0. Deprecated: since Kubernetes
	// 1.26 --bind-address binds nothing; it only overrides the node's
	// primary IP, and 0.0.0.0 leaves kube-proxy to find it, as no flag does.
	BindAll bool `json:"bindAll"`
	// BindAddress is kube-proxy's --bind-address: the node's primary IP as
	// kube-proxy sees it. Empty takes the executor's --node-ip.
	BindAddress      string    `json:"bindAddress,omitempty"`
	LogV             int32     `json:"logV"`
	Conntrack        Conntrack `json:"conntrack"`
	Kubeconfig       string    `json:"kubeconfig,omitempty"`
	Master           string    `json:"master,omitempty"`
	HostnameOverride string    `json:"hostnameOverride,omitempty"`
	RestartBackoff   Backoff   `json:"restartBackoff"`
}

// Runtime is the node's container runtime as a task of nodeinit's: started
// first, waited for on its socket before the proxy and the executor start,
// respawned with the proxy's backoff settings (a sequence of its own), and
// stopped last (docs/runtime.md).
type Runtime struct {
	// Path is the runtime program: a path, or a name looked up in the
	// children's PATH. Empty: nodeinit runs no runtime.
	Path string `json:"path,omitempty"`
	// Args are the runtime's arguments, verbatim.
	Args []string `json:"args,omitempty"`
	// Socket is the unix socket the runtime serves the CRI on: the proxy
	// and the executor start once a CRI Version call there succeeds.
	Socket string `json:"socket"`
	// WaitTimeout bounds that wait: past it nodeinit stops the runtime
	// and exits 1.
	WaitTimeout Duration `json:"waitTimeout"`
	// PassEndpoint passes the executor
	// --container-runtime-endpoint=unix://<Socket> where neither its
	// arguments nor its kubelet configuration name an endpoint.
	PassEndpoint bool `json:"passEndpoint"`
}

// DefaultRuntimeSocket is containerd's own default address.
const DefaultRuntimeSocket = "/run/containerd/containerd.sock"

// Conntrack is what nodeinit tells kube-proxy about the kernel's connection
// tracking. A field left out (nil) is not passed, so kube-proxy applies its
// own default (32768 entries per core, at least 131072, 24h); a field set
// is passed as it is, and 0 tells kube-proxy to leave that kernel value
// alone.
type Conntrack struct {
	MaxPerCore            *int32    `json:"maxPerCore,omitempty"`
	Min                   *int32    `json:"min,omitempty"`
	TCPTimeoutEstablished *Duration `json:"tcpTimeoutEstablished,omitempty"`
}

// Backoff is the proxy's restart delay: it starts at Initial, doubles up to
// Max, and returns to Initial once the proxy has run for Reset.
type Backoff struct {
	Initial Duration `json:"initial"`
	Max     Duration `json:"max"`
	Reset   Duration `json:"reset"`
}

// Logging is where the children's output goes, and nodeinit's verbosity.
type Logging struct {
	// Dir, when set, holds executor.log, proxy.log (and runtime.log)
	// instead of stdout.
	Dir        string    `json:"dir,omitempty"`
	MaxSize    Mebibytes `json:"maxSize"`
	MaxBackups int       `json:"maxBackups"`
	// MaxAge is in days.
	MaxAge int `json:"maxAge"`
	// V and VModule are klog's -v and --vmodule for nodeinit's own log.
	V       int32  `json:"v"`
	VModule string `json:"vmodule,omitempty"`
}

// MountNamespace says how nodeinit prepares mount propagation.
type MountNamespace struct {
	Private     bool `json:"private"`
	MakeRShared bool `json:"makeRShared"`
}

// Cgroup says how nodeinit finds and joins the Mesos container's cgroup.
type Cgroup struct {
	// Parent is an absolute cgroup path that nodeinit joins instead of
	// the one it discovers.
	Parent string `json:"parent,omitempty"`
	// MesosPrefix is the Mesos agent's --cgroups_root: the cgroup of a
	// top-level container of the Mesos containerizer is
	// /<MesosPrefix>/<id>, and a nested one's
	// /<MesosPrefix>/<parent>/mesos/<child>, whatever the prefix.
	MesosPrefix string `json:"mesosPrefix"`
	// Require makes a cgroup that cannot be found, joined or handed to
	// the executor a failure instead of a warning.
	Require bool `json:"require"`
	// V2Evacuate nil means auto: true when nodeinit is PID 1 at the root of
	// a cgroup v2 namespace.
	V2Evacuate *bool  `json:"v2Evacuate,omitempty"`
	V2Leaf     string `json:"v2Leaf"`
}

// GracefulNodeShutdown is the kubelet's Graceful Node Shutdown in a
// container: nodeinit serves the executor the part of systemd-logind's
// D-Bus API the kubelet uses, and on TERM or INT lets it drain the node's
// pods before the executor gets the signal.
type GracefulNodeShutdown struct {
	// Enabled turns it on. Off by default: a kubelet in a DaemonSet that
	// hands the node over to another must not drain it.
	Enabled bool `json:"enabled"`
	// Delay is what nodeinit reports as logind's InhibitDelayMaxUSec, and
	// the longest it waits for the drain. Zero means the kubelet's own
	// shutdownGracePeriod (from its --config), at least 5s. The kubelet
	// raises it when this is shorter than its shutdownGracePeriod, with a
	// logind drop-in in the node's /etc and a reload of logind.
	Delay Duration `json:"delay"`
	// SystemBusPassThrough passes the executor's D-Bus messages that are
	// not for logind on to the container's own system bus, where it has
	// one (a kubelet with cgroupDriver: systemd talks to systemd there).
	// Off, they get the errors of a bus without their names.
	SystemBusPassThrough bool `json:"systemBusPassThrough"`
	// DrainOnHostShutdown holds a shutdown delay lock on the host's
	// logind, where the container has the host's system bus, and drains
	// the node when the host shuts down (systemctl reboot, the power
	// button) as when the container is stopped; the executor runs on
	// until the container is stopped. On by default.
	DrainOnHostShutdown bool `json:"drainOnHostShutdown"`
}

// The checks of the container, by the names containerChecks.skip takes
// (docs/restricted-containers.md has what each looks at and does).
const (
	CheckConntrack     = "conntrack"      // kube-proxy's conntrack sysctls not writable: pass 0
	CheckKmsg          = "kmsg"           // /dev/kmsg missing: /dev/null over it
	CheckSwap          = "swap"           // swap on while the kubelet fails on it
	CheckRootfsDevice  = "rootfs-device"  // the device of the kubelet's root dir not in /dev
	CheckInotify       = "inotify"        // inotify limits below a node's needs
	CheckResolvConf    = "resolv-conf"    // only loopback nameservers
	CheckCgroupfs      = "cgroupfs"       // cgroupfs mounted read-only
	CheckUserNamespace = "user-namespace" // a user namespace: the kubelet's gate, delegation
	CheckNofile        = "nofile"         // RLIMIT_NOFILE below a node's needs
	CheckIPTables      = "iptables"       // the iptables backend the namespace's rules are in
	// SkipAllChecks in containerChecks.skip leaves every check out.
	SkipAllChecks = "all"
)

// ContainerCheckNames are the checks in the order nodeinit makes them.
var ContainerCheckNames = []string{CheckCgroupfs, CheckUserNamespace, CheckNofile, CheckConntrack, CheckKmsg, CheckSwap,
	CheckRootfsDevice, CheckInotify, CheckResolvConf, CheckIPTables}

// The iptables backends containerChecks.iptablesBackend names: auto
// detects the one the network namespace's rules are in, none leaves the
// children's PATH as it is.
const (
	IPTablesAuto   = "auto"
	IPTablesLegacy = "legacy"
	IPTablesNFT    = "nft"
	IPTablesNone   = "none"
)

var iptablesBackends = []string{IPTablesAuto, IPTablesLegacy, IPTablesNFT, IPTablesNone}

// ContainerChecks says which checks of its container nodeinit leaves out,
// and whether it may raise the inotify limits. A DaemonSet that shares the
// host's namespaces needs none of them.
type ContainerChecks struct {
	// Skip names checks to leave out (ContainerCheckNames), or "all".
	Skip []string `json:"skip,omitempty"`
	// RaiseInotifyLimits writes fs.inotify.max_user_instances and
	// max_user_watches up to what a node needs where they are lower and
	// writable, instead of only warning. They are the host's.
	RaiseInotifyLimits bool `json:"raiseInotifyLimits"`
	// IPTablesBackend is the iptables the children find first in PATH:
	// auto (the backend the network namespace's rules are in), legacy,
	// nft, or none (PATH as it is).
	IPTablesBackend string `json:"iptablesBackend"`
}

// Skips reports whether check is left out.
func (c ContainerChecks) Skips(check string) bool {
	for _, s := range c.Skip {
		if s == check || s == SkipAllChecks {
			return true
		}
	}
	return false
}

// Identity is the node's own identity, as the kubelet reports it: the
// machine-id (the Node's machineID) and DMI's product_uuid (systemUUID).
type Identity struct {
	// MachineID gives the node a machine-id of its own when
	// /etc/machine-id is missing, empty, uninitialized or ImageMachineID:
	// the host's when nodeinit shares the host's pid namespace, else one
	// generated once and kept in Dir. It is bind-mounted over
	// /etc/machine-id in nodeinit's mount namespace, never written there.
	MachineID bool `json:"machineID"`
	// ImageMachineID is the machine-id baked into the image, which every
	// container of it shares: replaced as an uninitialized one is. Empty:
	// a valid /etc/machine-id is the container's own.
	ImageMachineID string `json:"imageMachineID,omitempty"`
	// Dir keeps the generated ids. Empty: nodeinit/ in the kubelet's root
	// directory (its --root-dir, else /var/lib/kubelet).
	Dir string `json:"dir,omitempty"`
	// ProductUUID mounts a product_uuid of the node's own, generated once
	// and kept in Dir, over /sys/class/dmi/id/product_uuid: for several
	// nodes on one host, which otherwise share the host's systemUUID.
	ProductUUID bool `json:"productUUID"`
}

// Default returns the settings nodeinit uses when neither file nor flag says
// otherwise.
func Default() Config {
	return Config{
		Kind:       Kind,
		APIVersion: APIVersion,
		Executor:   Executor{ContainPodResources: true, SizeNodeToContainer: true},
		Proxy: Proxy{
			Run:  true,
			Path: "kube-proxy",
			Mode: "iptables",
			RestartBackoff: Backoff{
				Initial: Duration{time.Second},
				Max:     Duration{30 * time.Second},
				Reset:   Duration{60 * time.Second},
			},
		},
		Runtime:              Runtime{Socket: DefaultRuntimeSocket, WaitTimeout: Duration{time.Minute}, PassEndpoint: true},
		ShutdownGracePeriod:  Duration{10 * time.Second},
		GracefulNodeShutdown: GracefulNodeShutdown{SystemBusPassThrough: true, DrainOnHostShutdown: true},
		Logging:              Logging{MaxSize: 10, MaxBackups: 5, MaxAge: 7},
		Cgroup:               Cgroup{MesosPrefix: "mesos", V2Leaf: "nodeinit"},
		ContainerChecks:      ContainerChecks{IPTablesBackend: IPTablesAuto},
		Identity:             Identity{MachineID: true},
	}
}

// Duration is a time.Duration written as a string like "10s" in the file.
type Duration struct{ time.Duration }

// MarshalJSON writes the duration as a string like "1m30s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a string like "10s"; bare numbers are rejected because
// their unit would be a guess.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf(`must be a duration string like "10s" or "1m30s"`)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf(`must be a duration like "10s" or "1m30s"`)
	}
	d.Duration = v
	return nil
}
