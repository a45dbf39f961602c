package config

import (
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nodeinit/nodeinit/identity"
	"github.com/nodeinit/nodeinit/internal/cmdline"
)

// Validate returns every bad field of c, in file order; none means c is
// usable. Executor.Path may be empty here: a file may leave the executor to
// the command line, and Flags.Resolve requires one at the end.
func (c *Config) Validate() []FieldError {
	var v validator
	v.oneOf("kind", c.Kind, Kind)
	v.oneOf("apiVersion", c.APIVersion, APIVersion)
	v.executor(&c.Executor)
	v.proxy(&c.Proxy)
	v.runtime(&c.Runtime)
	v.duration("shutdownGracePeriod", c.ShutdownGracePeriod, 0)

	v.text("logging.dir", c.Logging.Dir)
	if c.Logging.MaxSize < 1 || c.Logging.MaxSize > maxMebibytes {
		v.add(ErrorTypeInvalid, "logging.maxSize", c.Logging.MaxSize, "must be between 1Mi and "+maxQuantity())
	}
	v.nonNegative("logging.maxBackups", int64(c.Logging.MaxBackups))
	v.nonNegative("logging.maxAge", int64(c.Logging.MaxAge))
	v.nonNegative("logging.v", int64(c.Logging.V))

	v.mountNamespace(&c.MountNamespace)
	v.cgroup(&c.Cgroup)
	v.duration("gracefulNodeShutdown.delay", c.GracefulNodeShutdown.Delay, 0)
	v.containerChecks(&c.ContainerChecks)
	v.identity(&c.Identity)
	v.readyURL(c.ReadyURL)
	v.text("pathOverride", c.PathOverride)
	return v.errs
}

// executor checks the executor's program and arguments.
func (v *validator) executor(e *Executor) {
	v.text("executor.path", e.Path)
	if e.Path == "" && len(e.Args) > 0 {
		v.add(ErrorTypeRequired, "executor.path", nil, "executor.args are given without the program to run")
	}
	v.list("executor.args", e.Args)
}

// proxy checks the proxy's settings, and those a --config file of
// kube-proxy's would make it ignore.
func (v *validator) proxy(p *Proxy) {
	if p.Run && p.Path == "" {
		v.add(ErrorTypeRequired, "proxy.path", nil, "the proxy is run (proxy.run), so its program must be named")
	}
	v.text("proxy.path", p.Path)
	v.list("proxy.args", p.Args)
	v.oneOf("proxy.mode", p.Mode, proxyModes...)
	if p.BindAddress != "" {
		if _, err := netip.ParseAddr(p.BindAddress); err != nil {
			v.add(ErrorTypeInvalid, "proxy.bindAddress", p.BindAddress, "must be an IP address like 10.0.0.5 or fd00::5")
		}
	}
	v.nonNegative("proxy.logV", int64(p.LogV))
	if n := p.Conntrack.MaxPerCore; n != nil {
		v.nonNegative("proxy.conntrack.maxPerCore", int64(*n))
	}
	if n := p.Conntrack.Min; n != nil {
		v.nonNegative("proxy.conntrack.min", int64(*n))
	}
	if d := p.Conntrack.TCPTimeoutEstablished; d != nil {
		v.duration("proxy.conntrack.tcpTimeoutEstablished", *d, 0)
	}
	v.text("proxy.kubeconfig", p.Kubeconfig)
	v.text("proxy.master", p.Master)
	if p.HostnameOverride != "" && !isDNSSubdomain(strings.ToLower(p.HostnameOverride)) {
		v.add(ErrorTypeInvalid, "proxy.hostnameOverride", p.HostnameOverride,
			"must be a node name: DNS labels of letters, digits and '-', joined by '.', at most 253 characters")
	}
	if file := ProxyConfigFile(p.Args); file != "" {
		v.ignoredByProxyConfig(p, file)
	}
	b := p.RestartBackoff
	v.duration("proxy.restartBackoff.initial", b.Initial, time.Nanosecond)
	v.duration("proxy.restartBackoff.max", b.Max, time.Nanosecond)
	if b.Initial.Duration > 0 && b.Max.Duration > 0 && b.Max.Duration < b.Initial.Duration {
		v.errs = append(v.errs, FieldError{Type: ErrorTypeInvalid, Field: "proxy.restartBackoff.max", BadValue: b.Max,
			Detail:  fmt.Sprintf("must not be less than proxy.restartBackoff.initial (%s)", b.Initial),
			related: "proxy.restartBackoff.initial"})
	}
	v.duration("proxy.restartBackoff.reset", b.Reset, 0)
}

