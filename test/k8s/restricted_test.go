//go:build k8s

package k8s

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/cgroups"
	"github.com/nodeinit/nodeinit/test/testenv"
)

// The node's own network namespace: an address of its own on a veth whose
// other end is on the host without one, and the API server's 127.0.0.1:6443
// forwarded into it by the test.
const (
	netnsNodeIP   = "10.250.0.2"
	netnsHostLink = "nodeinit-vh"
	netnsNodeLink = "nodeinit-vn"
	// outsideEndpoint is the endpoint of a Service without a selector:
	// kube-proxy programs it whether or not anything answers there.
	outsideEndpoint = "10.250.0.100"
)

const outsideService = `apiVersion: v1
kind: Service
metadata: {name: outside, namespace: default}
spec:
  type: ClusterIP
  ports: [{port: 80, targetPort: 8080, protocol: TCP}]
`

const outsideEndpoints = `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: outside-1, namespace: default, labels: {kubernetes.io/service-name: outside}}
addressType: IPv4
ports: [{name: "", port: 8080, protocol: TCP}]
endpoints: [{addresses: ["` + outsideEndpoint + `"], conditions: {ready: true}}]
`

// TestNodeInANetworkNamespace runs the node in a network namespace of its
// own, as a container runtime gives it, with kube-proxy's conntrack left
// unset. There nf_conntrack_max is read-only (Linux 5.12.2 and later) and
// kube-proxy up to v1.35 at least exits when it cannot write its default
// (it writes whenever the value differs; v1.37 only raises a lower one):
// without the check (--skip-container-checks=conntrack) nodeinit restarts
// the oldest release's kube-proxy on every backoff; with it, nodeinit
// passes --conntrack-max-per-core=0, logs why once, and the suite's
// kube-proxy stays up and programs a Service in the node's namespace while
// the host's sysctls stay as they were.
func TestNodeInANetworkNamespace(t *testing.T) {
	c := getCluster(t)
	old := releases(t)[1]
	flags := []string{"--proxy-restart-backoff=500ms", "--proxy-restart-backoff-max=1s"}

	t.Run("without the check kube-proxy "+old.version+" is restarted on every backoff", func(t *testing.T) {
		ns := newNodeNetns(t)
		k := c.startNodeInNetnsFrom(t, ns, old.bin, append(flags, "--skip-container-checks=conntrack")...)
		var after time.Duration
		for range 3 {
			after = k.waitLog(30*time.Second, after, `"Proxy ended; restarting after backoff"`).at + time.Microsecond
		}
		proxyLog, _ := os.ReadFile(filepath.Join(k.dir, "logs", "proxy.log"))
		if !strings.Contains(string(proxyLog), "nf_conntrack_max") {
			t.Errorf("kube-proxy's log does not name nf_conntrack_max:\n%s", testenv.Tail(string(proxyLog), 20))
		}
		t.Logf("kube-proxy exited 3 times on nf_conntrack_max: %s", lastLineWith(string(proxyLog), "nf_conntrack_max"))
		ns.stopNode(k)
	})

	t.Run("with the check kube-proxy stays up and programs a Service", func(t *testing.T) {
		ns := newNodeNetns(t)
		k := c.startNodeInNetns(t, ns, flags...)
		line := k.waitLog(30*time.Second, 0, `"Adjusted the node to its container"`, `check="conntrack"`)
		if !strings.Contains(line.text, "nf_conntrack_max is read-only") {
			t.Errorf("the adjustment does not say why: %s", line.text)
		}
		if n := len(k.lines(`"Adjusted the node to its container"`, `check="conntrack"`)); n != 1 {
			t.Errorf("%d log lines for the conntrack adjustment; want 1", n)
		}
		_, took := k.waitReady(90 * time.Second)
		t.Logf("Node Ready %v after nodeinit started, in its own network namespace", took.Round(10*time.Millisecond))
		proxy := k.children()["kube-proxy"]
		if args := strings.Join(cmdline(proxy), " "); !strings.Contains(args, "--conntrack-max-per-core=0") {
			t.Errorf("kube-proxy's command line lacks --conntrack-max-per-core=0: %s", args)
		}
		k.create("/api/v1/namespaces/default/services", "outside", outsideService)
		k.create("/apis/discovery.k8s.io/v1/namespaces/default/endpointslices", "outside-1", outsideEndpoints)
		var s service
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		must(t, k.c.api.get(ctx, "/api/v1/namespaces/default/services/outside", &s))
		start := time.Now()
		var rules string
		for {
			rules, _ = ns.run(10*time.Second, "iptables-save", "-t", "nat")
			if strings.Contains(rules, "-d "+s.Spec.ClusterIP+"/32") && strings.Contains(rules, "--to-destination "+outsideEndpoint+":8080") {
				break
			}
			if time.Since(start) > 60*time.Second {
				k.dumpLogs()
				t.Fatalf("kube-proxy did not program Service outside (%s) in the node's network namespace; its nat table:\n%s", s.Spec.ClusterIP, rules)
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Logf("kube-proxy programmed Service outside (%s -> %s:8080) in the node's network namespace %v after it was created",
			s.Spec.ClusterIP, outsideEndpoint, time.Since(start).Round(10*time.Millisecond))
		if ended := k.lines(`"Proxy ended`); len(ended) > 0 {
			t.Errorf("kube-proxy ended while the node ran: %v", ended)
		}
		if now := k.children()["kube-proxy"]; now != proxy {
			t.Errorf("kube-proxy is pid %d, was %d: it was restarted", now, proxy)
		}
		ns.stopNode(k)
	})
}

// lines are the lines of nodeinit's log that hold every one of words.
func (k *kubeNode) lines(words ...string) []string {
	var out []string
	for _, l := range nodeinitLines(k.log()) {
		all := true
		for _, w := range words {
			all = all && strings.Contains(l.text, w)
		}
		if all {
			out = append(out, l.text)
		}
	}
	return out
}

func lastLineWith(text, word string) string {
	last := ""
	for l := range strings.SplitSeq(text, "\n") {
		if strings.Contains(l, word) {
			last = l
		}
	}
	return last
}

// nodeNetns is a network namespace the test made for a node, kept by a
// bind mount of its own in the test's directory (nodeinit's mount
// namespace sees it), with a veth to the host and the API server forwarded
// into it.
type nodeNetns struct {
	t    *testing.T
	path string // the namespace's file
	api  net.Listener
	// closers end what else the test made in the namespace: its sockets
	// keep it, and the veth, alive.
	closers []func() error
	// mounted: path is a mount the test made to keep the namespace.
	mounted bool
}

// newNodeNetns makes the namespace: loopback up, netnsNodeIP on the veth's
// end inside, the other end up on the host without an address, and a
// listener on its 127.0.0.1:6443 that the test forwards to the API server.
func newNodeNetns(t *testing.T) *nodeNetns {
	t.Helper()
	path := filepath.Join(t.TempDir(), "net")
	must(t, os.WriteFile(path, nil, 0o600))
	if _, err := run(10*time.Second, "unshare", "--net="+path, "true"); err != nil {
		t.Fatal(err)
	}
	ns := wireNodeNetns(t, path)
	ns.mounted = true
	return ns
}

// wireNodeNetns gives the network namespace at path (its file, or
// /proc/PID/ns/net) the veth, the address and the API server, as
// newNodeNetns does.
func wireNodeNetns(t *testing.T, path string) *nodeNetns {
	t.Helper()
	ns := &nodeNetns{t: t, path: path}
	t.Cleanup(ns.close) // again, if the node's cleanup has not
	// "netns 1": the other end goes to the namespace of the host's PID 1.
	for _, argv := range [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "link", "add", netnsNodeLink, "type", "veth", "peer", "name", netnsHostLink, "netns", "1"},
		{"ip", "addr", "add", netnsNodeIP + "/24", "dev", netnsNodeLink},
		{"ip", "link", "set", netnsNodeLink, "up"},
		// A route for the Services' addresses, which kube-proxy rewrites
		// once the packet is routed.
		{"ip", "route", "add", "default", "dev", netnsNodeLink},
	} {
		if _, err := ns.run(10*time.Second, argv...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := run(10*time.Second, "ip", "link", "set", netnsHostLink, "up"); err != nil {
		t.Fatal(err)
	}
	l, err := ns.listen("127.0.0.1:6443")
	must(t, err)
	ns.api = l
	go ns.forward(strings.TrimPrefix(apiServer, "https://"))
	return ns
}

// run runs a command in the namespace.
func (ns *nodeNetns) run(timeout time.Duration, argv ...string) (string, error) {
	return run(timeout, append([]string{"nsenter", "--net=" + ns.path, "--"}, argv...)...)
}

// listen opens a TCP listener inside the namespace.
func (ns *nodeNetns) listen(addr string) (l net.Listener, err error) {
	err = ns.inside(func() error {
		l, err = net.Listen("tcp", addr)
		return err
	})
	return l, err
}

// dial connects from inside the namespace.
func (ns *nodeNetns) dial(network, addr string) (c net.Conn, err error) {
	err = ns.inside(func() error {
		c, err = net.DialTimeout(network, addr, 2*time.Second)
		return err
	})
	return c, err
}

// inside runs f on a thread of its own that enters the namespace and comes
// back (a socket stays in the namespace it was made in). A thread that
// cannot come back is never used again.
func (ns *nodeNetns) inside(f func() error) error {
	runtime.LockOSThread()
	own, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer own.Close()
	target, err := os.Open(ns.path)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter the node's network namespace: %w", err)
	}
	ferr := f()
	if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err != nil {
		return errors.Join(ferr, fmt.Errorf("return to the test's network namespace: %w", err)) // the thread stays locked and dies with its goroutine
	}
	runtime.UnlockOSThread()
	return ferr
}

// forward copies every connection to the namespace's listener to addr on
// the host, both ways, until the listener is closed.
func (ns *nodeNetns) forward(addr string) {
	for {
		in, err := ns.api.Accept()
		if err != nil {
			return
		}
		go func() {
			defer in.Close()
			out, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				return
			}
			defer out.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
			go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
			<-done
		}()
	}
}

// stopNode stops the node with TERM and checks the order, then ends the
// namespace, so that the node's teardown finds the host's links as before.
func (ns *nodeNetns) stopNode(k *kubeNode) {
	ns.t.Helper()
	ns.t.Logf("TERM: %v", k.stopAndCheck(90*time.Second))
	ns.close()
}

// close ends the namespace: the forwarder, its mount, and waits for the
// veth to go with it (once no process is left in it).
func (ns *nodeNetns) close() {
	for _, c := range ns.closers {
		_ = c()
	}
	ns.closers = nil
	if ns.api != nil {
		ns.api.Close()
		ns.api = nil
	}
	if ns.mounted {
		if err := unix.Unmount(ns.path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			ns.t.Errorf("unmount the node's network namespace: %v", err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := net.InterfaceByName(netnsHostLink); err != nil {
			return
		}
		if time.Now().After(deadline) {
			ns.t.Errorf("the veth %s is still on the host 10s after its namespace ended", netnsHostLink)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startNodeInNetns starts a node as startNode does, inside ns: the kubelet
// with ns's address as its node IP, kube-proxy with its conntrack
// settings unset (its flags as proxyFlags has them, less the conntrack
// ones), and more nodeinit flags.
func (c *cluster) startNodeInNetns(t *testing.T, ns *nodeNetns, flags ...string) *kubeNode {
	t.Helper()
	return c.startNodeInNetnsFrom(t, ns, "", flags...)
}

// startNodeInNetnsFrom is startNodeInNetns with the kubelet and kube-proxy
// in bin (the suite's when empty).
func (c *cluster) startNodeInNetnsFrom(t *testing.T, ns *nodeNetns, bin string, flags ...string) *kubeNode {
	t.Helper()
	dir := t.TempDir()
	c.writeNodeFiles(t, dir, dir, nodeSpec{})
	var args []string
	for _, a := range c.nodeArgs(dir, nodeSpec{flags: flags, bin: bin}) {
		switch {
		case strings.HasPrefix(strings.TrimPrefix(a, "--proxy-arg="), "--conntrack-"):
		case strings.HasPrefix(a, "--node-ip="):
			args = append(args, "--node-ip="+netnsNodeIP)
		default:
			args = append(args, a)
		}
	}
	k := c.launchNodeWith(t, dir, testenv.Options{Prefix: []string{"nsenter", "--net=" + ns.path, "--"}}, args...)
	k.bin = c.nodeBin(nodeSpec{bin: bin})
	// Before the node's teardown, which checks the host's links: the node
	// must have ended for its namespace, and the veth with it, to go.
	t.Cleanup(func() {
		if k.running() {
			k.stop(60 * time.Second)
		}
		ns.close()
	})
	return k
}

// hideDevKmsg makes /dev a tmpfs of nodeinit's mount namespace with the
// host's null, zero, random, urandom and full, and no kmsg, as in a
// container without it. /dev is made private first, so nothing of it
// reaches the host; $NODE_DIR is the node's directory.
const hideDevKmsg = `mount --make-rprivate /dev
mkdir -p "$NODE_DIR/hostdev"
mount --rbind /dev "$NODE_DIR/hostdev"
mount -t tmpfs -o mode=755 tmpfs /dev
for d in null zero random urandom full; do touch /dev/$d; mount --bind "$NODE_DIR/hostdev/$d" /dev/$d; done
umount -l "$NODE_DIR/hostdev"`

// fakeSwap puts a /proc/swaps that lists a swap file over the real one, in
// nodeinit's mount namespace only: the kubelet reads swap from there.
const fakeSwap = `printf 'Filename\tType\tSize\tUsed\tPriority\n/swapfile                               file\t\t1048572\t\t0\t\t-2\n' > "$NODE_DIR/swaps"
mount --bind "$NODE_DIR/swaps" /proc/swaps`

// startNodeIn starts a node as startNode does, after setup (a shell script
// run in nodeinit's mount namespace first) has made the container
// restricted; edit, when set, changes the kubelet's configuration file.
func (c *cluster) startNodeIn(t *testing.T, setup string, edit func(string) string, flags ...string) *kubeNode {
	t.Helper()
	return c.startRestricted(t, restriction{setup: setup, edit: edit}, flags...)
}

// restriction is how a test makes nodeinit's container restricted.
type restriction struct {
	// setup is a shell script run in nodeinit's mount namespace first,
	// with the node's directory in $NODE_DIR.
	setup string
	// edit, when set, changes the kubelet's configuration file.
	edit func(string) string
	// readOnly are mount points remounted read-only there.
	readOnly []string
	// kubeletArgs, when set, are more of the kubelet's flags, given the
	// node's directory.
	kubeletArgs func(dir string) []string
}

// startRestricted starts a node as startNode does, in the container r
// makes, with more nodeinit flags.
func (c *cluster) startRestricted(t *testing.T, r restriction, flags ...string) *kubeNode {
	t.Helper()
	dir := t.TempDir()
	c.writeNodeFiles(t, dir, dir, nodeSpec{})
	if r.edit != nil {
		file := filepath.Join(dir, "kubelet.yaml")
		b, err := os.ReadFile(file)
		must(t, err)
		must(t, os.WriteFile(file, []byte(r.edit(string(b))), 0o600))
	}
	o := testenv.Options{ReadOnly: r.readOnly, Env: []string{"NODE_DIR=" + dir}}
	if r.setup != "" {
		o.Prefix = []string{"/bin/sh", "-c", "set -e\n" + r.setup + "\nexec \"$@\"", "setup"}
	}
	args := c.nodeArgs(dir, nodeSpec{flags: flags})
	if r.kubeletArgs != nil {
		args = append(args, r.kubeletArgs(dir)...)
	}
	return c.launchNodeWith(t, dir, o, args...)
}

// proxyLog is kube-proxy's output.
func (k *kubeNode) proxyLog() string {
	b, _ := os.ReadFile(filepath.Join(k.dir, "logs", "proxy.log"))
	return string(b)
}

// executorLog is the kubelet's output.
func (k *kubeNode) executorLog() string {
	b, _ := os.ReadFile(filepath.Join(k.dir, "logs", "executor.log"))
	return string(b)
}

// TestNodeWithoutDevKmsg: in a container without /dev/kmsg the real
// kubelet exits (its OOM watcher cannot open it) when the check is
// skipped; with it, nodeinit binds /dev/null over /dev/kmsg, says once
// that kernel OOM events are not seen, and the Node is Ready.
func TestNodeWithoutDevKmsg(t *testing.T) {
	c := getCluster(t)
	t.Run("without the check the kubelet exits", func(t *testing.T) {
		k := c.startNodeIn(t, hideDevKmsg, nil, "--skip-container-checks=kmsg")
		code := k.wait(60 * time.Second)
		line := lastLineWith(k.executorLog(), "/dev/kmsg")
		if code == 0 || line == "" {
			t.Fatalf("nodeinit exited %d; want the kubelet's failure on /dev/kmsg; the kubelet's log:\n%s", code, testenv.Tail(k.executorLog(), 20))
		}
		t.Logf("the kubelet exited, nodeinit with it (%d): %s", code, line)
	})
	t.Run("with the check the Node is Ready", func(t *testing.T) {
		k := c.startNodeIn(t, hideDevKmsg, nil)
		k.waitLog(30*time.Second, 0, `"Adjusted the node to its container"`, `check="kmsg"`)
		if a := k.lines(`"Adjusted the node to its container"`, `check="kmsg"`); len(a) != 1 {
			t.Errorf("want one line for the /dev/kmsg adjustment; log:\n%s", k.log())
		}
		if w := k.lines("The kubelet sees no kernel OOM events"); len(w) != 1 {
			t.Errorf("want one warning that the kernel's OOM events are not seen; log:\n%s", k.log())
		}
		_, took := k.waitReady(90 * time.Second)
		k.staticPodThenStop(took, "with /dev/null as /dev/kmsg")
	})
}

// TestNodeWithSwapOn: swap is on and the kubelet's failSwapOn is left to
// its default (true). Skipping the check, the real kubelet starts and
// exits on the swap; with it nodeinit names failSwapOn in one line and
// exits 1 before starting anything; with failSwapOn: false, as that line
// says, the Node is Ready.
func TestNodeWithSwapOn(t *testing.T) {
	c := getCluster(t)
	unset := func(conf string) string { return strings.Replace(conf, "failSwapOn: false\n", "", 1) }
	t.Run("without the check the kubelet exits", func(t *testing.T) {
		k := c.startNodeIn(t, fakeSwap, unset, "--skip-container-checks=swap")
		code := k.wait(60 * time.Second)
		line := lastLineWith(k.executorLog(), "swap")
		if code == 0 || !strings.Contains(line, "swap on is not supported") {
			t.Fatalf("nodeinit exited %d; want the kubelet's failure on swap; the kubelet's log:\n%s", code, testenv.Tail(k.executorLog(), 20))
		}
		t.Logf("the kubelet exited, nodeinit with it (%d): %s", code, line)
	})
	t.Run("with the check one line names failSwapOn", func(t *testing.T) {
		k := c.startNodeIn(t, fakeSwap, unset)
		if code := k.wait(30 * time.Second); code != 1 {
			t.Errorf("nodeinit exited %d; want 1", code)
		}
		errs := k.lines("E")
		errs = slices.DeleteFunc(errs, func(l string) bool { return !strings.HasPrefix(l, "E") })
		if len(errs) != 1 || !strings.Contains(errs[0], "Swap is on (/swapfile)") || !strings.Contains(errs[0], "set failSwapOn: false in "+filepath.Join(k.dir, "kubelet.yaml")) {
			t.Errorf("want one error line naming the swap and failSwapOn in the kubelet's file; got %q", errs)
		}
		if log := k.executorLog(); log != "" {
			t.Errorf("the kubelet was started:\n%s", testenv.Tail(log, 10))
		}
		t.Logf("%s", errs)
	})
	t.Run("with failSwapOn false the Node is Ready", func(t *testing.T) {
		k := c.startNodeIn(t, fakeSwap, nil)
		_, took := k.waitReady(90 * time.Second)
		// The static pod runs before the stop: a node stopped while its
		// container starts can leave a runc init containerd will not delete.
		k.staticPodThenStop(took, "with swap on and failSwapOn: false")
	})
}

// TestNodeInAUserNamespace runs the real kubelet and kube-proxy under
// nodeinit in a user namespace (unshare --user --map-root-user, uid_map
// "0 0 1"), as in a rootless or userns-remapped container. The kubelet's
// KubeletInUserNamespace gate is off by default before v1.37: without the
// checks the oldest release's kubelet exits on /dev/kmsg; with them
// nodeinit adds KubeletInUserNamespace=true to its feature gates, says
// once why, and the Node is Ready and a static pod runs. From v1.37 the
// gate is on by default: nodeinit, which reads the kubelet's release from
// its binary, adds nothing, and the suite's kubelet runs with its own
// default. kube-proxy, on the host's network namespace, which this user
// namespace does not own, cannot work: nodeinit says so in one line.
func TestNodeInAUserNamespace(t *testing.T) {
	c := getCluster(t)
	old := releases(t)[1]
	start := func(t *testing.T, bin string, flags ...string) *kubeNode {
		dir := t.TempDir()
		c.writeNodeFiles(t, dir, dir, nodeSpec{})
		k := c.launchNodeWith(t, dir, testenv.Options{Unshare: []string{"--user", "--map-root-user"}}, c.nodeArgs(dir, nodeSpec{flags: flags, bin: bin})...)
		k.bin = c.nodeBin(nodeSpec{bin: bin})
		return k
	}
	t.Run("without the checks the kubelet "+old.version+" exits", func(t *testing.T) {
		k := start(t, old.bin, "--skip-container-checks=user-namespace,kmsg")
		code := k.wait(60 * time.Second)
		line := lastLineWith(k.executorLog(), "/dev/kmsg")
		if code == 0 || line == "" {
			t.Fatalf("nodeinit exited %d; want the kubelet's failure on /dev/kmsg; the kubelet's log:\n%s", code, testenv.Tail(k.executorLog(), 20))
		}
		t.Logf("the kubelet exited, nodeinit with it (%d): %s", code, line)
	})
	t.Run("with the checks the kubelet "+old.version+" gets the gate, the Node is Ready and a static pod runs", func(t *testing.T) {
		checkUserNamespaceNode(t, start(t, old.bin, "--proxy-restart-backoff=1m", "--proxy-restart-backoff-max=1m"), true)
	})
	t.Run("the suite's kubelet has the gate on by default: nothing added, the Node is Ready and a static pod runs", func(t *testing.T) {
		checkUserNamespaceNode(t, start(t, "", "--proxy-restart-backoff=1m", "--proxy-restart-backoff-max=1m"), false)
	})
}

// checkUserNamespaceNode checks a node in a user namespace: the gate added
// by nodeinit (gate) or not, the Node Ready, the static pod Running,
// kube-proxy failing as nodeinit's warning says. kube-proxy fails at once
// there; the node's long backoff keeps it from starting again while the
// node is stopped.
func checkUserNamespaceNode(t *testing.T, k *kubeNode, gate bool) {
	// Everything nodeinit says before the first fork is logged by then.
	k.waitLog(30*time.Second, 0, `"Started task"`, `task="executor"`)
	if len(k.lines("kube-proxy cannot program this network namespace")) != 1 {
		t.Errorf("want one line saying why kube-proxy cannot work here; log:\n%s", k.log())
	}
	adjusted := k.lines(`"Adjusted the node to its container"`, `check="user-namespace"`, "KubeletInUserNamespace=true")
	_, took := k.waitReady(90 * time.Second)
	args := strings.Join(cmdline(k.children()["kubelet"]), " ")
	switch {
	case gate && len(adjusted) != 1:
		t.Errorf("want one line for the feature gate; log:\n%s", k.log())
	case gate && !strings.Contains(args, "--feature-gates=KubeletInUserNamespace=true"):
		t.Errorf("the kubelet's command line lacks the gate: %s", args)
	case !gate && (len(adjusted) != 0 || strings.Contains(args, "KubeletInUserNamespace")):
		t.Errorf("nodeinit added the gate the kubelet has on by default: %q; the kubelet runs as %s", adjusted, args)
	}
	k.waitPods("metadata.name=static-sleeper-"+nodeName, 1, 60*time.Second)
	t.Logf("Node Ready %v after nodeinit started in a user namespace; static pod Running %v after", took.Round(10*time.Millisecond),
		time.Since(k.started).Round(10*time.Millisecond))
	k.waitLog(30*time.Second, 0, `"Proxy ended; restarting after backoff"`)
	if line := lastLineWith(k.proxyLog(), "you must be root"); line == "" {
		t.Errorf("kube-proxy failed otherwise than the warning says:\n%s", testenv.Tail(k.proxyLog(), 10))
	}
	t.Logf("TERM: %v", k.stopAndCheck(90*time.Second))
}

// TestRootlessNodeWithANetworkNamespaceOfItsOwn: a user namespace with a
// network namespace it owns, as rootless podman makes one (unshare --user
// --map-root-user --net; the test wires it up from outside once nodeinit
// runs there). nodeinit gives kube-proxy 0 for nf_conntrack_max, the one
// conntrack sysctl that namespace may not write, and the kubelet nothing:
// its KubeletInUserNamespace gate is on by default from v1.37
// (TestNodeInAUserNamespace has the release that needs it); the Node is
// Ready and kube-proxy programs a Service there.
func TestRootlessNodeWithANetworkNamespaceOfItsOwn(t *testing.T) {
	c := getCluster(t)
	dir := t.TempDir()
	c.writeNodeFiles(t, dir, dir, nodeSpec{})
	var args []string
	for _, a := range c.nodeArgs(dir, nodeSpec{}) {
		switch {
		case strings.HasPrefix(strings.TrimPrefix(a, "--proxy-arg="), "--conntrack-"):
		case strings.HasPrefix(a, "--node-ip="):
			args = append(args, "--node-ip="+netnsNodeIP)
		default:
			args = append(args, a)
		}
	}
	k := c.launchNodeWith(t, dir, testenv.Options{Unshare: []string{"--user", "--map-root-user", "--net"}}, args...)
	ns := wireNodeNetns(t, fmt.Sprintf("/proc/%d/ns/net", k.pid()))
	t.Cleanup(func() {
		if k.running() {
			k.stop(60 * time.Second)
		}
		ns.close()
	})
	k.waitLog(30*time.Second, 0, `"Started task"`, `task="executor"`)
	if a := k.lines(`"Adjusted the node to its container"`, `check="conntrack"`); len(a) != 1 || !strings.Contains(a[0], "--conntrack-max-per-core=0") {
		t.Errorf("want one conntrack adjustment, for nf_conntrack_max alone; got %q", a)
	}
	if a := k.lines(`"Adjusted the node to its container"`, `check="user-namespace"`); len(a) != 0 {
		t.Errorf("nodeinit added the gate the kubelet has on by default: %q", a)
	}
	_, took := k.waitReady(90 * time.Second)
	t.Logf("Node Ready %v after nodeinit started, rootless with a network namespace of its own", took.Round(10*time.Millisecond))
	k.create("/api/v1/namespaces/default/services", "outside", outsideService)
	k.create("/apis/discovery.k8s.io/v1/namespaces/default/endpointslices", "outside-1", outsideEndpoints)
	var s service
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must(t, k.c.api.get(ctx, "/api/v1/namespaces/default/services/outside", &s))
	start := time.Now()
	for {
		rules, _ := ns.run(10*time.Second, "iptables-save", "-t", "nat")
		if strings.Contains(rules, "-d "+s.Spec.ClusterIP+"/32") && strings.Contains(rules, "--to-destination "+outsideEndpoint+":8080") {
			break
		}
		if time.Since(start) > 60*time.Second {
			k.dumpLogs()
			t.Fatalf("kube-proxy did not program Service outside (%s) in the rootless node's namespace; its nat table:\n%s", s.Spec.ClusterIP, rules)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("kube-proxy programmed Service outside in the rootless node's network namespace %v after it was created", time.Since(start).Round(10*time.Millisecond))
	if ended := k.lines(`"Proxy ended`); len(ended) > 0 {
		t.Errorf("kube-proxy ended while the node ran: %v", ended)
	}
	ns.stopNode(k)
}

// TestIPTablesBackendOfTheNamespace: the node's network namespace has one
// rule already, planted in the legacy tables, then in nftables; kube-proxy
// must put its Services' rules beside it. With --iptables-backend=none the
// image's default iptables (nft on Debian) is used whatever the namespace
// holds; with auto, nodeinit puts the backend's commands first in the
// children's PATH, KUBE-SERVICES lands in that backend each time, and the
// Service answers from inside the namespace.
func TestIPTablesBackendOfTheNamespace(t *testing.T) {
	c := getCluster(t)
	for _, tc := range []struct {
		name, planted, flag, want string
	}{
		{"legacy rules and PATH left alone: the Service lands in nft apart from them", "legacy", "--iptables-backend=none", "nft"},
		{"legacy rules: the Service lands in legacy", "legacy", "", "legacy"},
		{"nft rules: the Service lands in nft", "nft", "", "nft"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNodeNetns(t)
			if _, err := ns.run(10*time.Second, "iptables-"+tc.planted, "-A", "INPUT", "-s", "192.0.2.1/32", "-j", "ACCEPT"); err != nil {
				t.Fatal(err)
			}
			// The Service's endpoint answers inside the namespace.
			if _, err := ns.run(10*time.Second, "ip", "addr", "add", outsideEndpoint+"/32", "dev", "lo"); err != nil {
				t.Fatal(err)
			}
			l, err := ns.listen(outsideEndpoint + ":8080")
			must(t, err)
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "outside") })}
			go func() { _ = srv.Serve(l) }()
			ns.closers = append(ns.closers, srv.Close) // its sockets hold the namespace

			var flags []string
			if tc.flag != "" {
				flags = append(flags, tc.flag)
			}
			k := c.startNodeInNetns(t, ns, flags...)
			if tc.flag == "" {
				line := k.waitLog(30*time.Second, 0, `"Adjusted the node to its container"`, `check="iptables"`)
				if !strings.Contains(line.text, "xtables-"+tc.want+"-multi") {
					t.Errorf("nodeinit chose another backend than %s: %s", tc.want, line.text)
				}
				t.Logf("%s", line.text[strings.Index(line.text, "change="):])
			}
			k.waitReady(90 * time.Second)
			k.create("/api/v1/namespaces/default/services", "outside", outsideService)
			k.create("/apis/discovery.k8s.io/v1/namespaces/default/endpointslices", "outside-1", outsideEndpoints)
			var s service
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			must(t, k.c.api.get(ctx, "/api/v1/namespaces/default/services/outside", &s))
			other := map[string]string{"nft": "legacy", "legacy": "nft"}[tc.want]
			programmedIn := func(backend string) string {
				out, _ := ns.run(10*time.Second, "iptables-"+backend+"-save", "-t", "nat")
				return out
			}
			start := time.Now()
			for !strings.Contains(programmedIn(tc.want), "-d "+s.Spec.ClusterIP+"/32") {
				if time.Since(start) > 60*time.Second {
					k.dumpLogs()
					t.Fatalf("KUBE-SERVICES has no rule for %s in the %s tables; they hold:\n%s\nthe %s ones:\n%s",
						s.Spec.ClusterIP, tc.want, programmedIn(tc.want), other, programmedIn(other))
				}
				time.Sleep(200 * time.Millisecond)
			}
			if strings.Contains(programmedIn(other), "KUBE-SERVICES") {
				t.Errorf("kube-proxy's rules are in the %s tables too", other)
			}
			client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil,
				DialContext: func(_ context.Context, network, addr string) (net.Conn, error) { return ns.dial(network, addr) }}}
			var page string
			for {
				resp, err := client.Get("http://" + s.Spec.ClusterIP + "/")
				if err == nil {
					b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
					resp.Body.Close()
					page = string(b)
					break
				}
				if time.Since(start) > 60*time.Second {
					t.Errorf("the Service at %s did not answer from the namespace: %v", s.Spec.ClusterIP, err)
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			if page != "outside" {
				t.Errorf("the Service at %s answered %q from the namespace; want the endpoint's page", s.Spec.ClusterIP, page)
			}
			t.Logf("rule planted in %s; kube-proxy's KUBE-SERVICES in %s %v after the Service was created; it answered %q",
				tc.planted, tc.want, time.Since(start).Round(10*time.Millisecond), page)
			ns.stopNode(k)
		})
	}
}

// TestKubeletRootDirOnAFileSystemItCannotFind: the kubelet's root dir on a
// ramfs, a file system the kubelet's cAdvisor does not know and whose
// device is nowhere under /dev. Skipping the check, the real kubelet
// starts and exits on "failed to get rootfs info"; with it nodeinit names
// the root dir, its mount and device in one line and exits 1 before
// starting anything.
func TestKubeletRootDirOnAFileSystemItCannotFind(t *testing.T) {
	c := getCluster(t)
	// A short path: the kubelet's sockets under its root dir must fit a
	// socket address (108 bytes), and it exits when one does not.
	root, err := os.MkdirTemp("", "kubelet-root-")
	must(t, err)
	t.Cleanup(func() { os.Remove(root) })
	r := restriction{
		setup:       "mount -t ramfs ramfs-of-the-node " + root,
		kubeletArgs: func(string) []string { return []string{"--root-dir=" + root} },
	}
	t.Run("without the check the kubelet exits", func(t *testing.T) {
		k := c.startRestricted(t, r, "--skip-container-checks=rootfs-device")
		code := k.wait(90 * time.Second)
		line := lastLineWith(k.executorLog(), "failed to get rootfs info")
		if code == 0 || line == "" {
			t.Fatalf("nodeinit exited %d; want the kubelet's failure on its rootfs; the kubelet's log:\n%s", code, testenv.Tail(k.executorLog(), 20))
		}
		t.Logf("the kubelet exited %v after nodeinit started, nodeinit with it (%d): %s", time.Since(k.started).Round(10*time.Millisecond), code, line)
	})
	t.Run("with the check one line names the device", func(t *testing.T) {
		k := c.startRestricted(t, r)
		if code := k.wait(30 * time.Second); code != 1 {
			t.Errorf("nodeinit exited %d; want 1", code)
		}
		errs := slices.DeleteFunc(k.lines("E"), func(l string) bool { return !strings.HasPrefix(l, "E") })
		if len(errs) != 1 || !strings.Contains(errs[0], "The kubelet's root dir "+root+" is on ramfs-of-the-node (ramfs, device ") {
			t.Errorf("want one error line naming the root dir, its mount and device; got %q", errs)
		}
		if log := k.executorLog(); log != "" {
			t.Errorf("the kubelet was started:\n%s", testenv.Tail(log, 10))
		}
		t.Logf("%s", errs)
	})
}

// TestNodeWithReadOnlyCgroupfs: every cgroup hierarchy of the host
// remounted read-only in nodeinit's mount namespace, as docker and podman
// mount them without --privileged. Skipping the check, the real kubelet
// cannot make the pods' cgroups and exits; with it, nodeinit sees that
// these are the host's whole tree, not the container's own cgroups, and
// stops before the kubelet starts, with one line saying what to change.
func TestNodeWithReadOnlyCgroupfs(t *testing.T) {
	c := getCluster(t)
	l, err := cgroups.ReadLayout("/")
	must(t, err)
	var mounts []string
	for _, h := range l.Hierarchies {
		mounts = append(mounts, h.Mountpoint)
	}
	testenv.Require(t, len(mounts) > 0, "a mounted cgroup hierarchy")
	r := restriction{readOnly: mounts}
	t.Run("without the check the kubelet exits", func(t *testing.T) {
		k := c.startRestricted(t, r, "--skip-container-checks=cgroupfs")
		code := k.wait(90 * time.Second)
		line := lastLineWith(k.executorLog(), "read-only file system")
		if code == 0 || line == "" {
			t.Fatalf("nodeinit exited %d; want the kubelet's failure on the read-only cgroupfs; the kubelet's log:\n%s", code, testenv.Tail(k.executorLog(), 20))
		}
		t.Logf("the kubelet exited %v after nodeinit started, nodeinit with it (%d): %s", time.Since(k.started).Round(10*time.Millisecond), code, line)
	})
	// These mounts are the host's whole tree, seen from the host's cgroup
	// namespace: making them writable would open every cgroup of the host
	// to the node, so nodeinit refuses, before the first fork. (A
	// read-only cgroupfs of the container's own cgroups is remounted:
	// test/integration's restricted tests show both on real mounts.)
	t.Run("with the check nodeinit refuses the host's tree before the kubelet starts", func(t *testing.T) {
		k := c.startRestricted(t, r)
		code := k.wait(30 * time.Second)
		refusals := k.lines("is the host's whole cgroup tree", "nodeinit does not make it writable")
		if code != 1 || len(refusals) == 0 {
			t.Fatalf("nodeinit exited %d; want 1 with the refusal of the host's read-only tree; log:\n%s", code, k.log())
		}
		if log := k.executorLog(); strings.TrimSpace(log) != "" {
			t.Errorf("the kubelet ran; want nodeinit to stop before the first fork; its log:\n%s", testenv.Tail(log, 10))
		}
		t.Logf("refused in %v, exit %d: %s", time.Since(k.started).Round(10*time.Millisecond), code, refusals[0])
	})
}

// stubResolver is /etc/resolv.conf with systemd-resolved's stub alone, and
// systemd-resolved's upstream file with a real nameserver, both files of
// the test bound in nodeinit's mount namespace.
const stubResolver = `printf 'nameserver 127.0.0.53\noptions edns0\n' > "$NODE_DIR/resolv.conf"
mount --bind "$NODE_DIR/resolv.conf" /etc/resolv.conf
mkdir -p "$NODE_DIR/systemd/resolve"
printf 'nameserver 192.0.2.53\n' > "$NODE_DIR/systemd/resolve/resolv.conf"
mount --bind "$NODE_DIR/systemd" /run/systemd`

// TestNodeWithAStubResolver: /etc/resolv.conf names only 127.0.0.53 while
// /run/systemd/resolve/resolv.conf has a real nameserver. The kubelet
// hands its resolv.conf to pods without a cluster DNS: skipping the check,
// the static pod gets the loopback resolver, which would loop; with it the
// kubelet gets --resolv-conf=/run/systemd/resolve/resolv.conf and the pod
// the real nameserver.
func TestNodeWithAStubResolver(t *testing.T) {
	c := getCluster(t)
	// The bind mount needs the directory; one the test makes goes after.
	if _, err := os.Stat("/run/systemd"); errors.Is(err, os.ErrNotExist) {
		must(t, os.Mkdir("/run/systemd", 0o755))
		t.Cleanup(func() { _ = os.Remove("/run/systemd") })
	}
	r := restriction{setup: stubResolver}
	podResolvConf := func(t *testing.T, k *kubeNode) string {
		t.Helper()
		p := k.waitPods("metadata.name=static-sleeper-"+nodeName, 1, 60*time.Second)[0]
		id, err := c.containerd.cri("ps", "--quiet", "--name", "sleep", "--label", "io.kubernetes.pod.name="+p.Metadata.Name)
		must(t, err)
		if strings.TrimSpace(id) == "" {
			t.Fatalf("crictl lists no container of pod %s", p.Metadata.Name)
		}
		out, err := c.containerd.cri("exec", strings.Fields(id)[0], "cat", "/etc/resolv.conf")
		must(t, err)
		return out
	}
	t.Run("without the check the pod gets the loopback resolver", func(t *testing.T) {
		k := c.startRestricted(t, r, "--skip-container-checks=resolv-conf")
		k.waitReady(90 * time.Second)
		got := podResolvConf(t, k)
		if !strings.Contains(got, "nameserver 127.0.0.53") {
			t.Errorf("the pod's /etc/resolv.conf is\n%s\nwant the loopback nameserver 127.0.0.53", got)
		}
		t.Logf("the pod's /etc/resolv.conf: %q", got)
		t.Logf("TERM: %v", k.stopAndCheck(90*time.Second))
	})
	t.Run("with the check the pod gets the real nameserver", func(t *testing.T) {
		k := c.startRestricted(t, r)
		line := k.waitLog(30*time.Second, 0, `"Adjusted the node to its container"`, `check="resolv-conf"`)
		if !strings.Contains(line.text, "only loopback nameservers (127.0.0.53)") {
			t.Errorf("the adjustment does not say why: %s", line.text)
		}
		_, took := k.waitReady(90 * time.Second)
		if args := strings.Join(cmdline(k.children()["kubelet"]), " "); !strings.Contains(args, "--resolv-conf=/run/systemd/resolve/resolv.conf") {
			t.Errorf("the kubelet's command line lacks --resolv-conf: %s", args)
		}
		got := podResolvConf(t, k)
		if !strings.Contains(got, "nameserver 192.0.2.53") || strings.Contains(got, "127.0.0.53") {
			t.Errorf("the pod's /etc/resolv.conf is\n%s\nwant the nameserver 192.0.2.53 alone", got)
		}
		t.Logf("Node Ready %v after nodeinit started; the pod's /etc/resolv.conf: %q", took.Round(10*time.Millisecond), got)
		t.Logf("TERM: %v", k.stopAndCheck(90*time.Second))
	})
}

// TestNodeWithLowInotifyLimits: fs.inotify.max_user_instances at 128, the
// kernel's default, which one node's containers use up. nodeinit warns
// once with the sysctl to run and the Node is Ready; with
// --raise-inotify-limits it raises the limits and says so. The test puts
// both sysctls back.
func TestNodeWithLowInotifyLimits(t *testing.T) {
	c := getCluster(t)
	const instances, watches = "/proc/sys/fs/inotify/max_user_instances", "/proc/sys/fs/inotify/max_user_watches"
	was := map[string]string{}
	for _, f := range []string{instances, watches} {
		b, err := os.ReadFile(f)
		must(t, err)
		was[f] = strings.TrimSpace(string(b))
		was := was[f]
		t.Cleanup(func() {
			if err := os.WriteFile(f, []byte(was), 0); err != nil {
				t.Errorf("put back %s=%s: %v", f, was, err)
			}
		})
	}
	sysctl := func(f string) string { b, _ := os.ReadFile(f); return strings.TrimSpace(string(b)) }
	t.Run("a warning and the Node Ready", func(t *testing.T) {
		must(t, os.WriteFile(instances, []byte("128"), 0))
		k := c.startRestricted(t, restriction{})
		_, took := k.waitReady(90 * time.Second)
		if w := k.lines("fs.inotify.max_user_instances is 128, below the 512", "sysctl -w fs.inotify.max_user_instances=512"); len(w) != 1 {
			t.Errorf("want one warning with the sysctl to set; log:\n%s", k.log())
		} else {
			t.Logf("%s", w[0])
		}
		if now := sysctl(instances); now != "128" {
			t.Errorf("%s is %s without --raise-inotify-limits; want it left at 128", instances, now)
		}
		// The static pod runs before the stop: a node stopped while its
		// container starts leaves a runc init that containerd will not remove.
		k.staticPodThenStop(took, "with max_user_instances=128")
	})
	t.Run("with --raise-inotify-limits the limits are raised", func(t *testing.T) {
		must(t, os.WriteFile(instances, []byte("128"), 0))
		k := c.startRestricted(t, restriction{}, "--raise-inotify-limits")
		line := k.waitLog(30*time.Second, 0, `"Adjusted the node to its container"`, `check="inotify"`, "fs.inotify.max_user_instances=512")
		if now := sysctl(instances); now != "512" {
			t.Errorf("%s is %s after --raise-inotify-limits; want 512", instances, now)
		}
		// max_user_watches is raised too when it was low.
		if n, _ := strconv.Atoi(was[watches]); n < 524288 && sysctl(watches) != "524288" {
			t.Errorf("%s is %s after --raise-inotify-limits; want 524288", watches, sysctl(watches))
		}
		_, took := k.waitReady(90 * time.Second)
		t.Logf("%s", line.text[strings.Index(line.text, "change="):])
		k.staticPodThenStop(took, "max_user_instances raised to 512")
	})
}

// staticPodThenStop waits for the node's static pod to run — a node stopped
// while its container starts can leave a runc init that containerd will not
// delete — logs how long the Node took to be Ready (took) and with what,
// then stops the node and checks the stop.
func (k *kubeNode) staticPodThenStop(took time.Duration, with string) {
	k.t.Helper()
	k.waitPods("metadata.name=static-sleeper-"+nodeName, 1, 60*time.Second)
	k.t.Logf("Node Ready %v after nodeinit started, %s; static pod Running", took.Round(10*time.Millisecond), with)
	k.t.Logf("TERM: %v", k.stopAndCheck(90*time.Second))
}
