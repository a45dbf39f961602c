//go:build k8s

package k8s

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// kubeletConfig is the kubelet's KubeletConfiguration (almost every kubelet
// flag is deprecated in favour of this file). %[1]s is the node's
// directory as the kubelet sees it, %[2]s containerd's endpoint.
//   - cgroupfs, failCgroupV1 false, failSwapOn false: these hosts have
//     cgroup v1 hierarchies, no systemd, and may have swap.
//   - every server on 127.0.0.1; x509 client authentication against the
//     test CA, no anonymous access.
//   - eviction and image garbage collection thresholds the tests never
//     reach: a nearly full disk must not evict the pods or delete the
//     imported images, which cannot be pulled again.
//   - the static pods' directory and the volume plugins' one in the node's
//     directory, not in /etc/kubernetes and /usr/libexec/kubernetes.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: %[1]s/kubelet-serving.crt
tlsPrivateKeyFile: %[1]s/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %[1]s/ca.crt}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: %[2]s
staticPodPath: %[1]s/manifests
volumePluginDir: %[1]s/volume-plugins
evictionHard: {memory.available: 1Mi, nodefs.available: 1%%, nodefs.inodesFree: 1%%, imagefs.available: 1%%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
rotateCertificates: false
`

// staticPod is the pod the kubelet runs from its manifest directory,
// without the API server; the API shows it as a mirror pod.
const staticPod = `apiVersion: v1
kind: Pod
metadata: {name: static-sleeper, namespace: default}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: sleep
    image: ` + busyboxImage + `
    imagePullPolicy: Never
    command: [sleep, "1000000"]
`

// kubeNode is one run of a node: nodeinit with the real kubelet and
// kube-proxy, as PID 1 of new pid and mount namespaces or in a podman
// container, and what the tests need to watch and stop it.
type kubeNode struct {
	t       *testing.T
	c       *cluster
	dir     string      // the node's files, as the host sees them
	bin     string      // the node's kubelet and kube-proxy (nodeSpec.bin)
	runtime *containerd // the kubelet's container runtime (nodeSpec.runtime); nil: c.containerd
	started time.Time   // when nodeinit was started
	// pid is nodeinit's pid as the host sees it; log its own log lines;
	// running whether it runs; stop sends it TERM (or stops the container)
	// and returns its exit code.
	pid     func() int
	log     func() string
	running func() bool
	stop    func(timeout time.Duration) int
	// wait waits for nodeinit to end by itself and returns its exit code.
	wait func(timeout time.Duration) int
	// created are the API objects the test made, deleted at the end.
	created []string
	// since is the time of day from which nodeinit's log is this run's:
	// a restarted container's log holds every run.
	since time.Duration
}

// nodeSpec is how a test wants its node; the zero value is a node with
// kube-proxy in iptables mode.
type nodeSpec struct {
	// mode is kube-proxy's mode: iptables (when empty), nftables or ipvs.
	mode string
	// flags are more nodeinit flags (--cgroup-parent, a restart backoff).
	flags []string
	// kubeletConfig is more of the KubeletConfiguration, whole lines of
	// YAML such as "shutdownGracePeriod: 30s\n".
	kubeletConfig string
	// env is more of nodeinit's environment (a Mesos agent's variables).
	env []string
	// bin is the directory of the node's kubelet and kube-proxy, of a
	// release of the matrix (releases); empty: the suite's own, c.bin.
	bin string
	// runtime is the kubelet's container runtime; nil: c.containerd.
	runtime *containerd
	// prefix runs first in the node's namespaces and execs nodeinit
	// (testenv.Options.Prefix).
	prefix []string
	// kubeletArgs are more of the kubelet's flags, after its own.
	kubeletArgs []string
	// apiServer is where the node's kubelet and kube-proxy reach the API
	// server (a forwarder the test can cut); empty: apiServer itself.
	apiServer string
	// binary is the nodeinit to run; empty: the race-built one of the
	// tests (testenv.Options.Binary).
	binary string
}

// runtime is the container runtime spec asks for.
func (c *cluster) runtime(spec nodeSpec) *containerd {
	if spec.runtime != nil {
		return spec.runtime
	}
	return c.containerd
}

func (s nodeSpec) proxyMode() string {
	if s.mode == "" {
		return "iptables"
	}
	return s.mode
}

// writeNodeFiles writes the kubelet's and kube-proxy's kubeconfigs, the
// KubeletConfiguration, the CA and the static pod into dir, with paths as
// the kubelet sees dir: seenAs.
func (c *cluster) writeNodeFiles(t *testing.T, dir, seenAs string, spec nodeSpec) {
	t.Helper()
	kubelet, err := c.pki.issue("kubelet-"+filepath.Base(dir), "system:node:"+nodeName, []string{"system:nodes"})
	must(t, err)
	proxy, err := c.pki.issue("kube-proxy-"+filepath.Base(dir), "system:kube-proxy", nil)
	must(t, err)
	serving, err := c.pki.issue("serving-"+filepath.Base(dir), nodeName, nil, "127.0.0.1", nodeName)
	must(t, err)
	files := map[string][]byte{
		"kubelet.conf":          c.pki.kubeconfig(cmp.Or(spec.apiServer, apiServer), kubelet),
		"kube-proxy.conf":       c.pki.kubeconfig(cmp.Or(spec.apiServer, apiServer), proxy),
		"kubelet.yaml":          fmt.Appendf(nil, kubeletConfig+spec.kubeletConfig, seenAs, c.runtime(spec).endpoint()),
		"ca.crt":                c.pki.caPEM,
		"kubelet-serving.crt":   serving.cert,
		"kubelet-serving.key":   serving.key,
		"manifests/static.yaml": []byte(staticPod),
	}
	for name, data := range files {
		p := filepath.Join(dir, name)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, data, 0o600))
	}
	must(t, os.MkdirAll(filepath.Join(dir, "volume-plugins"), 0o755))
}

// sharedKubeletDir makes /var/lib/kubelet a shared mount: the kubelet
// mounts pod volumes (the service-account token's tmpfs) below it in its
// own mount namespace, and containerd, outside it, must see them to hand
// them to the containers. putBack unmounts and removes it.
func sharedKubeletDir(t *testing.T) {
	t.Helper()
	const dir = "/var/lib/kubelet"
	must(t, os.MkdirAll(dir, 0o755))
	if mounts, _ := mountsUnder([]string{dir}); len(mounts) == 0 {
		must(t, unix.Mount(dir, dir, "", unix.MS_BIND, ""))
	}
	must(t, unix.Mount("", dir, "", unix.MS_SHARED|unix.MS_REC, ""))
}

// proxyFlags are nodeinit's flags for kube-proxy in mode, wherever the
// node runs: its node name, its servers on 127.0.0.1, and the flags that
// keep it off the host's conntrack settings (an explicit 0 is passed as 0:
// leave the kernel's value alone).
func proxyFlags(mode string) []string {
	return []string{
		"--proxy-mode=" + mode,
		"--hostname-override=" + nodeName,
		"--conntrack-max-per-core=0", "--conntrack-min=0", "--conntrack-tcp-timeout-established=0s",
		"--proxy-arg=--conntrack-tcp-timeout-close-wait=0s",
		"--proxy-arg=--iptables-localhost-nodeports=false",
		"--proxy-arg=--healthz-bind-address=127.0.0.1:10256",
		"--proxy-arg=--metrics-bind-address=127.0.0.1:10249",
		"--proxy-arg=--cluster-cidr=" + podCIDR,
	}
}

// nodeinitArgs are nodeinit's flags for a node on the host: proxyFlags,
// the kube-proxy binary and its kubeconfig in dir, and the grace period the
// node image's configuration has too.
func (c *cluster) nodeinitArgs(dir, mode string) []string { return c.nodeinitArgsFor(c.bin, dir, mode) }

// nodeinitArgsFor is nodeinitArgs with the kube-proxy in bin.
func (c *cluster) nodeinitArgsFor(bin, dir, mode string) []string {
	return append([]string{
		"--proxy-path=" + filepath.Join(bin, "kube-proxy"),
		"--proxy-kubeconfig=" + filepath.Join(dir, "kube-proxy.conf"),
		"--shutdown-grace-period=20s",
	}, proxyFlags(mode)...)
}

// kubeletArgs is the executor's command line.
func (c *cluster) kubeletArgs(kubelet, dir string) []string {
	return []string{kubelet,
		"--config=" + filepath.Join(dir, "kubelet.yaml"),
		"--kubeconfig=" + filepath.Join(dir, "kubelet.conf"),
		"--node-ip=" + c.nodeIP,
		"--hostname-override=" + nodeName,
	}
}

// startNode runs nodeinit as PID 1 of new pid and mount namespaces (the
// mount namespace keeps the host's propagation, so that the kubelet's
// mounts below the shared /var/lib/kubelet reach containerd), with the real
// kubelet as executor and the real kube-proxy, as spec says. The
// children's output goes to DIR/logs (--log-dir), so that nodeinit's own
// log holds only its lines. When the test ends the node is stopped if it
// still runs, its pods and API objects are removed, and the host is put
// back and checked.
func (c *cluster) startNode(t *testing.T, spec nodeSpec) *kubeNode {
	t.Helper()
	dir := t.TempDir()
	c.writeNodeFiles(t, dir, dir, spec)
	k := c.launchNodeWith(t, dir, testenv.Options{Env: spec.env, Prefix: spec.prefix, Binary: spec.binary}, c.nodeArgs(dir, spec)...)
	k.bin = c.nodeBin(spec)
	k.runtime = c.runtime(spec)
	return k
}

// nodeBin is the directory of the kubelet and kube-proxy spec asks for.
func (c *cluster) nodeBin(spec nodeSpec) string {
	if spec.bin != "" {
		return spec.bin
	}
	return c.bin
}

// nodeArgs are nodeinit's command line for a node in dir: its flags,
// then the kubelet's.
func (c *cluster) nodeArgs(dir string, spec nodeSpec) []string {
	bin := c.nodeBin(spec)
	args := append(c.nodeinitArgsFor(bin, dir, spec.proxyMode()), "--log-dir="+filepath.Join(dir, "logs"))
	args = append(append(args, spec.flags...), "--")
	args = append(args, c.kubeletArgs(filepath.Join(bin, "kubelet"), dir)...)
	return append(args, spec.kubeletArgs...)
}

// launchNode runs binary (the test build of nodeinit when empty) with args
// and env (added to the test's environment) as startNode runs nodeinit,
// for the node whose files are in dir, and stops it and puts the host back
// when the test ends.
func (c *cluster) launchNode(t *testing.T, dir, binary string, env []string, args ...string) *kubeNode {
	t.Helper()
	return c.launchNodeWith(t, dir, testenv.Options{Binary: binary, Env: env}, args...)
}

// launchNodeWith is launchNode with more of testenv's options: a Prefix
// that enters the namespaces of a restricted container, say.
func (c *cluster) launchNodeWith(t *testing.T, dir string, o testenv.Options, args ...string) *kubeNode {
	t.Helper()
	sharedKubeletDir(t)
	k := &kubeNode{t: t, c: c, dir: dir, bin: c.bin, runtime: c.containerd}
	o.MountNS, o.Propagation, o.Dir = true, "unchanged", dir
	n := testenv.Launch(t, o, args...)
	k.started = n.Started
	k.pid, k.log, k.running = n.Pid, n.Log, n.Running
	k.stop = func(timeout time.Duration) int {
		n.Signal(syscall.SIGTERM)
		return n.Wait(timeout)
	}
	k.wait = n.Wait
	t.Cleanup(func() {
		if n.Running() {
			if pid, err := findPID1(n); err == nil {
				_ = syscall.Kill(pid, syscall.SIGTERM)
			}
			select {
			case <-n.Done():
			case <-time.After(45 * time.Second):
				// KILL to PID 1 of the namespace ends every process in it.
				if pid, err := findPID1(n); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
				<-n.Done()
			}
		}
		k.teardown()
	})
	return k
}

// findPID1 is nodeinit's pid, when it still runs.
func findPID1(n *testenv.Node) (int, error) {
	children, err := testenv.Children(n.Outer())
	if err != nil || len(children) != 1 {
		return 0, fmt.Errorf("no nodeinit under unshare (%v)", err)
	}
	return children[0], nil
}

// teardown removes the pods through the CRI, the node's API objects, and
// what the node changed on the host, then checks the host is as before.
func (k *kubeNode) teardown() {
	t := k.t
	rt := k.runtime
	if rt == nil {
		rt = k.c.containerd
	}
	for _, err := range rt.removePods() {
		t.Error(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, p := range append(k.created, "/api/v1/namespaces/default/pods", "/api/v1/nodes/"+nodeName) {
		if err := k.c.api.remove(ctx, p); err != nil {
			t.Errorf("delete %s: %v", p, err)
		}
	}
	for _, err := range putBack(k.c.base, k.c.bin) {
		t.Errorf("put the host back: %v", err)
	}
	for _, err := range k.c.base.verify() {
		t.Errorf("after the node, the host differs: %v", err)
	}
	if t.Failed() {
		k.dumpLogs()
	}
}

// dumpLogs prints the end of every log of the node, for a failed test.
func (k *kubeNode) dumpLogs() {
	k.t.Logf("nodeinit's log:\n%s", testenv.Tail(k.log(), 60))
	for _, name := range []string{"executor.log", "proxy.log"} {
		if b, err := os.ReadFile(filepath.Join(k.dir, "logs", name)); err == nil {
			k.t.Logf("%s, last lines:\n%s", name, testenv.Tail(string(b), 40))
		}
	}
	for _, s := range k.c.servers {
		k.t.Log(s.tail())
	}
}

// children are nodeinit's children by program name (kubelet, kube-proxy),
// with their host pids.
func (k *kubeNode) children() map[string]int {
	pids, _ := testenv.Children(k.pid())
	out := map[string]int{}
	for _, p := range pids {
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p)); err == nil {
			out[filepath.Base(exe)] = p
		}
	}
	return out
}

// cmdline is a process's command line.
func cmdline(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

// waitReady waits for the Node to be Ready and returns it and how long
// after nodeinit's start that was seen.
func (k *kubeNode) waitReady(timeout time.Duration) (node, time.Duration) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	q := url.Values{"fieldSelector": {"metadata.name=" + nodeName}}
	items, err := watchUntil(ctx, k.c.api, "/api/v1/nodes", q, func(n node) string { return n.Metadata.Name },
		func(ns []node) bool { return len(ns) == 1 && ns[0].ready() || !k.running() })
	took := time.Since(k.started)
	if err != nil || len(items) != 1 || !items[0].ready() {
		k.dumpLogs()
		k.t.Fatalf("the Node did not become Ready within %v (nodeinit running: %v, error: %v, nodes: %+v)", timeout, k.running(), err, items)
	}
	return items[0], took
}

// getNode reads the Node.
func (k *kubeNode) getNode() node {
	k.t.Helper()
	var n node
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must(k.t, k.c.api.get(ctx, "/api/v1/nodes/"+nodeName, &n))
	return n
}

// shutdown is what nodeinit's log says about one TERM: when each step came,
// measured from the TERM it forwarded to the kubelet (or from the event
// named by from).
type shutdown struct {
	code                             int           // nodeinit's exit status
	kubeletStatus                    string        // the kubelet's, as nodeinit logged it
	kubeletCode                      int           // the exit code nodeinit took from it
	kubeletExit, proxyTerm, proxyEnd time.Duration // after the TERM was forwarded; proxyEnd -1: it was not running
	// proxyEarlyEnd is when kube-proxy first ended between the stop's
	// beginning and the kubelet's end, if it did (proxyEndedEarly).
	// proxyFailing: every such end was its own, as it had failed before
	// (an ipvs mode without IPVS, say; earlyProxyEnds).
	proxyEarlyEnd   time.Duration
	proxyEndedEarly bool
	proxyFailing    bool
	allEnded        time.Duration
	total           time.Duration // from the test's TERM to nodeinit's exit
	from            string        // what the times are measured from; empty: the TERM
}

func (s shutdown) String() string {
	proxy := fmt.Sprintf("kube-proxy got TERM at %v and ended at %v", s.proxyTerm.Round(time.Millisecond), s.proxyEnd.Round(time.Millisecond))
	switch {
	case s.proxyEndedEarly && s.proxyFailing:
		proxy = fmt.Sprintf("kube-proxy, failing on its own all along, ended by itself at %v; the shutdown began at %v", s.proxyEarlyEnd.Round(time.Millisecond), s.proxyTerm.Round(time.Millisecond))
	case s.proxyEndedEarly:
		proxy = fmt.Sprintf("KUBE-PROXY ENDED AT %v, BEFORE THE KUBELET; the shutdown began at %v", s.proxyEarlyEnd.Round(time.Millisecond), s.proxyTerm.Round(time.Millisecond))
	case s.proxyEnd < 0:
		proxy = fmt.Sprintf("kube-proxy was waiting on its backoff; the shutdown began at %v", s.proxyTerm.Round(time.Millisecond))
	}
	return fmt.Sprintf("kubelet exited %v after %s (%s), %s, all ended at %v, nodeinit exited %d; %v in all",
		s.kubeletExit.Round(time.Millisecond), cmp.Or(s.from, "TERM"), s.kubeletStatus, proxy, s.allEnded.Round(time.Millisecond), s.code, s.total.Round(time.Millisecond))
}

// proxyRunning tells from nodeinit's log whether kube-proxy ran at time of
// day at: its last start came after its last end.
func proxyRunning(log string, at time.Duration) bool {
	running := false
	for _, l := range nodeinitLines(log) {
		switch {
		case l.at > at:
			return running
		case strings.Contains(l.text, `task="proxy"`) && (strings.Contains(l.text, `"Started task"`) || strings.Contains(l.text, `"Restarted task"`)):
			running = true
		case strings.Contains(l.text, `"Proxy ended`):
			running = false
		}
	}
	return running
}

