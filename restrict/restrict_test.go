package restrict

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/config"
	"github.com/nodeinit/nodeinit/node"
)

// fakeRoot is a container as files: files by path, and the paths no one may write
// (a sysctl outside its namespace shows as 0444).
type fakeRoot struct {
	files    map[string]string
	readOnly []string
	// links are symbolic links by path: proc/self/ns/cgroup names the
	// cgroup namespace.
	links map[string]string
}

// hostLike is a container that restricts nothing: the host's user and
// network namespace, every device, no swap, real nameservers, a writable
// cgroup v2 with the controllers delegated, generous limits.
func hostLike() fakeRoot {
	return fakeRoot{files: map[string]string{
		"proc/self/uid_map": "         0          0 4294967295\n",
		"proc/self/status":  "Name:\tnodeinit\nCapEff:\t000001ffffffffff\n",
		"proc/self/limits":  "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1048576              1048576              files\n",
		"proc/self/mountinfo": "1 0 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n" +
			"2 1 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw\n",
		"proc/self/cgroup":                                            "0::/\n",
		"sys/fs/cgroup/cgroup.controllers":                            "cpuset cpu io memory pids\n",
		"proc/sys/net/netfilter/nf_conntrack_max":                     "262144\n",
		"proc/sys/net/netfilter/nf_conntrack_tcp_timeout_established": "432000\n",
		"proc/sys/net/netfilter/nf_conntrack_tcp_timeout_close_wait":  "60\n",
		"proc/sys/fs/inotify/max_user_instances":                      "8192\n",
		"proc/sys/fs/inotify/max_user_watches":                        "1048576\n",
		"proc/swaps":                                                  "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n",
		"etc/resolv.conf":                                             "search example.com\nnameserver 10.0.0.2\n",
		"dev/kmsg":                                                    "",
	}, links: map[string]string{"proc/self/ns/cgroup": "cgroup:[4026532179]"}}
}

