//go:build k8s

package k8s

import (
	"bufio"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// The node's own kubelet on the modern host, installed as kubeadm installs
// it: the kubelet package's unit (Restart=always, 10 s between restarts)
// and kubeadm's drop-in, whose KUBELET_EXTRA_ARGS come from
// /etc/default/kubelet, the file kubeadm leaves to the operator.
const (
	guestKubeletUnit = `[Unit]
Description=kubelet: The Kubernetes Node Agent
Documentation=https://kubernetes.io/docs/
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
`
	guestKubeadmDropIn = `[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
`
	// guestKubeletExtraArgs are what docs/daemonset.md tells the node's
	// own kubelet to run with.
	guestKubeletExtraArgs = "KUBELET_EXTRA_ARGS=--lock-file=" + kubeletLock + " --exit-on-lock-contention\n"
	// guestKubeProxyUnit is the node's own kube-proxy, which keeps the
	// node's Services before, during and after the DaemonSet's. With the
	// pods' CIDR (the guest's CNI network), as kubeadm configures it, it
	// masquerades what the node itself sends to a Service.
	guestKubeProxyUnit = `[Unit]
Description=kube-proxy: the node's own
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/bin/kube-proxy --kubeconfig=/etc/kubernetes/kube-proxy.conf --proxy-mode=iptables --cluster-cidr=` + podCIDR + `
Restart=always
RestartSec=5
`
)

// checkGuestDaemonSet runs images/node/daemonset.yaml on the modern host:
// the node's own kubelet (kubeadm's unit and drop-in, the systemd cgroup
// driver, --lock-file and --exit-on-lock-contention) and kube-proxy run
// under the guest's systemd with a 2-replica Deployment behind a Service
// and a static pod; the DaemonSet's pod takes the node, and the node's own
// kubelet takes it back when the DaemonSet is deleted, with no workload
// container restarted and no request to the Service failed, the Node Ready
// throughout. Then the DaemonSet again, whose pod's kubelet holds its delay
// lock on the guest's logind itself (the host's /run is mounted), and the
// guest's systemctl poweroff: the pods' preStop hook runs before the
// power-down. This powers the guest off: it is the guest's last case.
func (c *cluster) checkGuestDaemonSet(t *testing.T, v *vm) {
	h := c.startGuestHostNode(t, v)
	k := h.k
	_, took := k.waitGuestReady(5 * time.Minute)
	t.Logf("the node's own kubelet (kubelet.service): Node Ready %v after its start", took.Round(100*time.Millisecond))
	k.deployWeb()
	k.waitPods("app=web", 2, 5*time.Minute)
	k.waitPods("metadata.name=static-sleeper-"+nodeName, 1, 5*time.Minute)
	ip := k.clusterIP()
	before := k.workloadContainers()
	m := h.guestMonitor(ip)
	defer m.stop()
	m.waitServed(2 * time.Minute)

	t.Run("handover", func(t *testing.T) {
		defer h.use(t, m)()
		start := time.Now()
		h.createDaemonSet(nodeImage)
		h.waitHandover(m.monitor, "the DaemonSet's pod", start, func(hd holder) bool { return hd.pod != "" }, 5*time.Minute)
		h.checkWorkload(before, "after the DaemonSet took the node")

		start = time.Now()
		h.deleteDaemonSet()
		h.waitHandover(m.monitor, "the node's own kubelet", start, func(hd holder) bool { return hd.host }, 5*time.Minute)
		h.waitNoDaemonSetPods(2 * time.Minute)
		h.checkWorkload(before, "after the DaemonSet was deleted")
		m.read()
		m.report(t)
		m.checkRequests(t)
		m.checkKubelets(t, 2)
		h.checkNodeIdentity(m.monitor)
		h.checkOldPods(m.monitor, 1)
		t.Logf("the node's own kubelet.service: %s", strings.Join(strings.Fields(v.ssh("systemctl show --property=NRestarts,ActiveState,MainPID kubelet")), ", "))
	})

	t.Run("host shutdown", func(t *testing.T) {
		defer h.use(t, m)()
		start := time.Now()
		h.createDaemonSet(nodeImage)
		h.waitHandover(m.monitor, "the DaemonSet's pod", start, func(hd holder) bool { return hd.pod != "" }, 5*time.Minute)
		hd, _ := m.holder()
		// The pod's kubelet, with the host's /run, talks to the guest's
		// logind itself: its delay lock is there, and nodeinit has none
		// (--graceful-node-shutdown is off in the DaemonSet).
		locks := ""
		for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(2 * time.Second) {
			locks = v.ssh("systemd-inhibit --list --no-pager --mode=delay")
			if strings.Contains(locks, "Kubelet needs time") || time.Now().After(deadline) {
				break
			}
		}
		t.Logf("the guest's delay locks (systemd-inhibit --list):\n%s", strings.TrimSpace(locks))
		if !slices.ContainsFunc(strings.Split(locks, "\n"), func(l string) bool {
			return strings.Contains(l, "Kubelet needs time") && slices.Contains(strings.Fields(l), strconv.Itoa(hd.pid))
		}) {
			t.Fatalf("the DaemonSet pod's kubelet (pid %d) holds no delay lock on the guest's logind", hd.pid)
		}
		if strings.Contains(locks, "nodeinit") {
			t.Errorf("nodeinit holds a delay lock on the guest's logind without --graceful-node-shutdown")
		}
		k.create("/api/v1/namespaces/default/pods", "hostdrain", hostDrainPod)
		k.waitPods("metadata.name=hostdrain", 1, 5*time.Minute)
		m.stop()
		off := powerOffGuest(t, v, m.dir)
		if off.down == 0 {
			return
		}
		if off.marker == 0 {
			t.Errorf("the pod's preStop hook did not write %s to the console before %q: the host's shutdown did not drain the DaemonSet's node", hostDrainMarker, guestPowerDown)
			return
		}
		t.Logf("the host's shutdown, the node as the DaemonSet's pod: systemctl poweroff to the preStop marker on the console %v, to the kernel's power-down %v",
			off.marker.Round(100*time.Millisecond), off.down.Round(100*time.Millisecond))
	})
}

// use makes t the test of h, its node and its watch, for a subtest, and
// returns what puts the parent back.
func (h *hostNode) use(t *testing.T, w *guestWatcher) func() {
	parent := h.t
	h.t, h.k.t, w.t = t, t, t
	return func() { h.t, h.k.t, w.t = parent, parent, parent }
}

// startGuestHostNode installs the node's own kubelet and kube-proxy in the
// guest's systemd with the node's files (writeGuestNodeFiles: the
// kubelet's systemd cgroup driver and a 30 s shutdownGracePeriod), loads
// nf_conntrack at boot and now (kube-proxy sets its limits there) and
// starts both units; the DaemonSet's image is in the guest's containerd
// (imageStores). When the test ends the units are removed and the guest put
// back.
func (c *cluster) startGuestHostNode(t *testing.T, v *vm) *hostNode {
	t.Helper()
	files := c.writeGuestNodeFiles(t, v, vmKubeletConfig+kubeletShutdown, staticPod)
	k := &kubeNode{t: t, c: c, dir: files, started: time.Now()}
	h := &hostNode{t: t, c: c, k: k, guest: v}
	k.created = append(k.created, daemonSets+"/nodeinit-node", "/api/v1/namespaces/kube-system/pods?labelSelector="+url.QueryEscape(daemonSetPod))
	remove := "systemctl stop kubelet kube-proxy node-watch; rm -rf /etc/systemd/system/kubelet.service /etc/systemd/system/kubelet.service.d /etc/systemd/system/kube-proxy.service /etc/default/kubelet " + kubeletLock +
		" /etc/modules-load.d/kube-proxy.conf; systemctl daemon-reload"
	t.Cleanup(func() { c.removeGuestNode(t, v, k, remove) })
	start := time.Now()
	v.ssh(fmt.Sprintf(`set -e
install -m 0755 %[1]s/k8s/kubelet /usr/bin/kubelet
install -m 0755 %[1]s/k8s/kube-proxy /usr/bin/kube-proxy
cat > /etc/systemd/system/kubelet.service <<'EOF'
%[2]sEOF
mkdir -p /etc/systemd/system/kubelet.service.d
cat > /etc/systemd/system/kubelet.service.d/10-kubeadm.conf <<'EOF'
%[3]sEOF
cat > /etc/default/kubelet <<'EOF'
%[4]sEOF
cat > /etc/systemd/system/kube-proxy.service <<'EOF'
%[5]sEOF
echo nf_conntrack > /etc/modules-load.d/kube-proxy.conf
modprobe nf_conntrack
systemctl daemon-reload`, guestShare, guestKubeletUnit, guestKubeadmDropIn, guestKubeletExtraArgs, guestKubeProxyUnit))
	t.Logf("the node's own kubelet and kube-proxy installed as units in %v", time.Since(start).Round(100*time.Millisecond))
	setGuestInhibitDelay(t, v)
	k.started = time.Now()
	v.ssh("systemctl start kube-proxy.service kubelet.service")
	// The node's kubelet is between its restarts now and then; the node
	// ends when either unit fails for good.
	k.running = func() bool {
		out, _ := v.sshTimeout(time.Minute, "systemctl is-failed kubelet.service kube-proxy.service")
		return !strings.Contains(out, "failed")
	}
	k.log = func() string {
		out, err := v.sshTimeout(time.Minute, "journalctl --no-pager -o cat -u kubelet.service -n 400")
		if err != nil {
			return out + "\n" + err.Error()
		}
		return out
	}
	return h
}

// guestDaemonSet is images/node/daemonset.yaml as docs/daemonset.md tells
// an operator to fill it in for a node that keeps its own kube-proxy: the
// image, and the pod's kube-proxy's healthz and metrics on other ports,
// and the pods' CIDR the node's kube-proxy has: both write the same rules.
// The guest's node needs nothing else: its name is the guest's hostname,
// its address the only one, its containerd where the manifest mounts it.
func (h *hostNode) guestDaemonSet(image string) *appsv1.DaemonSet {
	h.t.Helper()
	ds, sep := h.manifest(image)
	ctr := &ds.Spec.Template.Spec.Containers[0]
	ctr.Args = slices.Insert(ctr.Args, sep, "--proxy-arg=--cluster-cidr="+podCIDR,
		"--proxy-arg=--healthz-bind-address=127.0.0.1:10266", "--proxy-arg=--metrics-bind-address=127.0.0.1:10269")
	return ds
}

// checkGuestPodNode is checkPodNode in the guest: the kubelet that holds
// the lock is nodeinit's child, beside kube-proxy, without --cgroup-root
// or --exit-on-lock-contention.
func (h *hostNode) checkGuestPodNode(hd holder) {
	h.t.Helper()
	for _, p := range h.daemonSetPods() {
		if p.Metadata.UID != hd.pod {
			continue
		}
		for _, s := range p.Status.ContainerStatuses {
			h.t.Logf("DaemonSet pod %s, container %s: %s restartCount=%d", p.Metadata.Name, s.Name, s.ContainerID, s.RestartCount)
			if s.RestartCount != 0 {
				h.t.Errorf("the DaemonSet pod's container %s restarted %d times", s.Name, s.RestartCount)
			}
		}
	}
	out := h.guest.ssh(fmt.Sprintf(`p=$(ps -o ppid= -p %[1]d | tr -d ' '); echo "$p $(cat /proc/$p/comm) $(pgrep -P $p -x kube-proxy)"; cat /proc/%[1]d/cgroup; tr '\0' ' ' < /proc/%[1]d/cmdline`, hd.pid))
	lines := strings.SplitN(out, "\n", 3)
	if len(lines) < 3 {
		h.t.Fatalf("the pod's kubelet (pid %d) in the guest: %q", hd.pid, out)
	}
	parent := strings.Fields(lines[0])
	if len(parent) < 3 || parent[1] != "nodeinit" {
		h.t.Errorf("the pod's kubelet (pid %d) is a child of %q; want nodeinit's, with kube-proxy beside it", hd.pid, lines[0])
	}
	for _, a := range strings.Fields(lines[2]) {
		if strings.HasPrefix(a, "--cgroup-root") || a == "--exit-on-lock-contention" {
			h.t.Errorf("the pod's kubelet runs with %s: %q", a, lines[2])
		}
	}
	h.t.Logf("the pod's kubelet (pid %d, nodeinit and kube-proxy %v) in %s: %s", hd.pid, parent, strings.TrimPrefix(strings.TrimSpace(lines[1]), "0::"), strings.TrimSpace(lines[2]))
	// The kubelet's eviction manager and its image file system stats stat
	// containerd's root, which the manifest mounts.
	if out, _ := h.guest.sshTimeout(time.Minute, fmt.Sprintf("grep -h 'Eviction manager: failed to synchronize' /var/log/pods/kube-system_*_%s/node/*.log | tail -n 1", hd.pod)); strings.TrimSpace(out) != "" {
		h.t.Errorf("the DaemonSet pod's kubelet's eviction manager cannot run:\n%s", out)
	}
}

// guestWatcher feeds a monitor from what test/k8s/guestwatch writes in
// the guest into the shared folder (requests to the Service every 50 ms,
// the lock's holder every 20 ms, the DaemonSet pods' logs), and watches the
// Node and its lease from here.
type guestWatcher struct {
	*monitor
	t       *testing.T
	v       *vm
	dir     string // guestWatch's directory, as this machine sees it
	offsets map[string]int64
	done    chan struct{}
	// Under the monitor's lock: each request the guest sent, and when
	// the first was read here.
	sent      []guestRequest
	firstRead time.Time
	// servingHolders are the kubelets (by pid) the guest saw serving
	// while they held the lock; kubeletChanges counts kubelets.log's lines.
	servingHolders map[string]bool
	kubeletChanges int
}

// guestRequest is one request to the Service from the guest: when it was
// sent (the guest's clock) and whether it was answered within a second.
type guestRequest struct {
	at     time.Time
	prompt bool
}

// guestBlackoutBound is how long the guest's requests to the Service may
// go unanswered within a second, one after another: a guest starting a
// container under TCG has held a few requests over a second, all sent
// within 0.2 s, and 15 over 1.15 s on a heavily loaded machine; a Service
// whose rules are gone for 3 s or more is a blackout, even when the
// requests' 5 s let them through at last.
const guestBlackoutBound = 2500 * time.Millisecond

// guestMonitor starts guestwatch in the guest, as a unit, and the
// monitor's Node and lease watches here; it reads the guest's records
// every 250 ms.
func (h *hostNode) guestMonitor(ip string) *guestWatcher {
	m := watchNodeOnly(h)
	m.wg.Add(1)
	go m.watchLease(m.ctx)
	w := &guestWatcher{monitor: m, t: h.t, v: h.guest, dir: filepath.Join(h.guest.share, "watch-"+strconv.FormatInt(time.Now().UnixNano(), 36)),
		offsets: map[string]int64{}, done: make(chan struct{}), servingHolders: map[string]bool{}}
	must(h.t, os.MkdirAll(w.dir, 0o755))
	must(h.t, linkOrCopy(testenv.Build(h.t, "./test/k8s/guestwatch"), filepath.Join(w.dir, "guestwatch")))
	guestDir := guestShare + "/" + filepath.Base(w.dir)
	h.guest.ssh(fmt.Sprintf("systemd-run --quiet --unit=node-watch --collect %[1]s/guestwatch %[2]s %[1]s", guestDir, ip))
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-m.ctx.Done():
				return
			case <-tick.C:
				w.read()
			}
		}
	}()
	return w
}

