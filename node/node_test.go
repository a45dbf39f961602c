package node

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/config"
)

func i32(v int32) *int32 { return &v }

func cfg(change func(*config.Config)) *config.Config {
	c := config.Default()
	c.Executor.Path = "kubelet"
	change(&c)
	return &c
}

func TestProxyArguments(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*config.Config)
		want   []string
	}{
		{"defaults", func(c *config.Config) {}, []string{"--v=0", "--proxy-mode=iptables"}},
		{"bindall", func(c *config.Config) { c.Proxy.BindAll = true },
			[]string{"--bind-address=0.0.0.0", "--v=0", "--proxy-mode=iptables"}},
		{"bindall wins over a bind address", func(c *config.Config) { c.Proxy.BindAll, c.Proxy.BindAddress = true, "10.0.0.9" },
			[]string{"--bind-address=0.0.0.0", "--v=0", "--proxy-mode=iptables"}},
		{"bind address", func(c *config.Config) { c.Proxy.BindAddress = "10.0.0.9" },
			[]string{"--bind-address=10.0.0.9", "--v=0", "--proxy-mode=iptables"}},
		{"bind address wins over the executor's", func(c *config.Config) {
			c.Proxy.BindAddress, c.Executor.Args = "10.0.0.9", []string{"--node-ip=10.0.0.1"}
		}, []string{"--bind-address=10.0.0.9", "--v=0", "--proxy-mode=iptables"}},
		{"executor --address is where it listens, not the node's IP", func(c *config.Config) {
			c.Executor.Args = []string{"--v=2", "--address=127.0.0.1", "--port=10250"}
		}, []string{"--v=0", "--proxy-mode=iptables"}},
		{"executor --node-ip=", func(c *config.Config) { c.Executor.Args = []string{"--node-ip=10.0.0.3"} },
			[]string{"--bind-address=10.0.0.3", "--v=0", "--proxy-mode=iptables"}},
		{"executor --node-ip X", func(c *config.Config) { c.Executor.Args = []string{"--node-ip", "10.0.0.4"} },
			[]string{"--bind-address=10.0.0.4", "--v=0", "--proxy-mode=iptables"}},
		{"executor dual-stack --node-ip", func(c *config.Config) { c.Executor.Args = []string{"--node-ip=10.0.0.4,fd00::4"} },
			[]string{"--bind-address=10.0.0.4", "--v=0", "--proxy-mode=iptables"}},
		{"executor --node-ip beside --address", func(c *config.Config) {
			c.Executor.Args = []string{"--node-ip=10.0.0.4", "--address=0.0.0.0"}
		}, []string{"--bind-address=10.0.0.4", "--v=0", "--proxy-mode=iptables"}},
		{"the executor's last --node-ip counts", func(c *config.Config) {
			c.Executor.Args = []string{"--node-ip=10.0.0.1", "--node-ip", "10.0.0.2"}
		}, []string{"--bind-address=10.0.0.2", "--v=0", "--proxy-mode=iptables"}},
		{"executor --node-ip with no value", func(c *config.Config) { c.Executor.Args = []string{"--node-ip"} },
			[]string{"--v=0", "--proxy-mode=iptables"}},
		{"executor --node-ip after -- is not its flag", func(c *config.Config) { c.Executor.Args = []string{"--", "--node-ip=10.0.0.1"} },
			[]string{"--v=0", "--proxy-mode=iptables"}},
		{"executor --node-ips is another flag", func(c *config.Config) { c.Executor.Args = []string{"--node-ips=10.0.0.1"} },
			[]string{"--v=0", "--proxy-mode=iptables"}},
		{"logv", func(c *config.Config) { c.Proxy.LogV = 4 }, []string{"--v=4", "--proxy-mode=iptables"}},
		{"mode", func(c *config.Config) { c.Proxy.Mode = "nftables" }, []string{"--v=0", "--proxy-mode=nftables"}},
		{"conntrack", func(c *config.Config) {
			c.Proxy.Conntrack = config.Conntrack{MaxPerCore: i32(32768), Min: i32(131072), TCPTimeoutEstablished: &config.Duration{Duration: 24 * time.Hour}}
		}, []string{"--v=0", "--proxy-mode=iptables", "--conntrack-max-per-core=32768", "--conntrack-min=131072",
			"--conntrack-tcp-timeout-established=24h0m0s"}},
		{"conntrack 0 is passed: leave the kernel alone", func(c *config.Config) {
			c.Proxy.Conntrack = config.Conntrack{MaxPerCore: i32(0), Min: i32(0), TCPTimeoutEstablished: &config.Duration{}}
		}, []string{"--v=0", "--proxy-mode=iptables", "--conntrack-max-per-core=0", "--conntrack-min=0",
			"--conntrack-tcp-timeout-established=0s"}},
		{"conntrack timeout with seconds", func(c *config.Config) {
			c.Proxy.Conntrack.TCPTimeoutEstablished = &config.Duration{Duration: 90 * time.Second}
		}, []string{"--v=0", "--proxy-mode=iptables", "--conntrack-tcp-timeout-established=1m30s"}},
		{"kubeconfig", func(c *config.Config) { c.Proxy.Kubeconfig = "/etc/kubernetes/proxy.conf" },
			[]string{"--v=0", "--proxy-mode=iptables", "--kubeconfig=/etc/kubernetes/proxy.conf"}},
		{"master", func(c *config.Config) { c.Proxy.Master = "https://10.0.0.1:6443" },
			[]string{"--v=0", "--proxy-mode=iptables", "--master=https://10.0.0.1:6443"}},
		{"hostname override is lower-cased", func(c *config.Config) { c.Proxy.HostnameOverride = "Node-1.Example.COM" },
			[]string{"--v=0", "--proxy-mode=iptables", "--hostname-override=node-1.example.com"}},
		{"proxy args come last, in order", func(c *config.Config) {
			c.Proxy.Args = []string{"--proxy-mode=ipvs", "--metrics-bind-address", "0.0.0.0:10249", "--v=9"}
			c.Proxy.Master = "https://m"
		}, []string{"--v=0", "--proxy-mode=iptables", "--master=https://m", "--proxy-mode=ipvs", "--metrics-bind-address", "0.0.0.0:10249", "--v=9"}},
		{"a kube-proxy config file: only what kube-proxy still honours", func(c *config.Config) {
			c.Executor.Args = []string{"--node-ip=10.0.0.1"}
			c.Proxy.LogV, c.Proxy.Master, c.Proxy.HostnameOverride = 3, "https://m", "N"
			c.Proxy.Args = []string{"--config", "/etc/kube-proxy.yaml"}
		}, []string{"--v=3", "--master=https://m", "--hostname-override=n", "--config", "/etc/kube-proxy.yaml"}},
		{"an empty --config is no file", func(c *config.Config) { c.Proxy.Args = []string{"--config="} },
			[]string{"--v=0", "--proxy-mode=iptables", "--config="}},
		{"everything", func(c *config.Config) {
			c.Executor.Args = []string{"--node-ip=10.0.0.1"}
			c.Proxy.LogV, c.Proxy.Mode = 2, "ipvs"
			c.Proxy.Conntrack = config.Conntrack{MaxPerCore: i32(1), Min: i32(2), TCPTimeoutEstablished: &config.Duration{Duration: time.Hour}}
			c.Proxy.Kubeconfig, c.Proxy.Master, c.Proxy.HostnameOverride = "/k", "https://m", "N"
			c.Proxy.Args = []string{"--x"}
		}, []string{"--bind-address=10.0.0.1", "--v=2", "--proxy-mode=ipvs", "--conntrack-max-per-core=1", "--conntrack-min=2",
			"--conntrack-tcp-timeout-established=1h0m0s", "--kubeconfig=/k", "--master=https://m", "--hostname-override=n", "--x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Proxy(cfg(tc.change), nil)
			if got.Path != "kube-proxy" || !reflect.DeepEqual(got.Args, tc.want) {
				t.Errorf("Proxy:\n got %q %q\nwant %q %q", got.Path, got.Args, "kube-proxy", tc.want)
			}
			for _, a := range got.Args {
				if strings.HasPrefix(a, "--resource-container") || strings.HasPrefix(a, "--logtostderr") {
					t.Errorf("Proxy passes %q, which kube-proxy no longer has", a)
				}
			}
		})
	}
}