// mountNamespace checks that the mount namespace's settings agree.
func (v *validator) mountNamespace(m *MountNamespace) {
	if m.Private && m.MakeRShared {
		v.errs = append(v.errs, FieldError{Type: ErrorTypeForbidden, Field: "mountNamespace.makeRShared", BadValue: true,
			Detail:  "may not be combined with mountNamespace.private: a private namespace cannot share its mounts",
			related: "mountNamespace.private"})
	}
}

// cgroup checks the cgroup paths: the parent, the Mesos prefix, the v2 leaf.
func (v *validator) cgroup(g *Cgroup) {
	v.text("cgroup.parent", g.Parent)
	if p := g.Parent; p != "" && (!strings.HasPrefix(p, "/") || hasDotElement(p)) {
		v.add(ErrorTypeInvalid, "cgroup.parent", p, `must be an absolute cgroup path such as "/kubepods/node", without "." or ".." elements`)
	}
	switch prefix := strings.Trim(g.MesosPrefix, "/"); {
	case g.MesosPrefix == "":
		v.add(ErrorTypeRequired, "cgroup.mesosPrefix", nil, `the Mesos agent's --cgroups_root, usually "mesos"`)
	case prefix == "" || hasDotElement(prefix) || strings.Contains(prefix, "//"):
		// Each element must name a cgroup: an empty or "." one would make
		// an unclean path, which the kernel resolves but /proc/self/cgroup
		// never shows, so joining it could not be verified.
		v.add(ErrorTypeInvalid, "cgroup.mesosPrefix", g.MesosPrefix,
			`must be the Mesos agent's --cgroups_root, a cgroup path such as "mesos" or "system.slice/mesos", without empty, "." or ".." elements`)
	}
	v.text("cgroup.mesosPrefix", g.MesosPrefix)
	switch l := g.V2Leaf; {
	case l == "":
		v.add(ErrorTypeRequired, "cgroup.v2Leaf", nil, "the child cgroup nodeinit moves into on cgroup v2")
	case l == "." || l == ".." || strings.ContainsAny(l, "/\x00"):
		v.add(ErrorTypeInvalid, "cgroup.v2Leaf", l, "must be a single cgroup directory name")
	}
}

// containerChecks checks the iptables backend and the checks to skip.
func (v *validator) containerChecks(k *ContainerChecks) {
	v.oneOf("containerChecks.iptablesBackend", k.IPTablesBackend, iptablesBackends...)
	for i, name := range k.Skip {
		v.oneOf(fmt.Sprintf("containerChecks.skip[%d]", i), name, append(slices.Clone(ContainerCheckNames), SkipAllChecks)...)
	}
}

// identity checks the image's machine-id and the directory the node's ids
// are kept in.
func (v *validator) identity(i *Identity) {
	if id := i.ImageMachineID; id != "" && !identity.Valid(id) {
		v.add(ErrorTypeInvalid, "identity.imageMachineID", id, "must be a machine-id: 32 lowercase hexadecimal digits, not all zero")
	}
	v.text("identity.dir", i.Dir)
	if d := i.Dir; d != "" && !strings.HasPrefix(d, "/") {
		v.add(ErrorTypeInvalid, "identity.dir", d, "must be an absolute path")
	}
}

// readyURL checks the URL the readiness probe asks.
func (v *validator) readyURL(ready string) {
	if ready != "" {
		u, err := url.Parse(ready)
		if err != nil || u.Scheme != "http" || u.Host == "" {
			v.add(ErrorTypeInvalid, "readyURL", ready, "must be an http URL (no TLS: the kubelet's healthz is plain HTTP) like http://127.0.0.1:10248/healthz")
		}
	}
}

// ProxyConfigFile is the file kube-proxy reads its settings from when args
// (proxy.args) give it one with --config=FILE or --config FILE, the last
// one counting as in kube-proxy; empty when they do not.
func ProxyConfigFile(args []string) string {
	file, _ := cmdline.Value(args, "config")
	return file
}

// ignoredByProxyConfig rejects the proxy settings that kube-proxy ignores
// when it reads a --config file (all but --v, --master and
// --hostname-override): nodeinit would pass them, and kube-proxy would run
// with the file's values instead without a word. A setting left at its
// default is not passed then, so it is no error.
func (v *validator) ignoredByProxyConfig(p *Proxy, file string) {
	detail := fmt.Sprintf("ignored by kube-proxy, which takes its settings from --config=%s (in proxy.args): set it in that KubeProxyConfiguration instead", file)
	ignored := func(field string, set bool, bad any) {
		if set {
			v.errs = append(v.errs, FieldError{Type: ErrorTypeForbidden, Field: field, BadValue: bad, Detail: detail, related: "proxy.args"})
		}
	}
	c := p.Conntrack
	ignored("proxy.mode", p.Mode != Default().Proxy.Mode, p.Mode)
	ignored("proxy.bindAll", p.BindAll, true)
	ignored("proxy.bindAddress", p.BindAddress != "", p.BindAddress)
	ignored("proxy.conntrack.maxPerCore", c.MaxPerCore != nil, deref(c.MaxPerCore))
	ignored("proxy.conntrack.min", c.Min != nil, deref(c.Min))
	ignored("proxy.conntrack.tcpTimeoutEstablished", c.TCPTimeoutEstablished != nil, deref(c.TCPTimeoutEstablished))
	ignored("proxy.kubeconfig", p.Kubeconfig != "", p.Kubeconfig)
}