// watchNodeOnly is a monitor whose requests and lock samples come from
// elsewhere: it watches the Node's Ready condition.
func watchNodeOnly(h *hostNode) *monitor {
	m := newMonitor(h)
	m.wg.Add(1)
	go m.watchNode(m.ctx)
	return m
}

// read takes the guest's new records into the monitor.
func (w *guestWatcher) read() {
	w.lines("requests.log", func(at time.Time, f []string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.requests++
		if w.firstRead.IsZero() {
			w.firstRead = time.Now()
		}
		prompt := false
		if f[0] == "ok" && len(f) == 2 {
			if took, err := time.ParseDuration(f[1] + "s"); err == nil {
				w.slowest = max(w.slowest, took)
				prompt = took <= time.Second
				if !prompt {
					w.slow++
				}
			}
		}
		w.sent = append(w.sent, guestRequest{at, prompt})
		if f[0] != "ok" {
			w.failures = append(w.failures, at.Format("15:04:05.000")+" "+strings.Join(f, " "))
			w.failedAt = append(w.failedAt, at)
		}
	})
	w.lines("lock.log", func(at time.Time, f []string) {
		var hd holder
		switch {
		case f[0] == "host" && len(f) == 2:
			hd.pid, _ = strconv.Atoi(f[1])
			hd.host = true
		case f[0] == "pod" && len(f) == 3:
			hd.pod = f[1]
			hd.pid, _ = strconv.Atoi(f[2])
		case f[0] == "other" && len(f) >= 2:
			hd.pid, _ = strconv.Atoi(f[1])
		}
		w.mu.Lock()
		w.hands = append(w.hands, hand{at, hd})
		w.mu.Unlock()
	})
	w.lines("kubelets.log", func(at time.Time, f []string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.kubeletChanges++
		for _, k := range f {
			pid, role, _ := strings.Cut(k, ":")
			if role == "holder+serving" {
				w.servingHolders[pid] = true
			}
			if strings.Contains(role, "+serving") && !strings.HasPrefix(role, "holder") || strings.Contains(role, "+nolockfile") {
				w.strangers = append(w.strangers, fmt.Sprintf("%s: kubelet pid %d is %s, beside %v: two kubelets at once", at.Format("15:04:05.000"), atoi(pid), role, f))
			}
		}
	})
	files, _ := filepath.Glob(filepath.Join(w.dir, "pods", "*", "node", "*.log"))
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil {
			w.mu.Lock()
			w.podLogs[f] = string(b)
			w.mu.Unlock()
		}
	}
}

