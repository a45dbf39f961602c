package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/test/testenv"
	"sigs.k8s.io/yaml"
)

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func i32(v int32) *int32 { return &v }

const header = "kind: NodeInitConfig\napiVersion: nodeinit/v1alpha1\n"

func TestLoadKeepsDefaultsForFieldsTheFileLeavesOut(t *testing.T) {
	for name, text := range map[string]string{
		"yaml": header + "proxy:\n  mode: ipvs\n  args: [--port, 8080]\ncgroup:\n  v2Evacuate: false\n",
		"json": `{"kind":"NodeInitConfig","apiVersion":"nodeinit/v1alpha1","proxy":{"mode":"ipvs","args":["--port","8080"]},"cgroup":{"v2Evacuate":false}}`,
	} {
		t.Run(name, func(t *testing.T) {
			got, err := Load(writeFile(t, "c."+name, text))
			if err != nil {
				t.Fatal(err)
			}
			want := Default()
			want.Proxy.Mode = "ipvs"
			want.Proxy.Args = []string{"--port", "8080"} // a YAML number in a string list is that string
			f := false
			want.Cgroup.V2Evacuate = &f
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Load:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestLoadReadsDurationsAndSizes(t *testing.T) {
	got, err := Load(writeFile(t, "c.yaml", header+
		"shutdownGracePeriod: 1m30s\nproxy:\n  conntrack:\n    tcpTimeoutEstablished: 24h\nlogging:\n  maxSize: 1.5Gi\n  maxBackups: 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got.ShutdownGracePeriod.Duration != 90*time.Second || got.Proxy.Conntrack.TCPTimeoutEstablished == nil ||
		got.Proxy.Conntrack.TCPTimeoutEstablished.Duration != 24*time.Hour || got.Logging.MaxSize != 1536 || got.Logging.MaxBackups != 0 {
		t.Errorf("got grace %v, timeout %v, size %v, backups %d", got.ShutdownGracePeriod, got.Proxy.Conntrack.TCPTimeoutEstablished,
			got.Logging.MaxSize, got.Logging.MaxBackups)
	}
	got, err = Load(writeFile(t, "c.yaml", header+"logging:\n  maxSize: 20971520\n"))
	if err != nil || got.Logging.MaxSize != 20 {
		t.Errorf("maxSize in plain bytes: got %v, %v; want 20Mi", got.Logging.MaxSize, err)
	}
}

// A conntrack field left out stays unset (kube-proxy's default); one written
// as 0, as files written for earlier releases do, is an explicit 0.
func TestLoadTellsConntrackUnsetFromZero(t *testing.T) {
	got, err := Load(writeFile(t, "c.yaml", header+"proxy:\n  conntrack:\n    maxPerCore: 0\n    min: null\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := got.Proxy.Conntrack
	if c.MaxPerCore == nil || *c.MaxPerCore != 0 || c.Min != nil || c.TCPTimeoutEstablished != nil {
		t.Errorf("conntrack: maxPerCore %v, min %v, tcpTimeoutEstablished %v; want 0, unset, unset", c.MaxPerCore, c.Min, c.TCPTimeoutEstablished)
	}
	_, err = Load(writeFile(t, "bad.yaml", header+"proxy:\n  conntrack:\n    maxPerCore: lots\n    tcpTimeoutEstablished: 1d\n"))
	if err == nil || !strings.Contains(err.Error(), `proxy.conntrack.maxPerCore: Invalid value: "lots": must be a whole number that fits in 32 bits`) ||
		!strings.Contains(err.Error(), `proxy.conntrack.tcpTimeoutEstablished: Invalid value: "1d": must be a duration like "10s" or "1m30s"`) {
		t.Errorf("mistyped conntrack fields: %v", err)
	}
}

func TestWarningsNameDeprecatedSettings(t *testing.T) {
	c := Default()
	if w := c.Warnings(); len(w) != 0 {
		t.Errorf("defaults warn: %q", w)
	}
	c.Proxy.BindAll = true
	if w := c.Warnings(); len(w) != 1 || !strings.Contains(w[0], "--proxy-bindall") || !strings.Contains(w[0], "deprecated") {
		t.Errorf("bindAll: warnings %q; want one naming --proxy-bindall as deprecated", w)
	}
}

func TestLoadReportsEveryUnknownFieldAndMistypedValue(t *testing.T) {
	p := writeFile(t, "bad.yaml", header+`
bogus: 1
executor:
  path: [kubelet]
  args: [a, {b: c}]
proxy:
  logv: 2
  logV: two
  run: "yes"
  conntrack: 5
  restartBackoff:
    initial: 5
    max: soon
logging:
  maxSize: 10MB
  maxAge: 1.5
cgroup:
  v2Evacuate: auto
`)
	_, err := Load(p)
	var fe *FileError
	if !errors.As(err, &fe) {
		t.Fatalf("Load: %v; want a *FileError", err)
	}
	want := "Invalid NodeInitConfig " + p + `
  bogus: Unknown field
  cgroup.v2Evacuate: Invalid value: "auto": must be true or false
  executor.args[1]: Invalid value: {"b":"c"}: must be a string
  executor.path: Invalid value: ["kubelet"]: must be a string
  logging.maxAge: Invalid value: 1.5: must be a whole number that fits in 64 bits
  logging.maxSize: Invalid value: "10MB": must be a quantity like "10Mi", "1.5Gi", "500M" or plain bytes
  proxy.conntrack: Invalid value: 5: must be a mapping of fields
  proxy.logV: Invalid value: "two": must be a whole number that fits in 32 bits
  proxy.logv: Unknown field: did you mean "logV"?
  proxy.restartBackoff.initial: Invalid value: 5: must be a duration string like "10s" or "1m30s"
  proxy.restartBackoff.max: Invalid value: "soon": must be a duration like "10s" or "1m30s"
  proxy.run: Invalid value: "yes": must be true or false`
	if err.Error() != want {
		t.Errorf("error:\n%s\nwant:\n%s", err, want)
	}
}

func TestLoadNamesTheFileItCannotUse(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.yaml")
	_, err := Load(missing)
	if want := "cannot read config file " + missing + ": no such file or directory"; err == nil || err.Error() != want {
		t.Errorf("missing file: %v; want %q", err, want)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v does not wrap fs.ErrNotExist", err)
	}
	var fe *FileError
	if !errors.As(err, &fe) {
		t.Errorf("missing file: %T; want a *FileError (exit 255)", err)
	}
	if _, err := Load(dir); err == nil || err.Error() != "cannot read config file "+dir+": is a directory" {
		t.Errorf("directory: %v", err)
	}

	for _, tc := range []struct{ name, text, want string }{
		{"syntax", header + "proxy:\n  mode: [ipvs\n", "Invalid NodeInitConfig %s\n  yaml: line 4: did not find expected ',' or ']'"},
		{"duplicate", header + "proxy:\n  mode: ipvs\n  mode: nftables\n", "Invalid NodeInitConfig %s\n  yaml: unmarshal errors:\n  line 5: key \"mode\" already set in map"},
		{"scalar", "42\n", "Invalid NodeInitConfig %s\n  the document must be a mapping of NodeInitConfig fields"},
		{"list", "- a\n", "Invalid NodeInitConfig %s\n  the document must be a mapping of NodeInitConfig fields"},
		{"empty", "", ""},
	} {
		p := writeFile(t, tc.name+".yaml", tc.text)
		_, err := Load(p)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if want := strings.ReplaceAll(tc.want, "%s", p); err == nil || err.Error() != want {
			t.Errorf("%s:\n%v\nwant:\n%s", tc.name, err, want)
		}
	}

	big := writeFile(t, "big.yaml", header+"#"+strings.Repeat("x", maxFileSize)+"\n")
	if _, err := Load(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("huge file: %v", err)
	}
}

func TestLoadRequiresKindAndAPIVersion(t *testing.T) {
	c, err := Load(writeFile(t, "c.yaml", "proxy:\n  mode: ipvs\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := render(c.Validate())
	want := `kind: Required value: supported values: "NodeInitConfig"
apiVersion: Required value: supported values: "nodeinit/v1alpha1"`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func render(errs []FieldError) string {
	var lines []string
	for _, e := range errs {
		lines = append(lines, e.Error())
	}
	return strings.Join(lines, "\n")
}

func TestDefaultIsValid(t *testing.T) {
	c := Default()
	if errs := c.Validate(); len(errs) > 0 {
		t.Errorf("Default().Validate():\n%s", render(errs))
	}
}

func TestValidateRejects(t *testing.T) {
	d := func(s string) Duration {
		v, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		return Duration{v}
	}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"wrong kind", func(c *Config) { c.Kind = "Pod" }, `kind: Unsupported value: "Pod": supported values: "NodeInitConfig"`},
		{"wrong apiVersion", func(c *Config) { c.APIVersion = "v1" }, `apiVersion: Unsupported value: "v1": supported values: "nodeinit/v1alpha1"`},
		{"args without executor", func(c *Config) { c.Executor.Args = []string{"--v=2"} }, `executor.path: Required value: executor.args are given without the program to run`},
		{"NUL in executor arg", func(c *Config) { c.Executor.Path = "kubelet"; c.Executor.Args = []string{"ok", "a\x00b"} }, `executor.args[1]: Invalid value: "a\x00b": must not contain a NUL byte`},
		{"proxy without path", func(c *Config) { c.Proxy.Path = "" }, `proxy.path: Required value: the proxy is run (proxy.run), so its program must be named`},
		{"userspace mode", func(c *Config) { c.Proxy.Mode = "userspace" }, `proxy.mode: Unsupported value: "userspace": supported values: "iptables", "ipvs", "nftables"`},
		{"unknown container check", func(c *Config) { c.ContainerChecks.Skip = []string{"swap", "dev-kmsg"} },
			`containerChecks.skip[1]: Unsupported value: "dev-kmsg": supported values: "cgroupfs", "user-namespace", "nofile", "conntrack", "kmsg", "swap", "rootfs-device", "inotify", "resolv-conf", "iptables", "all"`},
		{"unknown iptables backend", func(c *Config) { c.ContainerChecks.IPTablesBackend = "xtables" },
			`containerChecks.iptablesBackend: Unsupported value: "xtables": supported values: "auto", "legacy", "nft", "none"`},
		{"empty mode", func(c *Config) { c.Proxy.Mode = "" }, `proxy.mode: Required value: supported values: "iptables", "ipvs", "nftables"`},
		{"bind address not an IP", func(c *Config) { c.Proxy.BindAddress = "node-1" }, `proxy.bindAddress: Invalid value: "node-1": must be an IP address like 10.0.0.5 or fd00::5`},
		{"negative logV", func(c *Config) { c.Proxy.LogV = -1 }, `proxy.logV: Invalid value: -1: must be non-negative`},
		{"negative maxPerCore", func(c *Config) { c.Proxy.Conntrack.MaxPerCore = i32(-5) }, `proxy.conntrack.maxPerCore: Invalid value: -5: must be non-negative`},
		{"negative conntrack min", func(c *Config) { c.Proxy.Conntrack.Min = i32(-5) }, `proxy.conntrack.min: Invalid value: -5: must be non-negative`},
		{"negative tcp timeout", func(c *Config) { t := d("-1h"); c.Proxy.Conntrack.TCPTimeoutEstablished = &t }, `proxy.conntrack.tcpTimeoutEstablished: Invalid value: "-1h0m0s": must be non-negative`},
		{"mode with a kube-proxy config file", func(c *Config) {
			c.Proxy.Mode, c.Proxy.Args = "nftables", []string{"--v=2", "--config=/etc/kube-proxy.yaml"}
		}, `proxy.mode: Forbidden: ignored by kube-proxy, which takes its settings from --config=/etc/kube-proxy.yaml (in proxy.args): set it in that KubeProxyConfiguration instead`},
		{"every setting kube-proxy ignores with a config file", func(c *Config) {
			c.Proxy.Args = []string{"--config", "/k.yaml"}
			c.Proxy.BindAll, c.Proxy.BindAddress, c.Proxy.Kubeconfig = true, "10.0.0.5", "/kubeconfig"
			c.Proxy.Conntrack = Conntrack{MaxPerCore: i32(0), Min: i32(1), TCPTimeoutEstablished: &Duration{}}
		}, `proxy.bindAll: Forbidden: ignored by kube-proxy, which takes its settings from --config=/k.yaml (in proxy.args): set it in that KubeProxyConfiguration instead
proxy.bindAddress: Forbidden: ignored by kube-proxy, which takes its settings from --config=/k.yaml (in proxy.args): set it in that KubeProxyConfiguration instead
proxy.conntrack.maxPerCore: Forbidden: ignored by kube-proxy, which takes its settings from --config=/k.yaml (in proxy.args): set it in that KubeProxyConfiguration instead
proxy.conntrack.min: Forbidden: ignored by kube-proxy, which takes its settings from --config=/k.yaml (in proxy.args): set it in that KubeProxyConfiguration instead
proxy.conntrack.tcpTimeoutEstablished: Forbidden: ignored by kube-proxy, which takes its settings from --config=/k.yaml (in proxy.args): set it in that KubeProxyConfiguration instead
proxy.kubeconfig: Forbidden: ignored by kube-proxy, which takes its settings from --config=/k.yaml (in proxy.args): set it in that KubeProxyConfiguration instead`},
		{"NUL in kubeconfig", func(c *Config) { c.Proxy.Kubeconfig = "\x00" }, `proxy.kubeconfig: Invalid value: "\x00": must not contain a NUL byte`},
		{"NUL in master", func(c *Config) { c.Proxy.Master = "\x00" }, `proxy.master: Invalid value: "\x00": must not contain a NUL byte`},
		{"hostname not a node name", func(c *Config) { c.Proxy.HostnameOverride = "node_1" }, `proxy.hostnameOverride: Invalid value: "node_1": must be a node name: DNS labels of letters, digits and '-', joined by '.', at most 253 characters`},
		{"zero initial backoff", func(c *Config) { c.Proxy.RestartBackoff.Initial = d("0s") }, `proxy.restartBackoff.initial: Invalid value: "0s": must be positive`},
		{"negative max backoff", func(c *Config) { c.Proxy.RestartBackoff.Max = d("-1s") }, `proxy.restartBackoff.max: Invalid value: "-1s": must be non-negative`},
		{"max below initial", func(c *Config) { c.Proxy.RestartBackoff.Max = d("500ms") }, `proxy.restartBackoff.max: Invalid value: "500ms": must not be less than proxy.restartBackoff.initial (1s)`},
		{"negative reset", func(c *Config) { c.Proxy.RestartBackoff.Reset = d("-1m") }, `proxy.restartBackoff.reset: Invalid value: "-1m0s": must be non-negative`},
		{"negative grace period", func(c *Config) { c.ShutdownGracePeriod = d("-1s") }, `shutdownGracePeriod: Invalid value: "-1s": must be non-negative`},
		{"NUL in log dir", func(c *Config) { c.Logging.Dir = "/var/\x00" }, `logging.dir: Invalid value: "/var/\x00": must not contain a NUL byte`},
		{"zero log size", func(c *Config) { c.Logging.MaxSize = 0 }, `logging.maxSize: Invalid value: "0Mi": must be between 1Mi and 8Ei`},
		{"negative backups", func(c *Config) { c.Logging.MaxBackups = -1 }, `logging.maxBackups: Invalid value: -1: must be non-negative`},
		{"negative age", func(c *Config) { c.Logging.MaxAge = -1 }, `logging.maxAge: Invalid value: -1: must be non-negative`},
		{"negative v", func(c *Config) { c.Logging.V = -1 }, `logging.v: Invalid value: -1: must be non-negative`},
		{"private and rshared", func(c *Config) { c.MountNamespace.Private, c.MountNamespace.MakeRShared = true, true }, `mountNamespace.makeRShared: Forbidden: may not be combined with mountNamespace.private: a private namespace cannot share its mounts`},
		{"NUL in cgroup parent", func(c *Config) { c.Cgroup.Parent = "/\x00" }, `cgroup.parent: Invalid value: "/\x00": must not contain a NUL byte`},
		{"image machine-id in capitals", func(c *Config) { c.Identity.ImageMachineID = "0123456789ABCDEF0123456789ABCDEF" },
			`identity.imageMachineID: Invalid value: "0123456789ABCDEF0123456789ABCDEF": must be a machine-id: 32 lowercase hexadecimal digits, not all zero`},
		{"image machine-id all zero", func(c *Config) { c.Identity.ImageMachineID = "00000000000000000000000000000000" },
			`identity.imageMachineID: Invalid value: "00000000000000000000000000000000": must be a machine-id: 32 lowercase hexadecimal digits, not all zero`},
		{"image machine-id uninitialized", func(c *Config) { c.Identity.ImageMachineID = "uninitialized" },
			`identity.imageMachineID: Invalid value: "uninitialized": must be a machine-id: 32 lowercase hexadecimal digits, not all zero`},
		{"relative identity dir", func(c *Config) { c.Identity.Dir = "var/lib/node" }, `identity.dir: Invalid value: "var/lib/node": must be an absolute path`},
		{"relative cgroup parent", func(c *Config) { c.Cgroup.Parent = "kubepods" }, `cgroup.parent: Invalid value: "kubepods": must be an absolute cgroup path such as "/kubepods/node", without "." or ".." elements`},
		{"cgroup parent escaping upwards", func(c *Config) { c.Cgroup.Parent = "/a/../.." }, `cgroup.parent: Invalid value: "/a/../..": must be an absolute cgroup path such as "/kubepods/node", without "." or ".." elements`},
		{"no mesos prefix", func(c *Config) { c.Cgroup.MesosPrefix = "" }, `cgroup.mesosPrefix: Required value: the Mesos agent's --cgroups_root, usually "mesos"`},
		{"mesos prefix of slashes", func(c *Config) { c.Cgroup.MesosPrefix = "//" }, `cgroup.mesosPrefix: Invalid value: "//": must be the Mesos agent's --cgroups_root, a cgroup path such as "mesos" or "system.slice/mesos", without empty, "." or ".." elements`},
		{"mesos prefix with an empty element", func(c *Config) { c.Cgroup.MesosPrefix = "a//b" }, `cgroup.mesosPrefix: Invalid value: "a//b": must be the Mesos agent's --cgroups_root, a cgroup path such as "mesos" or "system.slice/mesos", without empty, "." or ".." elements`},
		{"mesos prefix dot", func(c *Config) { c.Cgroup.MesosPrefix = "mesos/." }, `cgroup.mesosPrefix: Invalid value: "mesos/.": must be the Mesos agent's --cgroups_root, a cgroup path such as "mesos" or "system.slice/mesos", without empty, "." or ".." elements`},
		{"no v2 leaf", func(c *Config) { c.Cgroup.V2Leaf = "" }, `cgroup.v2Leaf: Required value: the child cgroup nodeinit moves into on cgroup v2`},
		{"v2 leaf with a slash", func(c *Config) { c.Cgroup.V2Leaf = "a/b" }, `cgroup.v2Leaf: Invalid value: "a/b": must be a single cgroup directory name`},
		{"v2 leaf dot-dot", func(c *Config) { c.Cgroup.V2Leaf = ".." }, `cgroup.v2Leaf: Invalid value: "..": must be a single cgroup directory name`},
		{"ready URL not http", func(c *Config) { c.ReadyURL = "127.0.0.1:10248" }, `readyURL: Invalid value: "127.0.0.1:10248": must be an http URL (no TLS: the kubelet's healthz is plain HTTP) like http://127.0.0.1:10248/healthz`},
		{"NUL in PATH", func(c *Config) { c.PathOverride = "/bin\x00" }, `pathOverride: Invalid value: "/bin\x00": must not contain a NUL byte`},
		{"runtime args without the runtime", func(c *Config) { c.Runtime.Args = []string{"--config=/c.toml"} },
			`runtime.args: Forbidden: given without the runtime to run (runtime.path)`},
		{"runtime without a socket", func(c *Config) { c.Runtime.Path, c.Runtime.Socket = "containerd", "" },
			`runtime.socket: Required value: the unix socket the runtime serves the CRI on, like /run/containerd/containerd.sock`},
		{"runtime socket as a URL", func(c *Config) { c.Runtime.Path, c.Runtime.Socket = "containerd", "unix:///run/c.sock" },
			`runtime.socket: Invalid value: "unix:///run/c.sock": must be the absolute path of a unix socket, like /run/containerd/containerd.sock (without unix://)`},
		{"runtime socket too long", func(c *Config) { c.Runtime.Path, c.Runtime.Socket = "containerd", "/"+strings.Repeat("s", 107) },
			`runtime.socket: Invalid value: "/` + strings.Repeat("s", 107) + `": must be at most 107 bytes: a unix socket's address holds no more`},
		{"zero runtime wait", func(c *Config) { c.Runtime.Path, c.Runtime.WaitTimeout = "containerd", d("0s") },
			`runtime.waitTimeout: Invalid value: "0s": must be positive`},
		{"NUL in a runtime arg", func(c *Config) { c.Runtime.Path, c.Runtime.Args = "containerd", []string{"\x00"} },
			`runtime.args[0]: Invalid value: "\x00": must not contain a NUL byte`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.change(&c)
			if got := render(c.Validate()); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestValidateAcceptsWhatAnOperatorWrites(t *testing.T) {
	c := Default()
	c.Proxy.HostnameOverride = "Node-1.Example.COM" // lower-cased when passed on
	c.Proxy.BindAddress = "fd00::5"
	c.ReadyURL = "http://[::1]:10248/healthz"
	c.Proxy.Run, c.Proxy.Path = false, ""                    // no proxy, no program needed
	c.Runtime.Socket, c.Runtime.WaitTimeout = "", Duration{} // no runtime: its socket and wait unused
	if errs := c.Validate(); len(errs) > 0 {
		t.Errorf("Validate:\n%s", render(errs))
	}
}

func TestExampleConfigIsValidAndComplete(t *testing.T) {
	const example = "../images/nodeinit.yaml"
	c, err := Load(example)
	if err != nil {
		t.Fatal(err)
	}
	if errs := c.Validate(); len(errs) > 0 {
		t.Fatalf("%s:\n%s", example, render(errs))
	}
	if c.Executor.Path == "" || c.Cgroup.V2Evacuate == nil {
		t.Errorf("%s: the example should name an executor and set cgroup.v2Evacuate", example)
	}
	// Every field of the format appears in the example, so it documents them all.
	data, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	var missing []string
	var walk func(path string, m map[string]any, tp reflect.Type)
	walk = func(path string, m map[string]any, tp reflect.Type) {
		for name, f := range jsonFields(tp) {
			v, ok := m[name]
			if !ok {
				missing = append(missing, join(path, name))
				continue
			}
			if sub, ok := v.(map[string]any); ok && f.Type.Kind() == reflect.Struct {
				walk(join(path, name), sub, f.Type)
			}
		}
	}
	walk("", raw, reflect.TypeFor[Config]())
	if len(missing) > 0 {
		t.Errorf("%s does not show %v", example, missing)
	}
}

func TestAConfigFileOthersCanWriteIsWarnedAbout(t *testing.T) {
	testenv.RequireRoot(t) // chown
	for _, tc := range []struct {
		name     string
		mode     os.FileMode
		uid, gid int
		want     string // in the warning; "" for none
	}{
		{"root's, 0644", 0o644, 0, 0, ""},
		{"root's, group root may write", 0o664, 0, 0, ""},
		{"everyone may write", 0o646, 0, 0, "writable by everyone"},
		{"group 65534 may write", 0o664, 0, 65534, "writable by group 65534"},
		{"owned by uid 65534", 0o600, 65534, 0, "owned by uid 65534"},
	} {
		file := filepath.Join(t.TempDir(), "nodeinit.yaml")
		if err := os.WriteFile(file, []byte("kind: NodeInitConfig\napiVersion: nodeinit/v1alpha1\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(file, tc.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(file, tc.uid, tc.gid); err != nil {
			t.Fatal(err)
		}
		_, warning, err := load(file)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if tc.want == "" && warning != "" || tc.want != "" && !strings.Contains(warning, tc.want) || tc.want != "" && !strings.Contains(warning, file) {
			t.Errorf("%s: warning %q, want one naming the file and %q", tc.name, warning, tc.want)
		}
	}
}
