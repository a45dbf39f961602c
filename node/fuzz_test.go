package node

import (
	"strings"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/config"
)

// FuzzArguments checks that no setting ever becomes two arguments or a flag
// of its own: each value nodeinit passes stays inside its one --name=value
// argument (a value starting with "-" included), proxy.args follow verbatim,
// and the executor's own arguments keep their order.
func FuzzArguments(f *testing.F) {
	f.Add("10.0.0.1", "-v=9 --x", "/k conf", "https://m", "Node-A", "--master=evil", "/mesos/c 1", "id", "--node-ip=10.0.0.2", int64(time.Hour), false, true)
	f.Add("", "--proxy-mode=userspace", "", "", "", "", "", "", "--node-ip", int64(-1), true, false)
	f.Add("-", "", "--", "-", "\n--v=5", "=", "--cgroup-root", "", "--cgroup-root", int64(1), false, true)
	f.Add("10.0.0.1", "nftables", "/k", "", "", "--config=/etc/kube-proxy.yaml", "", "", "--node-ip", int64(0), false, false)
	f.Fuzz(func(t *testing.T, bind, mode, kubeconfig, master, hostname, proxyArg, cgroup, id, execArg string, timeout int64, bindAll, contain bool) {
		c := config.Default()
		c.Executor.Path = "kubelet"
		c.Executor.Args = []string{execArg, "--node-ip=" + bind, execArg}
		c.Executor.ContainPodResources = contain
		c.Proxy.BindAll, c.Proxy.BindAddress, c.Proxy.Mode = bindAll, bind, mode
		if timeout >= 0 {
			c.Proxy.Conntrack.TCPTimeoutEstablished = &config.Duration{Duration: time.Duration(timeout)}
		}
		c.Proxy.Kubeconfig, c.Proxy.Master, c.Proxy.HostnameOverride = kubeconfig, master, hostname
		c.Proxy.Args = []string{proxyArg, proxyArg}

		p := Proxy(&c, nil)
		want := map[string]string{"v": "0", "proxy-mode": mode}
		if bindAll {
			want["bind-address"] = "0.0.0.0"
		} else if bind != "" {
			want["bind-address"] = bind
		} else if a := executorNodeIP(c.Executor.Args); a != "" {
			want["bind-address"] = a
		}
		if timeout >= 0 {
			want["conntrack-tcp-timeout-established"] = time.Duration(timeout).String()
		}
		for name, v := range map[string]string{"kubeconfig": kubeconfig, "master": master, "hostname-override": strings.ToLower(hostname)} {
			if v != "" {
				want[name] = v
			}
		}
		if config.ProxyConfigFile(c.Proxy.Args) != "" {
			// kube-proxy reads these from its own file then.
			for _, name := range []string{"bind-address", "proxy-mode", "conntrack-tcp-timeout-established", "kubeconfig"} {
				delete(want, name)
			}
		}
		n := len(p.Args) - len(c.Proxy.Args)
		if n != len(want) {
			t.Fatalf("proxy args %q: %d built, want %d (%v)", p.Args, n, len(want), want)
		}
		for _, a := range p.Args[:n] {
			name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			if !ok || !strings.HasPrefix(a, "--") || want[name] != value {
				t.Fatalf("proxy arg %q is not one --name=value of a setting (want %v)", a, want)
			}
			delete(want, name)
		}
		if tail := p.Args[n:]; tail[0] != proxyArg || tail[1] != proxyArg {
			t.Fatalf("proxy.args not verbatim at the end: %q", p.Args)
		}

		e := Executor(&c, nil, Container{Cgroup: cgroup, ID: id}, KubeletConfig{})
		added := len(e.Args) - len(c.Executor.Args)
		if added < 0 || added > 1 {
			t.Fatalf("executor args %q from %q", e.Args, c.Executor.Args)
		}
		rest := e.Args
		if added == 1 {
			var i int
			for i = range e.Args {
				if e.Args[i] == "--cgroup-root="+cgroup {
					break
				}
			}
			if !contain || cgroup == "" || cgroup == "/" {
				t.Fatalf("--cgroup-root added with containPodResources %v, cgroup %q", contain, cgroup)
			}
			rest = append(append([]string(nil), e.Args[:i]...), e.Args[i+1:]...)
		}
		for i, a := range c.Executor.Args {
			if rest[i] != a {
				t.Fatalf("executor args %q lost or reordered %q", e.Args, c.Executor.Args)
			}
		}
		if id != "" && e.Env[len(e.Env)-1] != containerIDEnv+"="+id {
			t.Fatalf("executor env %q lacks the container id", e.Env)
		}
	})
}