// lines calls fn with each whole line of the guest's record file name not
// read before: its time (the guest's clock) and its other fields.
func (w *guestWatcher) lines(name string, fn func(time.Time, []string)) {
	f, err := os.Open(filepath.Join(w.dir, name))
	if err != nil {
		return
	}
	defer f.Close()
	if _, err := f.Seek(w.offsets[name], 0); err != nil {
		return
	}
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return // an incomplete last line is read next time
		}
		w.offsets[name] += int64(len(line))
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		s, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		fn(time.Unix(0, int64(s*1e9)), fields[1:])
	}
}

// waitServed waits for the first request to the Service that the guest's
// watch sees answered, and for the watch's first lock sample.
func (w *guestWatcher) waitServed(timeout time.Duration) {
	w.t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(250 * time.Millisecond) {
		w.mu.Lock()
		ok := w.requests > len(w.failures) && len(w.hands) > 0
		w.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			w.mu.Lock()
			requests, failures, samples := w.requests, slices.Clone(w.failures), len(w.hands)
			w.mu.Unlock()
			out, _ := w.v.sshTimeout(time.Minute, "systemctl status --no-pager node-watch kube-proxy; iptables-save -t nat | grep default/web")
			w.t.Fatalf("the guest's watch within %v: %d requests to the Service, none answered (last: %q), %d lock samples; in the guest:\n%s",
				timeout, requests, failures[max(0, len(failures)-3):], samples, out)
		}
	}
}