func TestExecutorCommand(t *testing.T) {
	env := []string{"HOME=/root", "PATH=/bin"}
	ct := Container{Cgroup: "/mesos/1234-abcd", ID: "1234-abcd"}
	for _, tc := range []struct {
		name     string
		change   func(*config.Config)
		ct       Container
		wantArgs []string
		wantEnv  []string
	}{
		{"no container found", func(c *config.Config) { c.Executor.Args = []string{"--v=2"} }, Container{},
			[]string{"--v=2"}, env},
		{"container: id in env, cgroup root in args", func(c *config.Config) { c.Executor.Args = []string{"--v=2"} }, ct,
			[]string{"--v=2", "--cgroup-root=/mesos/1234-abcd"}, append(env, "MESOS_EXECUTOR_CONTAINER_UUID=1234-abcd")},
		{"without containPodResources", func(c *config.Config) { c.Executor.ContainPodResources = false }, ct,
			nil, append(env, "MESOS_EXECUTOR_CONTAINER_UUID=1234-abcd")},
		{"own --cgroup-root=", func(c *config.Config) { c.Executor.Args = []string{"--cgroup-root=/kubepods"} }, ct,
			[]string{"--cgroup-root=/kubepods"}, append(env, "MESOS_EXECUTOR_CONTAINER_UUID=1234-abcd")},
		{"own --cgroup-root X", func(c *config.Config) { c.Executor.Args = []string{"--cgroup-root", "/kubepods", "--v=1"} }, ct,
			[]string{"--cgroup-root", "/kubepods", "--v=1"}, append(env, "MESOS_EXECUTOR_CONTAINER_UUID=1234-abcd")},
		{"cgroup root goes before --", func(c *config.Config) { c.Executor.Args = []string{"--v=1", "--", "positional"} }, ct,
			[]string{"--v=1", "--cgroup-root=/mesos/1234-abcd", "--", "positional"}, append(env, "MESOS_EXECUTOR_CONTAINER_UUID=1234-abcd")},
		{"cgroup root only, no id", func(c *config.Config) {}, Container{Cgroup: "/mesos/x"},
			[]string{"--cgroup-root=/mesos/x"}, env},
		{"an inherited container id is replaced", func(c *config.Config) {}, Container{ID: "new"},
			nil, append(env, "MESOS_EXECUTOR_CONTAINER_UUID=new")},
		{"the root of the cgroup mounts is the kubelet's default: nothing added", func(c *config.Config) {}, Container{Cgroup: "/", ID: "x"},
			nil, append(env, "MESOS_EXECUTOR_CONTAINER_UUID=x")},
		{"the kubelet's configuration sets cgroupRoot: nothing added", func(c *config.Config) {
			c.Executor.Args = []string{"--config=" + kubeletConfig(t, "cgroupRoot: /kubepods\n")}
		}, ct, nil, append(env, "MESOS_EXECUTOR_CONTAINER_UUID=1234-abcd")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg(tc.change)
			in := append(append([]string(nil), env...), "MESOS_EXECUTOR_CONTAINER_UUID=old")
			if tc.ct.ID == "" {
				in = env
			}
			kc, err := ReadKubeletConfig(c.Executor.Args)
			if err != nil {
				t.Fatal(err)
			}
			got := Executor(c, in, tc.ct, kc)
			want := tc.wantArgs
			if want == nil && len(c.Executor.Args) > 0 {
				want = c.Executor.Args
			}
			if got.Path != "kubelet" || !reflect.DeepEqual(got.Args, want) || !reflect.DeepEqual(got.Env, tc.wantEnv) {
				t.Errorf("Executor:\n got %q %q env %q\nwant %q %q env %q", got.Path, got.Args, got.Env, "kubelet", want, tc.wantEnv)
			}
			if !reflect.DeepEqual(in[:len(env)], env) || len(c.Executor.Args) > 0 && &c.Executor.Args[0] == &got.Args[0] {
				t.Errorf("Executor changed its inputs")
			}
		})
	}
}