// proxyEnd is one end of kube-proxy in nodeinit's log: when, and its
// status ("exit code 1", "killed by signal SIGTERM").
type proxyEnd struct {
	at     time.Duration
	reason string
	text   string
}

// proxyEnds are kube-proxy's ends in nodeinit's log at or after time of
// day from and before to.
func proxyEnds(log string, from, to time.Duration) []proxyEnd {
	var out []proxyEnd
	status := regexp.MustCompile(`(?:reason|status)="([^"]*)"`)
	for _, l := range nodeinitLines(log) {
		if l.at < from || l.at >= to || !strings.Contains(l.text, `"Proxy ended`) {
			continue
		}
		e := proxyEnd{at: l.at, text: l.text}
		if m := status.FindStringSubmatch(l.text); m != nil {
			e.reason = m[1]
		}
		out = append(out, e)
	}
	return out
}

// earlyProxyEnds judges kube-proxy's ends in nodeinit's log between the
// time of day from, when the node's stop began, and kubelet, when the
// kubelet ended: a kube-proxy must serve until the kubelet has ended, so
// any end there is a problem, but one: a kube-proxy that had failed on
// its own before from (since is the run's start), and now ends the same
// way, with the same exit status, is failing on its own still. A kube-proxy
// killed by a signal did not end on its own, whatever it did before: a
// signal is what a nodeinit that stops it with the kubelet sends. It
// returns the first end (0: none), whether every end was the kube-proxy
// failing on its own, and the problems.
func earlyProxyEnds(log string, since, from, kubelet time.Duration) (first time.Duration, failing bool, problems []string) {
	own := ""
	if before := proxyEnds(log, since, from); len(before) > 0 {
		own = before[len(before)-1].reason
	}
	ends := proxyEnds(log, from, kubelet)
	if len(ends) == 0 {
		return 0, false, nil
	}
	for _, e := range ends {
		switch {
		case strings.HasPrefix(e.reason, "killed by signal"):
			problems = append(problems, fmt.Sprintf("kube-proxy was %s %v after the stop began, %v before the kubelet ended: it must run until the kubelet has ended and stop last\n%s",
				e.reason, (e.at-from).Round(time.Millisecond), (kubelet-e.at).Round(time.Millisecond), e.text))
		case own == "":
			problems = append(problems, fmt.Sprintf("kube-proxy ended (%s) %v after the stop began, %v before the kubelet ended, having never failed on its own before: it must run until the kubelet has ended and stop last\n%s",
				e.reason, (e.at-from).Round(time.Millisecond), (kubelet-e.at).Round(time.Millisecond), e.text))
		case e.reason != own:
			problems = append(problems, fmt.Sprintf("kube-proxy, which had failed on its own with %s, ended with %s %v after the stop began, %v before the kubelet ended: not its own failure\n%s",
				own, e.reason, (e.at-from).Round(time.Millisecond), (kubelet-e.at).Round(time.Millisecond), e.text))
		}
	}
	return ends[0].at, len(problems) == 0, problems
}

