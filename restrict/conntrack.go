package restrict

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/nodeinit/nodeinit/config"
	"github.com/nodeinit/nodeinit/internal/cmdline"
)

// conntrackSetting is one of kube-proxy's conntrack settings that write
// a sysctl: unset, kube-proxy writes its default there.
type conntrackSetting struct {
	flag   string // kube-proxy's flag
	field  string // in its KubeProxyConfiguration's conntrack
	sysctl string // below /proc/sys/net/netfilter
	def    string // kube-proxy's default
	zero   string // the value that leaves the kernel's alone
	value  func(config.Conntrack) (string, bool)
}

var conntrackSettings = []conntrackSetting{
	{"conntrack-max-per-core", "maxPerCore", "nf_conntrack_max", "32768 per core, at least 131072", "0",
		func(c config.Conntrack) (string, bool) { return optional(c.MaxPerCore) }},
	{"conntrack-tcp-timeout-established", "tcpEstablishedTimeout", "nf_conntrack_tcp_timeout_established", "24h", "0s",
		func(c config.Conntrack) (string, bool) {
			if c.TCPTimeoutEstablished == nil {
				return "", false
			}
			return c.TCPTimeoutEstablished.String(), true
		}},
	{"conntrack-tcp-timeout-close-wait", "tcpCloseWaitTimeout", "nf_conntrack_tcp_timeout_close_wait", "1h", "0s",
		func(config.Conntrack) (string, bool) { return "", false }},
}

func optional(n *int32) (string, bool) {
	if n == nil {
		return "", false
	}
	return strconv.Itoa(int(*n)), true
}

// checkConntrack keeps kube-proxy off conntrack sysctls it cannot write.
// Since Linux 5.12.2 nf_conntrack_max is read-only outside the host's
// network namespace, and no sysctl of a network namespace is writable
// from a user namespace that does not own it; kube-proxy exits when a
// write it attempts fails (v1.35 and older write nf_conntrack_max whenever
// it differs from theirs, v1.37 only when the kernel's is lower; every
// release writes the TCP timeouts whenever they differ). A setting left unset there is passed
// as 0 (kube-proxy then leaves the kernel's value alone, as kind and k3s
// do); one the operator set is left as it is, with a warning.
func checkConntrack(p *Plan, ct *container, in Input) {
	if !isKubeProxy(in) {
		return
	}
	if ct.foreignNetns {
		p.warn("kube-proxy cannot program this network namespace: it belongs to a user namespace outside the container's, where the container's root " +
			"has no CAP_NET_ADMIN (iptables: \"Permission denied (you must be root)\"); give the container a network namespace of its own " +
			"(rootless podman's default), or run no proxy (--run-proxy=false)")
		return
	}
	px := in.Config.Proxy
	file := config.ProxyConfigFile(px.Args)
	var fileConntrack map[string]any
	if file != "" {
		fileConntrack = proxyFileConntrack(ct, file)
	}
	for _, s := range conntrackSettings {
		sysctl := "/proc/sys/net/netfilter/" + s.sysctl
		if ct.writable(sysctl) {
			continue
		}
		why := sysctl + " is read-only in this network namespace"
		if _, err := os.Stat(ct.path(sysctl)); errors.Is(err, fs.ErrNotExist) {
			why = sysctl + " does not exist (no nf_conntrack in this kernel or namespace)"
		}
		if file != "" {
			v, set := fileConntrack[s.field]
			if !set || v == nil {
				p.warn("%s, and kube-proxy takes its settings from %s, which leaves conntrack.%s to kube-proxy's default (%s): "+
					"kube-proxy will exit when it cannot write it; set conntrack.%s: 0 there", why, file, s.field, s.def, s.field)
			} else if !isZero(v) {
				p.warn("%s, and %s sets conntrack.%s: %v, which kube-proxy will exit on when it cannot write it; set it to 0", why, file, s.field, v)
			}
			continue
		}
		v, set := s.value(px.Conntrack)
		if a, ok := cmdline.Value(px.Args, s.flag); ok {
			v, set = a, true
		}
		if s.flag == "conntrack-max-per-core" && !set {
			// A floor alone is the operator's wish for a limit too.
			if m, ok := optional(px.Conntrack.Min); ok {
				v, set = "unset, with --conntrack-min="+m, m != "0"
			}
			if a, ok := cmdline.Value(px.Args, "conntrack-min"); ok {
				v, set = "unset, with --conntrack-min="+a, !isZero(a)
			}
		}
		switch {
		case !set:
			p.ProxyArgs = append(p.ProxyArgs, "--"+s.flag+"="+s.zero)
			p.adjust(config.CheckConntrack, "--"+s.flag+"="+s.zero+" for kube-proxy",
				"%s, and kube-proxy exits when it writes its default (%s) there and the write fails; %s leaves the kernel's value alone", why, s.def, s.zero)
		case !isZero(v):
			p.warn("%s, and kube-proxy's --%s is %s (the operator's setting, kept): kube-proxy will exit when it cannot write it; set it to 0", why, s.flag, v)
		}
	}
}

// isZero says whether a conntrack value means "leave the kernel alone":
// 0, "0s" or another zero duration.
func isZero(v any) bool {
	s := strings.TrimSpace(fmt.Sprint(v))
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		return n == 0
	}
	return strings.Trim(s, "0hms.") == ""
}

// proxyFileConntrack is the conntrack section of kube-proxy's own
// configuration file; nil when it has none or cannot be read (kube-proxy
// then says why itself).
func proxyFileConntrack(ct *container, file string) map[string]any {
	b, err := os.ReadFile(ct.path(file))
	if err != nil {
		return nil
	}
	var doc struct {
		Conntrack map[string]any `json:"conntrack"`
	}
	if yaml.Unmarshal(b, &doc) != nil {
		return nil
	}
	return doc.Conntrack
}