// checkRequests checks the guest's requests to the Service as a whole:
// the watch still runs, it sent at least half the requests its 50 ms
// allow since the first was read here (a watch that stopped writing sends
// none), and no run of requests one after another went unanswered within
// a second for guestBlackoutBound or longer.
func (w *guestWatcher) checkRequests(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	sent, first := slices.Clone(w.sent), w.firstRead
	w.mu.Unlock()
	if state, _ := w.v.sshTimeout(time.Minute, "systemctl is-active node-watch"); strings.TrimSpace(state) != "active" {
		journal, _ := w.v.sshTimeout(time.Minute, "journalctl --no-pager -o cat -n 20 -u node-watch")
		t.Errorf("the guest's watch is %q, not active:\n%s", strings.TrimSpace(state), journal)
	}
	if want := int(time.Since(first) / (100 * time.Millisecond)); first.IsZero() || len(sent) < want {
		t.Errorf("the guest's watch sent %d requests to the Service in the %v since the first was read; want at least %d, one every 100 ms",
			len(sent), time.Since(first).Round(time.Second), want)
	}
	from, longest, n := longestUnanswered(sent)
	t.Logf("the guest's requests to the Service: %d sent; the longest run not answered within a second: %d requests over %v from %s",
		len(sent), n, longest.Round(time.Millisecond), from.Format("15:04:05.000"))
	if longest >= guestBlackoutBound {
		t.Errorf("the Service did not answer within a second for %v (%d requests one after another, from %s): a blackout; want under %v",
			longest.Round(time.Millisecond), n, from.Format("15:04:05.000"), guestBlackoutBound)
	}
}