func (c fakeRoot) write(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for p, data := range c.files {
		file := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if slices.Contains(c.readOnly, p) {
			mode = 0o444
		}
		if err := os.WriteFile(file, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
	}
	for p, target := range c.links {
		file := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, file); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func kubeletConfig(c config.Config) *config.Config {
	c.Executor.Path = "/usr/bin/kubelet"
	c.Proxy.Path = "/usr/bin/kube-proxy"
	return &c
}

func i32(n int32) *int32 { return &n }

func TestInspect(t *testing.T) {
	no := false
	tests := []struct {
		name      string
		container func(*fakeRoot)
		config    func(*config.Config)
		kubelet   node.KubeletConfig
		version   node.KubeletVersion
		// What the plan must hold: flags, adjustments by check, words of
		// warnings and of the refusal (empty: none), mounts.
		kubeletArgs, proxyArgs []string
		adjusted               []string
		warnings               []string
		refusal                string
		mounts                 []string
	}{
		{name: "a container that restricts nothing: no change"},
		{
			name:      "a network namespace: nf_conntrack_max read-only, kube-proxy gets 0 for it",
			container: func(c *fakeRoot) { c.readOnly = append(c.readOnly, "proc/sys/net/netfilter/nf_conntrack_max") },
			proxyArgs: []string{"--conntrack-max-per-core=0"},
			adjusted:  []string{"conntrack"},
		},
		{
			name:      "no nf_conntrack at all: kube-proxy gets 0 for each",
			container: func(c *fakeRoot) { removePrefix(c, "proc/sys/net/netfilter/") },
			proxyArgs: []string{"--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0s", "--conntrack-tcp-timeout-close-wait=0s"},
			adjusted:  []string{"conntrack", "conntrack", "conntrack"},
		},
		{
			name:      "the operator's conntrack setting is kept, with one warning",
			container: func(c *fakeRoot) { c.readOnly = append(c.readOnly, "proc/sys/net/netfilter/nf_conntrack_max") },
			config:    func(c *config.Config) { c.Proxy.Conntrack.MaxPerCore = i32(32768) },
			warnings:  []string{"--conntrack-max-per-core is 32768 (the operator's setting, kept)", "set it to 0"},
		},
		{
			name:      "the operator's 0 needs nothing",
			container: func(c *fakeRoot) { c.readOnly = append(c.readOnly, "proc/sys/net/netfilter/nf_conntrack_max") },
			config:    func(c *config.Config) { c.Proxy.Conntrack.MaxPerCore = i32(0) },
		},
		{
			name:      "a conntrack flag in proxy.args is the operator's too",
			container: func(c *fakeRoot) { c.readOnly = append(c.readOnly, "proc/sys/net/netfilter/nf_conntrack_max") },
			config:    func(c *config.Config) { c.Proxy.Args = []string{"--conntrack-max-per-core", "10"} },
			warnings:  []string{"--conntrack-max-per-core is 10"},
		},
		{
			name:      "a conntrack floor alone is the operator's wish for a limit",
			container: func(c *fakeRoot) { c.readOnly = append(c.readOnly, "proc/sys/net/netfilter/nf_conntrack_max") },
			config:    func(c *config.Config) { c.Proxy.Conntrack.Min = i32(131072) },
			warnings:  []string{"--conntrack-min=131072"},
		},
		{
			name: "kube-proxy's own file without conntrack: a warning naming the field, no flag it would ignore",
			container: func(c *fakeRoot) {
				c.readOnly = append(c.readOnly, "proc/sys/net/netfilter/nf_conntrack_max")
				c.files["etc/kube-proxy.yaml"] = "kind: KubeProxyConfiguration\nconntrack: {tcpEstablishedTimeout: 0s}\n"
			},
			config:   func(c *config.Config) { c.Proxy.Args = []string{"--config=/etc/kube-proxy.yaml"} },
			warnings: []string{"/etc/kube-proxy.yaml", "set conntrack.maxPerCore: 0 there"},
		},
		{
			name: "kube-proxy's own file with maxPerCore 0: nothing",
			container: func(c *fakeRoot) {
				c.readOnly = append(c.readOnly, "proc/sys/net/netfilter/nf_conntrack_max")
				c.files["etc/kube-proxy.yaml"] = "kind: KubeProxyConfiguration\nconntrack: {maxPerCore: 0}\n"
			},
			config: func(c *config.Config) { c.Proxy.Args = []string{"--config=/etc/kube-proxy.yaml"} },
		},
		{
			name:      "not kube-proxy: its flags are not known, nothing is passed",
			container: func(c *fakeRoot) { c.readOnly = append(c.readOnly, "proc/sys/net/netfilter/nf_conntrack_max") },
			config:    func(c *config.Config) { c.Proxy.Path = "/bin/task" },
		},
		{
			name:      "the conntrack check skipped",
			container: func(c *fakeRoot) { c.readOnly = append(c.readOnly, "proc/sys/net/netfilter/nf_conntrack_max") },
			config:    func(c *config.Config) { c.ContainerChecks.Skip = []string{"conntrack"} },
		},
		{
			name:      "no /dev/kmsg: /dev/null over it, with a warning that OOM events are not seen",
			container: func(c *fakeRoot) { delete(c.files, "dev/kmsg") },
			adjusted:  []string{"kmsg"},
			warnings:  []string{"The kubelet sees no kernel OOM events"},
			mounts:    []string{"/dev/null over /dev/kmsg (created)"},
		},
		{
			name:      "no /dev/kmsg and not a kubelet: nothing",
			container: func(c *fakeRoot) { delete(c.files, "dev/kmsg") },
			config:    func(c *config.Config) { c.Executor.Path = "/bin/task" },
		},
		{
			name:      "no /dev/kmsg, skipped",
			container: func(c *fakeRoot) { delete(c.files, "dev/kmsg") },
			config:    func(c *config.Config) { c.ContainerChecks.Skip = []string{"all"} },
		},
		{
			name:      "swap on, failSwapOn unset: refused naming the setting",
			container: func(c *fakeRoot) { c.files["proc/swaps"] += "/swapfile file 1048572 0 -2\n" },
			refusal:   "Swap is on (/swapfile) and failSwapOn is unset (the kubelet's default is true), so the kubelet would exit: set failSwapOn: false",
		},
		{
			name:      "swap on, failSwapOn true in the file: refused naming the file",
			container: func(c *fakeRoot) { c.files["proc/swaps"] += "/dev/sdb2 partition 1048572 0 -2\n" },
			kubelet:   node.KubeletConfig{File: "/etc/kubelet.yaml", Files: []string{"/etc/kubelet.yaml"}, FailSwapOn: new(true)},
			refusal:   "failSwapOn is true in /etc/kubelet.yaml",
		},
		{
			name:      "swap on, failSwapOn false: runs",
			container: func(c *fakeRoot) { c.files["proc/swaps"] += "/swapfile file 1048572 0 -2\n" },
			kubelet:   node.KubeletConfig{File: "/etc/kubelet.yaml", FailSwapOn: &no},
		},
		{
			name:      "swap on, --fail-swap-on=false: runs",
			container: func(c *fakeRoot) { c.files["proc/swaps"] += "/swapfile file 1048572 0 -2\n" },
			config:    func(c *config.Config) { c.Executor.Args = []string{"--fail-swap-on=false"} },
		},
		{
			name: "low inotify limits: a warning with the sysctl to set",
			container: func(c *fakeRoot) {
				c.files["proc/sys/fs/inotify/max_user_instances"] = "128\n"
			},
			warnings: []string{"fs.inotify.max_user_instances is 128, below the 512", "sysctl -w fs.inotify.max_user_instances=512"},
		},
		{
			name: "low inotify limits, raising allowed",
			container: func(c *fakeRoot) {
				c.files["proc/sys/fs/inotify/max_user_instances"] = "128\n"
				c.files["proc/sys/fs/inotify/max_user_watches"] = "8192\n"
			},
			config:   func(c *config.Config) { c.ContainerChecks.RaiseInotifyLimits = true },
			adjusted: []string{"inotify", "inotify"},
		},
		{
			name: "loopback nameservers with systemd-resolved's upstream file: the kubelet gets that file",
			container: func(c *fakeRoot) {
				c.files["etc/resolv.conf"] = "nameserver 127.0.0.53\noptions edns0\n"
				c.files["run/systemd/resolve/resolv.conf"] = "nameserver 192.0.2.53\n"
			},
			kubeletArgs: []string{"--resolv-conf=/run/systemd/resolve/resolv.conf"},
			adjusted:    []string{"resolv-conf"},
		},
		{
			name:      "loopback nameservers only: a warning",
			container: func(c *fakeRoot) { c.files["etc/resolv.conf"] = "nameserver 127.0.0.1\nnameserver ::1\n" },
			warnings:  []string{"only loopback nameservers (127.0.0.1 ::1)"},
		},
		{
			name: "loopback nameservers, the kubelet's own resolvConf: kept",
			container: func(c *fakeRoot) {
				c.files["etc/resolv.conf"] = "nameserver 127.0.0.53\n"
				c.files["run/systemd/resolve/resolv.conf"] = "nameserver 192.0.2.53\n"
			},
			kubelet: node.KubeletConfig{File: "/k", ResolvConf: new("/etc/k8s-resolv.conf")},
		},
		{
			name: "a read-only cgroupfs of a cgroup namespace of its own, with CAP_SYS_ADMIN: remounted read-write, keeping its flags",
			container: func(c *fakeRoot) {
				c.files["proc/self/mountinfo"] = strings.Replace(c.files["proc/self/mountinfo"], "rw,nosuid,nodev,noexec,relatime - cgroup2", "ro,nosuid,nodev,noexec,relatime - cgroup2", 1)
			},
			adjusted: []string{"cgroupfs"},
			mounts:   []string{"remount /sys/fs/cgroup nosuid,nodev,noexec"},
		},
		{
			name: "a read-only cgroupfs of the host's whole tree (--cgroupns=host on v2): refused, not remounted",
			container: func(c *fakeRoot) {
				readOnlyCgroupfs(c)
				c.links["proc/self/ns/cgroup"] = "cgroup:[4026531835]"
				c.files["proc/self/cgroup"] = "0::/machine.slice/libpod-1234.scope/container\n"
			},
			refusal: "The cgroupfs at /sys/fs/cgroup is mounted read-only and is the host's whole cgroup tree (root / in the host's cgroup namespace): " +
				"nodeinit does not make it writable; mount it read-write (a privileged container's is: --privileged, or -v /sys/fs/cgroup:/sys/fs/cgroup:rw), " +
				"or, where the container runtime runs inside the container too, give it a cgroup namespace of its own",
		},
		{
			name: "a read-only cgroupfs, no cgroup namespaces in the kernel: the host's, refused",
			container: func(c *fakeRoot) {
				readOnlyCgroupfs(c)
				delete(c.links, "proc/self/ns/cgroup")
			},
			refusal: "is the host's whole cgroup tree",
		},
		{
			name: "v1: a read-only bind of the container's own cgroup (docker without a cgroup namespace): remounted",
			container: func(c *fakeRoot) {
				c.links["proc/self/ns/cgroup"] = "cgroup:[4026531835]"
				c.files["proc/self/mountinfo"] = "1 0 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n" +
					"2 1 0:31 /docker/abc /sys/fs/cgroup/memory ro,nosuid,nodev,noexec,relatime - cgroup cgroup rw,memory\n" +
					"3 1 0:32 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro,nosuid,nodev,noexec,relatime - cgroup cgroup rw,cpu,cpuacct\n"
				c.files["proc/self/cgroup"] = "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc/init\n0::/docker/abc\n"
			},
			adjusted: []string{"cgroupfs", "cgroupfs"},
			mounts:   []string{"remount /sys/fs/cgroup/memory nosuid,nodev,noexec", "remount /sys/fs/cgroup/cpu,cpuacct nosuid,nodev,noexec"},
		},
		{
			name: "v1: a read-only mount of another cgroup than nodeinit's: refused",
			container: func(c *fakeRoot) {
				c.links["proc/self/ns/cgroup"] = "cgroup:[4026531835]"
				c.files["proc/self/mountinfo"] = "1 0 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n" +
					"2 1 0:31 /docker/abc /sys/fs/cgroup/memory ro,nosuid,nodev,noexec,relatime - cgroup cgroup rw,memory\n"
				c.files["proc/self/cgroup"] = "4:memory:/docker/abcdef\n0::/\n"
			},
			refusal: "The cgroupfs at /sys/fs/cgroup/memory is mounted read-only and its root /docker/abc does not hold nodeinit's cgroup /docker/abcdef",
		},
		{
			name: "a cgroup namespace of its own, the mount's root outside it: refused",
			container: func(c *fakeRoot) {
				c.files["proc/self/mountinfo"] = "1 0 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n" +
					"2 1 0:30 /../.. /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw\n"
			},
			refusal: "its root /../.. lies outside nodeinit's cgroup namespace",
		},
		{
			name: "a read-only cgroupfs without CAP_SYS_ADMIN: one line",
			container: func(c *fakeRoot) {
				c.files["proc/self/mountinfo"] = strings.Replace(c.files["proc/self/mountinfo"], "rw,nosuid,nodev,noexec,relatime - cgroup2", "ro,nosuid,nodev,noexec,relatime - cgroup2", 1)
				c.files["proc/self/status"] = "CapEff:\t0000000000000000\n"
			},
			warnings: []string{"The cgroupfs at /sys/fs/cgroup is mounted read-only and nodeinit lacks CAP_SYS_ADMIN"},
		},
		{
			name:        "a user namespace: the kubelet's gate, and 0 for the conntrack sysctls it cannot write",
			container:   userNamespace,
			kubeletArgs: []string{"--feature-gates=KubeletInUserNamespace=true"},
			proxyArgs:   []string{"--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0s", "--conntrack-tcp-timeout-close-wait=0s"},
			adjusted:    []string{"user-namespace", "conntrack", "conntrack", "conntrack"},
			warnings:    []string{"RLIMIT_NOFILE is 1024, below the 64000"},
		},
		{
			name:      "a user namespace, the operator's gates on the command line: the gate is added beside them",
			container: userNamespace,
			config: func(c *config.Config) {
				c.Executor.Args = []string{"--feature-gates=NodeSwap=true"}
				c.Proxy.Conntrack = config.Conntrack{MaxPerCore: i32(0), TCPTimeoutEstablished: &config.Duration{}}
				c.Proxy.Args = []string{"--conntrack-tcp-timeout-close-wait=0s"}
			},
			kubeletArgs: []string{"--feature-gates=KubeletInUserNamespace=true"},
			adjusted:    []string{"user-namespace"},
			warnings:    []string{"RLIMIT_NOFILE"},
		},
		{
			name:      "a user namespace, the gate set false by the operator: kept, with a warning",
			container: userNamespace,
			kubelet:   node.KubeletConfig{File: "/k.yaml", Files: []string{"/k.yaml"}, FeatureGates: map[string]bool{"KubeletInUserNamespace": false}},
			config:    func(c *config.Config) { c.ContainerChecks.Skip = []string{"conntrack", "nofile"} },
			warnings:  []string{"the kubelet's configuration /k.yaml sets KubeletInUserNamespace=false"},
		},
		{
			name: "a user namespace without the pids controller delegated: refused naming it",
			container: func(c *fakeRoot) {
				userNamespace(c)
				c.files["sys/fs/cgroup/cgroup.controllers"] = "cpu memory\n"
			},
			config:  func(c *config.Config) { c.ContainerChecks.Skip = []string{"conntrack", "nofile"} },
			refusal: "needs the cpu, memory, pids controllers delegated to the container's cgroup; pids is not",
			// The gate is still planned; the refusal stops the run.
			kubeletArgs: []string{"--feature-gates=KubeletInUserNamespace=true"},
			adjusted:    []string{"user-namespace"},
		},
		{
			name:      "a user namespace, a v1.37 kubelet: its gate is on by default, nothing to add",
			container: userNamespace,
			version:   v137,
			config:    func(c *config.Config) { c.ContainerChecks.Skip = []string{"conntrack", "nofile"} },
		},
		{
			name:      "a user namespace, a v1.37 kubelet, the user-namespace check skipped: the default gate still covers /dev/kmsg",
			container: func(c *fakeRoot) { userNamespace(c); delete(c.files, "dev/kmsg") },
			version:   v137,
			config:    func(c *config.Config) { c.ContainerChecks.Skip = []string{"conntrack", "nofile", "user-namespace"} },
		},
		{
			name:        "a user namespace, a v1.36 kubelet: the gate is added",
			container:   userNamespace,
			version:     node.KubeletVersion{Major: 1, Minor: 36, Patch: 3},
			config:      func(c *config.Config) { c.ContainerChecks.Skip = []string{"conntrack", "nofile"} },
			kubeletArgs: []string{"--feature-gates=KubeletInUserNamespace=true"},
			adjusted:    []string{"user-namespace"},
		},
		{
			name:      "a user namespace, a v1.37 kubelet with the gate off: kept, with a warning",
			container: userNamespace,
			version:   v137,
			config: func(c *config.Config) {
				c.ContainerChecks.Skip = []string{"conntrack", "nofile"}
				c.Executor.Args = []string{"--feature-gates=KubeletInUserNamespace=false"}
			},
			warnings: []string{"the kubelet's --feature-gates sets KubeletInUserNamespace=false"},
		},
		{
			name:      "cgroup v1 (no cgroup2 at /sys/fs/cgroup), a v1.37 kubelet with failCgroupV1 unset: one line, nothing changed",
			container: cgroupV1,
			version:   v137,
			kubelet:   node.KubeletConfig{File: "/k.yaml", Files: []string{"/k.yaml"}},
			warnings:  []string{"The kubelet (v1.37.2, read from its dependency k8s.io/kubernetes) will exit at start on this cgroup v1 host", "set failCgroupV1: false in /k.yaml"},
		},
		{
			name:      "cgroup v1, a v1.37 kubelet with failCgroupV1: false",
			container: cgroupV1,
			version:   v137,
			kubelet:   node.KubeletConfig{File: "/k.yaml", Files: []string{"/k.yaml"}, FailCgroupV1: &no},
		},
		{
			name:      "cgroup v1, a kubelet of an unknown release: nothing said",
			container: cgroupV1,
		},
		{
			name:    "cgroup v2, a v1.37 kubelet with failCgroupV1 unset: nothing said",
			version: v137,
		},
		{
			name:        "a user namespace with no /dev/kmsg: the gate covers it, no mount",
			container:   func(c *fakeRoot) { userNamespace(c); delete(c.files, "dev/kmsg") },
			config:      func(c *config.Config) { c.ContainerChecks.Skip = []string{"conntrack", "nofile"} },
			kubeletArgs: []string{"--feature-gates=KubeletInUserNamespace=true"},
			adjusted:    []string{"user-namespace"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := hostLike()
			if tt.container != nil {
				tt.container(&c)
			}
			cfg := kubeletConfig(config.Default())
			if tt.config != nil {
				tt.config(cfg)
			}
			p := Inspect(Input{Root: c.write(t), Config: cfg, Kubelet: tt.kubelet, KubeletVersion: tt.version})
			if !slices.Equal(p.KubeletArgs, tt.kubeletArgs) || !slices.Equal(p.ProxyArgs, tt.proxyArgs) {
				t.Errorf("kubelet flags %q, proxy flags %q; want %q, %q", p.KubeletArgs, p.ProxyArgs, tt.kubeletArgs, tt.proxyArgs)
			}
			var adjusted []string
			for _, a := range p.Adjustments {
				adjusted = append(adjusted, fmt.Sprint(a.Value("check")))
				if a.Value("change") == "" || a.Value("reason") == "" {
					t.Errorf("adjustment %+v does not say what and why", a)
				}
			}
			if !slices.Equal(adjusted, tt.adjusted) {
				t.Errorf("adjustments %q; want %q\n%s", adjusted, tt.adjusted, strings.Join(p.Describe(), "\n"))
			}
			warnings := strings.Join(p.Warnings, "\n")
			for _, w := range tt.warnings {
				if !strings.Contains(warnings, w) {
					t.Errorf("no warning says %q; warnings:\n%s", w, warnings)
				}
			}
			if len(tt.warnings) == 0 && len(p.Warnings) > 0 {
				t.Errorf("unexpected warnings:\n%s", warnings)
			}
			if !strings.Contains(p.Refusal, tt.refusal) || (tt.refusal == "") != (p.Refusal == "") {
				t.Errorf("refusal %q; want one with %q", p.Refusal, tt.refusal)
			}
			if strings.Contains(p.Refusal, "\n") {
				t.Errorf("refusal is more than one line: %q", p.Refusal)
			}
			var mounts []string
			for _, m := range p.mounts {
				mounts = append(mounts, describeMount(m))
			}
			if !slices.Equal(mounts, tt.mounts) {
				t.Errorf("mounts %q; want %q", mounts, tt.mounts)
			}
		})
	}
}

var v137 = node.KubeletVersion{Major: 1, Minor: 37, Patch: 2, From: "its dependency k8s.io/kubernetes"}

// cgroupV1 makes c a hybrid cgroup v1 host: v1 hierarchies at
// /sys/fs/cgroup/*, cgroup2 at /sys/fs/cgroup/unified.
func cgroupV1(c *fakeRoot) {
	c.files["proc/self/mountinfo"] = "1 0 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n" +
		"2 1 0:25 / /sys/fs/cgroup rw,nosuid,nodev,noexec - tmpfs tmpfs ro,mode=755\n" +
		"3 2 0:26 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw\n" +
		"4 2 0:27 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime - cgroup cgroup rw,memory\n"
	c.files["proc/self/cgroup"] = "5:memory:/\n0::/\n"
}

// readOnlyCgroupfs makes c's cgroup2 mount read-only.
func readOnlyCgroupfs(c *fakeRoot) {
	c.files["proc/self/mountinfo"] = strings.Replace(c.files["proc/self/mountinfo"], "rw,nosuid,nodev,noexec,relatime - cgroup2", "ro,nosuid,nodev,noexec,relatime - cgroup2", 1)
}

// userNamespace makes c a rootless container: uid_map of one uid, a
// network namespace another user namespace owns (no sysctl writable), a
// low open-file limit.
func userNamespace(c *fakeRoot) {
	c.files["proc/self/uid_map"] = "0 1000 1\n"
	c.files["proc/self/limits"] = "Max open files            1024                 524288               files\n"
	for p := range c.files {
		if strings.HasPrefix(p, "proc/sys/") {
			c.readOnly = append(c.readOnly, p)
		}
	}
}

func removePrefix(c *fakeRoot, prefix string) {
	for p := range c.files {
		if strings.HasPrefix(p, prefix) {
			delete(c.files, p)
		}
	}
}

func describeMount(m mount) string {
	if m.source == "" {
		var opts []string
		for _, o := range []struct {
			f    uintptr
			name string
		}{{unix.MS_NOSUID, "nosuid"}, {unix.MS_NODEV, "nodev"}, {unix.MS_NOEXEC, "noexec"}} {
			if m.flags&o.f != 0 {
				opts = append(opts, o.name)
			}
		}
		return fmt.Sprintf("remount %s %s", m.target, strings.Join(opts, ","))
	}
	s := m.source + " over " + m.target
	if m.create {
		s += " (created)"
	}
	return s
}

// The kubelet's root dir on a file system its cAdvisor does not know
// (ramfs, a FUSE mount), not from a device: refused, naming the mount and
// the device numbers; on a known one, or from a device, it runs.
func TestRootfsDevice(t *testing.T) {
	for _, tc := range []struct {
		name, mount string // %d:%d is the device of the fake root
		refusal     string
	}{
		{"ext4 from a device", "1 0 %d:%d / / rw - ext4 /dev/sda1 rw\n", ""},
		{"tmpfs", "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n2 1 %d:%d / /var/lib/kubelet rw - tmpfs tmpfs rw\n", ""},
		{"ramfs", "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n2 1 %d:%d / /var/lib/kubelet rw - ramfs none rw\n",
			"The kubelet's root dir /var/lib/kubelet is on none (ramfs, device "},
		{"a FUSE mount", "1 0 %d:%d / / rw - fuse.sshfs host:/srv rw\n", `on host:/srv (fuse.sshfs`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := hostLike()
			c.files["var/lib/kubelet/.keep"] = ""
			root := c.write(t)
			var st unix.Stat_t
			if err := unix.Stat(filepath.Join(root, "var/lib/kubelet"), &st); err != nil {
				t.Fatal(err)
			}
			mi := fmt.Sprintf(tc.mount, unix.Major(st.Dev), unix.Minor(st.Dev))
			if err := os.WriteFile(filepath.Join(root, "proc/self/mountinfo"), []byte(mi), 0o644); err != nil {
				t.Fatal(err)
			}
			cfg := kubeletConfig(config.Default())
			cfg.ContainerChecks.Skip = []string{"cgroupfs"}
			p := Inspect(Input{Root: root, Config: cfg})
			if !strings.Contains(p.Refusal, tc.refusal) || (tc.refusal == "") != (p.Refusal == "") {
				t.Errorf("refusal %q; want one with %q", p.Refusal, tc.refusal)
			}
		})
	}
}

// The kubelet takes --fail-swap-on over its configuration's failSwapOn
// (it parses its flags again over the file), so the flag decides wherever
// it is given, and a bare --fail-swap-on means true.
func TestSwapTheFlagWinsOverTheFile(t *testing.T) {
	yes, no := true, false
	const file = "/etc/kubelet.yaml"
	for _, tc := range []struct {
		name    string
		args    []string
		file    *bool
		refusal string // words of the refusal; "" for none
	}{
		{name: "nothing set: the kubelet's default, true", refusal: "failSwapOn is unset (the kubelet's default is true)"},
		{name: "file false", file: &no},
		{name: "file true", file: &yes, refusal: "failSwapOn is true in " + file},
		{name: "flag false", args: []string{"--fail-swap-on=false"}},
		{name: "flag true", args: []string{"--fail-swap-on=true"}, refusal: "the kubelet's --fail-swap-on=true"},
		{name: "file false, flag true: the flag wins", args: []string{"--fail-swap-on=true"}, file: &no,
			refusal: "the kubelet's --fail-swap-on=true, which it takes over failSwapOn: false in " + file},
		{name: "file false, bare flag: true, the flag wins", args: []string{"--fail-swap-on"}, file: &no,
			refusal: "the kubelet's --fail-swap-on=true"},
		{name: "file true, flag false: the flag wins", args: []string{"--fail-swap-on=false"}, file: &yes},
		{name: "the last flag counts", args: []string{"-fail-swap-on=false", "--fail-swap-on=true"}, file: &no,
			refusal: "--fail-swap-on=true"},
		{name: "the last flag counts, false", args: []string{"--fail-swap-on", "--fail-swap-on=false"}},
		{name: "after --, not the kubelet's", args: []string{"--", "--fail-swap-on=true"}, file: &no},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := hostLike()
			c.files["proc/swaps"] += "/swapfile file 1048572 0 -2\n"
			cfg := kubeletConfig(config.Default())
			cfg.Executor.Args = tc.args
			kc := node.KubeletConfig{FailSwapOn: tc.file}
			if tc.file != nil {
				kc.File, kc.Files = file, []string{file}
			}
			p := Inspect(Input{Root: c.write(t), Config: cfg, Kubelet: kc})
			if !strings.Contains(p.Refusal, tc.refusal) || (tc.refusal == "") != (p.Refusal == "") {
				t.Errorf("refusal %q; want one with %q", p.Refusal, tc.refusal)
			}
		})
	}
}