// kubeletConfig writes a KubeletConfiguration with the fields in body and
// returns its path.
func kubeletConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubelet.yaml")
	if err := os.WriteFile(p, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"+body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOwnCgroupRootSaysWhichWins(t *testing.T) {
	file := KubeletConfig{CgroupRoot: "/from-file", Files: []string{"/etc/kubelet.yaml", "/etc/kubelet.d/10-root.conf"}}
	for _, tc := range []struct {
		name       string
		args       []string
		kc         KubeletConfig
		root, from string
	}{
		{"none", []string{"--v=2"}, KubeletConfig{}, "", ""},
		{"the flag", []string{"--cgroup-root", "/from-flag"}, KubeletConfig{}, "/from-flag", "the executor's --cgroup-root=/from-flag"},
		{"the configuration", nil, file, "/from-file", "cgroupRoot /from-file of the kubelet's configuration /etc/kubelet.yaml /etc/kubelet.d/10-root.conf"},
		{"the flag over the configuration", []string{"--cgroup-root=/from-flag"}, file, "/from-flag",
			"the executor's --cgroup-root=/from-flag, which overrides cgroupRoot /from-file of the kubelet's configuration /etc/kubelet.yaml /etc/kubelet.d/10-root.conf"},
		{"a flag after -- is not the executor's", []string{"--", "--cgroup-root=/x"}, KubeletConfig{}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, from := OwnCgroupRoot(tc.args, tc.kc)
			if root != tc.root || from != tc.from {
				t.Errorf("got %q, %q\nwant %q, %q", root, from, tc.root, tc.from)
			}
		})
	}
}