// stopAndCheck stops the node with TERM (or podman stop) and checks the
// order: the kubelet gets TERM and exits first, kube-proxy gets TERM only
// then, and nodeinit exits with the kubelet's status. kube-proxy must run
// from the stop's beginning (the TERM forwarded to the kubelet, or the
// drain before it) until the kubelet has ended, and end last
// (shutdownFrom).
func (k *kubeNode) stopAndCheck(timeout time.Duration) shutdown {
	k.t.Helper()
	start := time.Now()
	code := k.stop(timeout)
	s := shutdown{code: code, total: time.Since(start)}
	log := k.log()
	term, _ := k.lineAfter(log, "Forwarded signal to the executor", k.since)
	from := term
	for _, l := range nodeinitLines(log) {
		if l.at >= k.since && l.at < term && strings.Contains(l.text, `"Draining the node before the executor stops"`) {
			from = l.at
			break
		}
	}
	k.shutdownFrom(&s, log, from, term)
	if s.kubeletStatus != "exit code 0" {
		k.t.Errorf("the kubelet ended with %s on TERM; want exit code 0", s.kubeletStatus)
	}
	return s
}

// shutdownFrom reads from nodeinit's log what happened once the executor
// ended, the first time after time of day after: the kubelet's status,
// kube-proxy's TERM and end, the end of every process, each measured from
// time of day ref; and checks the order and that nodeinit's exit code,
// s.code, is the kubelet's. after is when the node's stop began (the TERM
// forwarded to the kubelet or the drain before it, the kill): from then
// until the kubelet has ended, kube-proxy must run, or wait on its
// backoff; it gets its TERM only once the kubelet has ended, and ends
// after it. An end of kube-proxy in between fails the test, unless
// kube-proxy had failed on its own before and ends the same way again
// (earlyProxyEnds; s.proxyFailing): a kube-proxy in ipvs mode without
// IPVS, say.
func (k *kubeNode) shutdownFrom(s *shutdown, log string, after, ref time.Duration) {
	k.t.Helper()
	at := func(msg string, after time.Duration) (time.Duration, string) { return k.lineAfter(log, msg, after) }
	kubelet, line := at("Executor ended", after)
	proxyTerm, _ := at("Shutting down: sent TERM to the proxy and every other process", kubelet)
	s.proxyEnd = -1
	if proxyRunning(log, kubelet) {
		s.proxyEnd, _ = at("Proxy ended", proxyTerm)
		s.proxyEnd -= ref
	}
	early, failing, problems := earlyProxyEnds(log, k.since, after, kubelet)
	if early > 0 {
		s.proxyEarlyEnd, s.proxyEndedEarly, s.proxyFailing = early-ref, true, failing
	}
	for _, p := range problems {
		k.t.Error(p)
	}
	all, _ := at("All processes have ended", proxyTerm)
	s.kubeletExit, s.proxyTerm, s.allEnded = kubelet-ref, proxyTerm-ref, all-ref
	if m := regexp.MustCompile(`status="([^"]*)" exitCode=(\d+)`).FindStringSubmatch(line); m != nil {
		s.kubeletStatus = m[1]
		s.kubeletCode, _ = strconv.Atoi(m[2])
	} else {
		k.t.Fatalf("no status in %q", line)
	}
	if s.code != s.kubeletCode {
		k.t.Errorf("nodeinit exited %d, the kubelet's status was %s (code %d)", s.code, s.kubeletStatus, s.kubeletCode)
	}
}