// longestUnanswered finds, in the order they were sent, the longest run of
// requests none of which was answered within a second: when it began, the
// time it spans (a request alone spans its 50 ms) and how many it holds.
func longestUnanswered(sent []guestRequest) (from time.Time, span time.Duration, n int) {
	sent = slices.Clone(sent)
	slices.SortFunc(sent, func(a, b guestRequest) int { return a.at.Compare(b.at) })
	var runFrom time.Time
	runN := 0
	for _, r := range sent {
		if r.prompt {
			runFrom, runN = time.Time{}, 0
			continue
		}
		if runN == 0 {
			runFrom = r.at
		}
		runN++
		if s := r.at.Sub(runFrom) + 50*time.Millisecond; s > span {
			from, span, n = runFrom, s, runN
		}
	}
	return from, span, n
}

// checkKubelets checks the guest's watch saw the kubelets: each kubelet
// that held the node (the node's own and the DaemonSet pod's) serving
// while it held the lock, at least want of them; the monitor's report
// fails on a kubelet seen serving without the lock, or run without it.
func (w *guestWatcher) checkKubelets(t *testing.T, want int) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("the guest's kubelets sampled every 500 ms: %d changes; %d kubelets served while they held the lock, %d served or ran without it",
		w.kubeletChanges, len(w.servingHolders), len(w.strangers))
	if len(w.servingHolders) < want {
		t.Errorf("the guest's watch saw %d kubelets serving while they held the lock; want %d, the node's own and the DaemonSet pod's", len(w.servingHolders), want)
	}
}

