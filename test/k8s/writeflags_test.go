//go:build k8s

package k8s

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// TestWriteFlagsLinesAreAcceptedByKubeProxy: every kind of command line
// nodeinit builds for kube-proxy is one the real kube-proxy of each release
// of the matrix (releases) accepts, and means what nodeinit's flags say.
// kube-proxy --write-config-to parses and validates its flags, writes the
// configuration it would run with, and exits 0: each line --write-flags
// prints is run that way and the written configuration is read back.
func TestWriteFlagsLinesAreAcceptedByKubeProxy(t *testing.T) {
	nodeinit := testenv.BuildRaced(t, "./cmd/nodeinit")
	for _, r := range releases(t) {
		t.Run(r.version, func(t *testing.T) { checkKubeProxyLines(t, nodeinit, r.bin) })
	}
}

// checkKubeProxyLines is TestWriteFlagsLinesAreAcceptedByKubeProxy for the
// kube-proxy in bin.
func checkKubeProxyLines(t *testing.T, nodeinit, bin string) {
	dir := t.TempDir()
	own := filepath.Join(dir, "kube-proxy-config.yaml")
	must(t, os.WriteFile(own, []byte(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
bindAddress: 10.9.9.9
clientConnection: {kubeconfig: /from/the/file.conf}
conntrack: {maxPerCore: 7}
`), 0o644))
	kubelet := []string{"--", "/usr/local/bin/kubelet", "--node-ip=10.0.0.5,fd00::5", "--address=127.0.0.1"}

	for _, tc := range []struct {
		name  string
		flags []string
		want  map[string]string // field path in the written KubeProxyConfiguration -> value
		logs  []string          // what kube-proxy's own log must show (its FLAG lines at --v=1)
		warn  string            // what nodeinit must warn on stderr
	}{
		{"defaults: bind address from the kubelet's --node-ip, conntrack left to kube-proxy", nil, map[string]string{
			"mode": "iptables", "bindAddress": "10.0.0.5",
			"conntrack.maxPerCore": "32768", "conntrack.min": "131072", "conntrack.tcpEstablishedTimeout": "24h0m0s",
		}, nil, ""},
		{"nftables, conntrack 0 leaves the kernel alone", []string{"--proxy-mode=nftables",
			"--conntrack-max-per-core=0", "--conntrack-min=0", "--conntrack-tcp-timeout-established=0s"}, map[string]string{
			"mode": "nftables", "conntrack.maxPerCore": "0", "conntrack.min": "0", "conntrack.tcpEstablishedTimeout": "0s",
		}, nil, ""},
		{"ipvs and every setting", []string{"--proxy-mode=ipvs", "--proxy-bind-address=10.0.0.7",
			"--conntrack-max-per-core=1000", "--conntrack-min=2000", "--conntrack-tcp-timeout-established=1h",
			"--proxy-kubeconfig=/etc/kubernetes/proxy.conf", "--master=https://10.0.0.1:6443", "--hostname-override=Node-X",
			"--proxy-logv=1"}, map[string]string{
			"mode": "ipvs", "bindAddress": "10.0.0.7", "conntrack.maxPerCore": "1000", "conntrack.min": "2000",
			"conntrack.tcpEstablishedTimeout": "1h0m0s", "clientConnection.kubeconfig": "/etc/kubernetes/proxy.conf",
			"hostnameOverride": "node-x", "logging.verbosity": "1",
		}, []string{`FLAG: --master="https://10.0.0.1:6443"`}, ""},
		{"the deprecated bindall", []string{"--proxy-bindall"}, map[string]string{"bindAddress": "0.0.0.0"}, nil,
			"--proxy-bindall) is deprecated"},
		{"proxy args come last and win", []string{"--proxy-mode=iptables", "--proxy-arg=--proxy-mode=nftables",
			"--proxy-arg=--metrics-bind-address=127.0.0.1:19999", "--proxy-arg=--iptables-localhost-nodeports=false"}, map[string]string{
			"mode": "nftables", "metricsBindAddress": "127.0.0.1:19999", "iptables.localhostNodePorts": "false",
		}, nil, ""},
		{"a kube-proxy config file: its settings, and the flags kube-proxy still honours", []string{"--proxy-arg=--config=" + own,
			"--hostname-override=Node-Y", "--master=https://10.0.0.2:6443", "--proxy-logv=2"}, map[string]string{
			"mode": "nftables", "bindAddress": "10.9.9.9", "clientConnection.kubeconfig": "/from/the/file.conf",
			"conntrack.maxPerCore": "7", "hostnameOverride": "node-y", "logging.verbosity": "2",
		}, []string{`FLAG: --master="https://10.0.0.2:6443"`}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The checks of the host as a container print on stderr too;
			// this test is about the configuration's warnings alone.
			argv := append(append([]string{nodeinit, "--write-flags", "--skip-container-checks=all", "--proxy-path=" + filepath.Join(bin, "kube-proxy")}, tc.flags...), kubelet...)
			stdout, stderr, code := runSplit(t, argv...)
			if code != 0 {
				t.Fatalf("nodeinit --write-flags exited %d: %s", code, stderr)
			}
			if tc.warn != "" && !strings.Contains(stderr, tc.warn) || tc.warn == "" && stderr != "" {
				t.Errorf("nodeinit's stderr: %q; want a warning with %q", stderr, tc.warn)
			}
			lines := strings.Split(strings.TrimSpace(stdout), "\n")
			if len(lines) != 2 {
				t.Fatalf("--write-flags printed %q; want two lines", stdout)
			}
			proxy := shellWords(t, lines[1])
			written := filepath.Join(t.TempDir(), "written.yaml")
			out, err := run(30*time.Second, append(proxy, "--write-config-to="+written)...)
			if err != nil {
				t.Fatalf("kube-proxy refused the line nodeinit built:\n  %s\n%v", lines[1], err)
			}
			data, err := os.ReadFile(written)
			must(t, err)
			var cfg map[string]any
			must(t, yaml.Unmarshal(data, &cfg))
			for path, want := range tc.want {
				if got := lookup(cfg, path); got != want {
					t.Errorf("%s = %q; want %q (line: %s)", path, got, want, lines[1])
				}
			}
			for _, l := range tc.logs {
				if !strings.Contains(out, l) {
					t.Errorf("kube-proxy's output lacks %s", l)
				}
			}
		})
	}

	// kube-proxy would ignore the mode beside its --config: nodeinit
	// refuses the line and names both.
	_, stderr, code := runSplit(t, append([]string{nodeinit, "--write-flags", "--proxy-arg=--config=" + own, "--proxy-mode=ipvs"}, kubelet...)...)
	if code != 2 || !strings.Contains(stderr, `"--proxy-mode"`) || !strings.Contains(stderr, "--config="+own) {
		t.Errorf("--proxy-mode beside --proxy-arg=--config: exit %d, stderr %q; want 2 and a message naming both", code, stderr)
	}
}

// lookup is the value at a dotted path of a decoded YAML document, as text.
func lookup(doc map[string]any, path string) string {
	var v any = doc
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return "<missing>"
		}
		if v, ok = m[k]; !ok {
			return "<missing>"
		}
	}
	return fmt.Sprint(v)
}

// runSplit runs a command, bounded, and returns its stdout, stderr and exit
// code.
func runSplit(t *testing.T, argv ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	var exit *exec.ExitError
	if err := cmd.Run(); err != nil && !errors.As(err, &exit) {
		t.Fatalf("%s: %v", argv[0], err)
	}
	return o.String(), e.String(), cmd.ProcessState.ExitCode()
}