// maxSocketPath is the longest path a unix socket's address holds
// (sun_path is 108 bytes with its NUL).
const maxSocketPath = 107

// runtime checks the runtime's settings: those that only matter with a
// runtime are checked only then.
func (v *validator) runtime(r *Runtime) {
	v.text("runtime.path", r.Path)
	v.list("runtime.args", r.Args)
	v.text("runtime.socket", r.Socket)
	if r.Path == "" {
		if len(r.Args) > 0 {
			v.errs = append(v.errs, FieldError{Type: ErrorTypeForbidden, Field: "runtime.args", BadValue: r.Args,
				Detail: "given without the runtime to run (runtime.path)", related: "runtime.path"})
		}
		return
	}
	switch s := r.Socket; {
	case s == "":
		v.add(ErrorTypeRequired, "runtime.socket", nil, "the unix socket the runtime serves the CRI on, like "+DefaultRuntimeSocket)
	case !strings.HasPrefix(s, "/"):
		v.add(ErrorTypeInvalid, "runtime.socket", s, "must be the absolute path of a unix socket, like "+DefaultRuntimeSocket+" (without unix://)")
	case len(s) > maxSocketPath:
		v.add(ErrorTypeInvalid, "runtime.socket", s, fmt.Sprintf("must be at most %d bytes: a unix socket's address holds no more", maxSocketPath))
	}
	v.duration("runtime.waitTimeout", r.WaitTimeout, time.Nanosecond)
}

// deref is *p, or nil for a nil p.
func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// Warnings are the settings of c that still work but should go: one line
// each, for the log. None means nothing to say.
func (c *Config) Warnings() []string {
	var w []string
	if c.Proxy.BindAll {
		w = append(w, "proxy.bindAll (--proxy-bindall) is deprecated and does nothing useful: since Kubernetes 1.26 "+
			"kube-proxy's --bind-address binds nothing, and 0.0.0.0 leaves kube-proxy to find the node's IP, as no address does")
	}
	return w
}

type validator struct{ errs []FieldError }

func (v *validator) add(t ErrorType, field string, bad any, detail string) {
	v.errs = append(v.errs, FieldError{Type: t, Field: field, BadValue: bad, Detail: detail})
}

// oneOf requires s to be one of the supported values.
func (v *validator) oneOf(field, s string, supported ...string) {
	quoted := make([]string, len(supported))
	for i, x := range supported {
		if s == x {
			return
		}
		quoted[i] = strconv.Quote(x)
	}
	if s == "" {
		v.add(ErrorTypeRequired, field, nil, "supported values: "+strings.Join(quoted, ", "))
		return
	}
	v.add(ErrorTypeUnsupported, field, s, "supported values: "+strings.Join(quoted, ", "))
}

// text rejects what no program argument, path or environment value can hold.
func (v *validator) text(field, s string) {
	if strings.ContainsRune(s, 0) {
		v.add(ErrorTypeInvalid, field, s, "must not contain a NUL byte")
	}
}

func (v *validator) list(field string, l []string) {
	for i, s := range l {
		v.text(fmt.Sprintf("%s[%d]", field, i), s)
	}
}

func (v *validator) nonNegative(field string, n int64) {
	if n < 0 {
		v.add(ErrorTypeInvalid, field, n, "must be non-negative")
	}
}

func (v *validator) duration(field string, d Duration, least time.Duration) {
	switch {
	case d.Duration < 0:
		v.add(ErrorTypeInvalid, field, d, "must be non-negative")
	case d.Duration < least:
		v.add(ErrorTypeInvalid, field, d, "must be positive")
	}
}

// hasDotElement reports whether the slash-separated path p has a "." or
// ".." element.
func hasDotElement(p string) bool {
	elems := strings.Split(p, "/")
	return slices.Contains(elems, ".") || slices.Contains(elems, "..")
}

// isDNSSubdomain is Kubernetes' rule for node names (RFC 1123 subdomain).
func isDNSSubdomain(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
				return false
			}
		}
	}
	return true
}