// atoi is s as a number, 0 if it is none.
func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func (w *guestWatcher) stop() {
	w.monitor.stop()
	if w.v.qemu.running() {
		_, _ = w.v.sshTimeout(time.Minute, "systemctl stop node-watch")
	}
}

// TestLongestUnanswered: the longest run of requests not answered within
// a second, in the order sent, whatever order their answers came in.
func TestLongestUnanswered(t *testing.T) {
	base := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	var sent []guestRequest
	for i := range 200 { // 10 s, one every 50 ms; 2.5 s to 5.5 s late
		at := base.Add(time.Duration(i) * 50 * time.Millisecond)
		sent = append(sent, guestRequest{at, at.Before(base.Add(2500*time.Millisecond)) || !at.Before(base.Add(5500*time.Millisecond))})
	}
	slices.Reverse(sent)
	from, span, n := longestUnanswered(sent)
	if !from.Equal(base.Add(2500*time.Millisecond)) || span != 3*time.Second || n != 60 {
		t.Errorf("longestUnanswered = %v, %v, %d; want 10:00:02.5, 3s, 60", from.Format("15:04:05.000"), span, n)
	}
	if span < guestBlackoutBound {
		t.Errorf("a 3 s blackout passes the bound of %v", guestBlackoutBound)
	}
	if _, span, n := longestUnanswered(sent[:10]); span != 0 || n != 0 {
		t.Errorf("all answered: %v, %d; want 0, 0", span, n)
	}
}

// TestGuestKubeletsLog reads the guest's record of its kubelets: one
// serving while it holds the lock, or waiting on it, is the handover; one
// serving without the lock, or run without a lock file, is two kubelets
// at once.
func TestGuestKubeletsLog(t *testing.T) {
	for _, c := range []struct {
		lines     []string
		strangers int
		holders   int
	}{
		{[]string{"100:holder+serving", "100:holder+serving 200:unlocked", "100:holder+serving 200:waiting", "200:holder", "200:holder+serving"}, 0, 2},
		{[]string{"100:holder+serving 200:unlocked+serving"}, 1, 1},
		{[]string{"100:holder+serving 200:unlocked+nolockfile"}, 1, 1},
		{[]string{"none", "100:waiting+serving"}, 1, 0},
	} {
		dir := t.TempDir()
		var b strings.Builder
		for i, l := range c.lines {
			fmt.Fprintf(&b, "1764756000.%06d %s\n", i, l)
		}
		must(t, os.WriteFile(filepath.Join(dir, "kubelets.log"), []byte(b.String()), 0o644))
		w := &guestWatcher{monitor: &monitor{podLogs: map[string]string{}}, dir: dir, offsets: map[string]int64{}, servingHolders: map[string]bool{}}
		w.read()
		if len(w.strangers) != c.strangers || len(w.servingHolders) != c.holders || w.kubeletChanges != len(c.lines) {
			t.Errorf("%q: strangers %q, serving holders %v, %d changes; want %d, %d, %d", c.lines, w.strangers, w.servingHolders, w.kubeletChanges, c.strangers, c.holders, len(c.lines))
		}
	}
}