func TestEnviron(t *testing.T) {
	for _, tc := range []struct {
		name     string
		environ  []string
		override string
		want     []string
	}{
		{"PWD/bin appended", []string{"A=1", "PATH=/usr/bin:/bin", "B=2"}, "", []string{"A=1", "B=2", "PATH=/usr/bin:/bin:/var/lib/node/bin"}},
		{"override replaces PATH", []string{"PATH=/usr/bin", "A=1"}, "/opt/bin", []string{"A=1", "PATH=/opt/bin:/var/lib/node/bin"}},
		{"no PATH at all", []string{"A=1"}, "", []string{"A=1", "PATH=/var/lib/node/bin"}},
		{"duplicate PATH entries become one", []string{"PATH=/a", "PATH=/b"}, "", []string{"PATH=/b:/var/lib/node/bin"}},
		{"PATHX is not PATH", []string{"PATHX=/x"}, "", []string{"PATHX=/x", "PATH=/var/lib/node/bin"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Environ(tc.environ, tc.override, "/var/lib/node"); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Environ = %q; want %q", got, tc.want)
			}
		})
	}
}

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		"":                               "''",
		"kube-proxy":                     "kube-proxy",
		"--v=2":                          "--v=2",
		"/usr/bin/kubelet":               "/usr/bin/kubelet",
		"--master=https://10.0.0.1:6443": "--master=https://10.0.0.1:6443",
		"a b":                            "'a b'",
		"it's":                           `'it'\''s'`,
		"$HOME":                          "'$HOME'",
		"a*":                             "'a*'",
		"~root":                          "'~root'",
		"line\nbreak":                    "'line\nbreak'",
		"x;rm -rf /":                     "'x;rm -rf /'",
		`back\slash`:                     `'back\slash'`,
		"ünï":                            "'ünï'",
	} {
		if got := Quote(in); got != want {
			t.Errorf("Quote(%q) = %s; want %s", in, got, want)
		}
	}
}