// lineAfter is the first line of nodeinit's log that holds the message
// msg at or after time of day after, and its time; the test fails when
// there is none.
func (k *kubeNode) lineAfter(log, msg string, after time.Duration) (time.Duration, string) {
	k.t.Helper()
	for _, l := range nodeinitLines(log) {
		if l.at >= after && strings.Contains(l.text, `"`+msg+`"`) {
			return l.at, l.text
		}
	}
	k.t.Fatalf("nodeinit's log has no %q after %v:\n%s", msg, after, testenv.Tail(log, 30))
	return 0, ""
}

// logLine is one line of nodeinit's klog output with its time of day.
type logLine struct {
	at   time.Duration
	text string
}

// klogTime matches the header of a klog line: I1130 15:58:32.150892.
var klogTime = regexp.MustCompile(`^[IWEF]\d{4} (\d{2}):(\d{2}):(\d{2})\.(\d{6}) `)

// nodeinitLines are the klog lines of log with their times of day, in
// order; a run that passes midnight is not expected of a test.
func nodeinitLines(log string) []logLine {
	var out []logLine
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := klogTime.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		h, _ := strconv.Atoi(m[1])
		mi, _ := strconv.Atoi(m[2])
		s, _ := strconv.Atoi(m[3])
		us, _ := strconv.Atoi(m[4])
		out = append(out, logLine{time.Duration(h)*time.Hour + time.Duration(mi)*time.Minute + time.Duration(s)*time.Second + time.Duration(us)*time.Microsecond, sc.Text()})
	}
	return out
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestEarlyProxyEnds: an end of kube-proxy between the stop's beginning
// and the kubelet's end is a problem, unless kube-proxy had failed on its
// own before and ends the same way again; an end by a signal always is,
// and so is one of a kube-proxy that waited on its backoff at the stop,
// was started again and ended.
func TestEarlyProxyEnds(t *testing.T) {
	line := func(at, text string) string { return "I1203 10:00:" + at + "       1 task.go:88] " + text }
	var (
		failed    = line("01.000000", `"Proxy ended; restarting after backoff" reason="exit code 1" ran="15ms" backoff="2s"`)
		restarted = line("03.000000", `"Restarted task" task="proxy" pid=40 restarts=2`)
		termed    = line("05.010000", `"Proxy ended; restarting after backoff" reason="killed by signal SIGTERM" ran="2.01s" backoff="2s"`)
		fails     = line("05.010000", `"Proxy ended; restarting after backoff" reason="exit code 1" ran="2.01s" backoff="2s"`)
		other     = line("05.010000", `"Proxy ended; restarting after backoff" reason="exit code 2" ran="2.01s" backoff="2s"`)
		later     = line("05.200000", `"Proxy ended" pid=40 status="killed by signal SIGTERM"`)
	)
	const (
		since   = 10 * time.Hour
		stop    = 10*time.Hour + 5*time.Second
		kubelet = 10*time.Hour + 5*time.Second + 100*time.Millisecond
	)
	for _, c := range []struct {
		name     string
		log      []string
		problems int
		failing  bool
	}{
		{"kube-proxy ends after the kubelet", []string{restarted, later}, 0, false},
		{"it fails on its own again, as before", []string{failed, restarted, fails}, 0, true},
		{"it dies with the kubelet, never having failed", []string{restarted, termed}, 1, false},
		{"it dies with the kubelet, having failed before", []string{failed, restarted, termed}, 1, false},
		{"it ends otherwise than it failed before", []string{failed, restarted, other}, 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			first, failing, problems := earlyProxyEnds(strings.Join(c.log, "\n"), since, stop, kubelet)
			if len(problems) != c.problems || failing != c.failing {
				t.Errorf("problems %q, failing %v; want %d problems, failing %v", problems, failing, c.problems, c.failing)
			}
			if c.problems > 0 && first != stop+10*time.Millisecond {
				t.Errorf("the first early end at %v; want %v", first, stop+10*time.Millisecond)
			}
		})
	}
	// A kube-proxy waiting on its backoff when the stop began, started
	// again before the kubelet ended and killed with it.
	log := strings.Join([]string{failed, line("05.020000", `"Restarted task" task="proxy" pid=41 restarts=3`),
		line("05.050000", `"Proxy ended; restarting after backoff" reason="killed by signal SIGTERM" ran="30ms" backoff="2s"`)}, "\n")
	if _, _, problems := earlyProxyEnds(log, since, stop, kubelet); len(problems) != 1 {
		t.Errorf("a kube-proxy started during the stop and killed before the kubelet's end: problems %q; want 1", problems)
	}
}