func TestQuoteIsReadBackByTheShell(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatalf("sh: %v", err) // every system that runs nodeinit's tests has a POSIX shell
	}
	words := []string{"", "plain", "a b", "it's", `"dq"`, "$HOME", "`x`", "a\nb", "\\", "'''", "*", "-n"}
	var quoted []string
	for _, w := range words {
		quoted = append(quoted, Quote(w))
	}
	out, err := exec.Command(sh, "-c", "for a in "+strings.Join(quoted, " ")+`; do printf '%s\0' "$a"; done`).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00"); !reflect.DeepEqual(got, words) {
		t.Errorf("the shell read %q; want %q", got, words)
	}
}

func TestWriteFlags(t *testing.T) {
	c := cfg(func(c *config.Config) {
		c.Executor.Path = "/usr/local/bin/kubelet"
		c.Executor.Args = []string{"--node-ip=10.0.0.5", "--node-labels=role=node,zone=a b"}
		c.Proxy.HostnameOverride = "Node-1"
		c.Proxy.Args = []string{"--metrics-bind-address", "", "--comment=it's"}
	})
	var b strings.Builder
	if err := WriteFlags(&b, Executor(c, nil, Container{Cgroup: "/mesos/c 1", ID: "c1"}, KubeletConfig{}), Proxy(c, nil)); err != nil {
		t.Fatal(err)
	}
	want := `/usr/local/bin/kubelet --node-ip=10.0.0.5 '--node-labels=role=node,zone=a b' '--cgroup-root=/mesos/c 1'
kube-proxy --bind-address=10.0.0.5 --v=0 --proxy-mode=iptables --hostname-override=node-1 --metrics-bind-address '' '--comment=it'\''s'
`
	if b.String() != want {
		t.Errorf("WriteFlags:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestGetenvReadsTheCommandsEnvironment(t *testing.T) {
	c := Proxy(cfg(func(*config.Config) {}), Environ([]string{"PATH=/usr/bin", "A=1", "A=2"}, "/opt/bin", "/var/lib/node"))
	if got := getenv(c.Env, "PATH"); got != "/opt/bin:/var/lib/node/bin" {
		t.Errorf("PATH = %q", got)
	}
	if got := getenv(c.Env, "A"); got != "2" {
		t.Errorf("A = %q; the last of duplicates counts, as for exec", got)
	}
	if got := getenv(c.Env, "NONE"); got != "" {
		t.Errorf("NONE = %q", got)
	}
}

// Each command owns its environment: changing the executor's in place
// leaves the proxy's, built from the same slice, as it was.
func TestCommandsOwnTheirEnvironment(t *testing.T) {
	c := cfg(func(*config.Config) {})
	env := []string{"PATH=/usr/bin", "DBUS_SYSTEM_BUS_ADDRESS=unix:path=/run/dbus/system_bus_socket"}
	exe, proxy := Executor(c, env, Container{}, KubeletConfig{}), Proxy(c, env)
	exe.Env[1] = "DBUS_SYSTEM_BUS_ADDRESS=unix:path=/run/nodeinit-bus/system_bus_socket"
	if proxy.Env[1] != env[1] || env[1] != "DBUS_SYSTEM_BUS_ADDRESS=unix:path=/run/dbus/system_bus_socket" {
		t.Errorf("a change to the executor's environment reached the proxy's %q or the caller's %q", proxy.Env, env)
	}
	if got := Setenv(env, "PATH", "/bin"); got[len(got)-1] != "PATH=/bin" || env[0] != "PATH=/usr/bin" {
		t.Errorf("Setenv = %q, changed its input to %q", got, env)
	}
}

func TestKubeletRootDirIsItsFlagElseTheDefault(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "/var/lib/kubelet"},
		{[]string{"--root-dir=/data/kubelet"}, "/data/kubelet"},
		{[]string{"--root-dir", "/a", "--root-dir=/b"}, "/b"},
		{[]string{"--", "--root-dir=/not-the-kubelets"}, "/var/lib/kubelet"},
	} {
		if got := KubeletRootDir(tc.args); got != tc.want {
			t.Errorf("KubeletRootDir(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}
