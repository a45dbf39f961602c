//go:build cluster

package cluster_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/test/cluster"
	"github.com/nodeinit/nodeinit/test/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// workloads are what the test runs on the cluster: a DaemonSet of web
// servers (one per node, each answering with its pod's name) behind a
// ClusterIP and a NodePort Service, and a Deployment of three that a
// drain moves.
const workloads = `apiVersion: apps/v1
kind: DaemonSet
metadata: {name: probe, namespace: default}
spec:
  selector: {matchLabels: {app: probe}}
  template:
    metadata: {labels: {app: probe}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: httpd
        image: ` + cluster.BusyboxImage + `
        command: [sh, -c, 'mkdir -p /www && hostname > /www/index.html && echo "serving $(hostname) on $NODE" && exec httpd -f -p 8080 -h /www']
        env:
        - name: NODE
          valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
        ports: [{containerPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: probe, namespace: default}
spec:
  selector: {app: probe}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: probe-nodeport, namespace: default}
spec:
  type: NodePort
  selector: {app: probe}
  ports: [{port: 80, targetPort: 8080, nodePort: 30080}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      # As a Service's servers are run for a drain without lost
      # requests: ready once httpd listens, and serving on for 3 s
      # after their eviction while every node's kube-proxy drops them.
      terminationGracePeriodSeconds: 10
      containers:
      - name: httpd
        image: ` + cluster.BusyboxImage + `
        command: [sh, -c, 'mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www']
        readinessProbe:
          tcpSocket: {port: 8080}
          periodSeconds: 1
        lifecycle:
          preStop:
            exec: {command: [sleep, "3"]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: default}
spec:
  minAvailable: 2
  selector: {matchLabels: {app: web}}
`

// TestCluster brings up a cluster of three nodeinit nodes (each running
// its own containerd; systemd nodes with NODEINIT_CLUSTER_FLAVOR=systemd)
// with flannel and CoreDNS, and checks what a user of kind relies on: a
// DaemonSet's pod on every node, pod to pod across nodes, a ClusterIP and
// a NodePort Service from every node, a Service resolved by name through
// CoreDNS, kubectl logs and exec to a pod on each node, an image pulled
// always through the cluster's registry (a mirror of a registry the
// machine cannot reach); then one node drained and stopped (its pods
// rescheduled) and started again (the same machine-id, Ready); then the
// cluster deleted, with nothing of it left on the machine.
func TestCluster(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tool := range []string{"podman", "mmdebstrap", "runc", "nft", "busybox"} {
		testenv.RequireTool(t, tool)
	}
	k8sBin := buildDir(t, "NODEINIT_K8S_BIN", "test/k8s/build/build.sh")
	netBin := buildDir(t, "NODEINIT_CLUSTER_BIN", "test/cluster/build/build.sh")
	dir, err := os.MkdirTemp("", "nodeinit-cluster-")
	if err != nil {
		t.Fatal(err)
	}
	cfg := cluster.Config{
		Name: "nitest", Nodes: 3, Dir: dir, Subnet: "172.30.49.0/24",
		K8sBin: k8sBin, NetBin: netBin, Repo: testenv.ModuleRoot(t),
		NodeInit: testenv.Build(t, "./cmd/nodeinit"), Pause: testenv.Build(t, "./test/k8s/pause"),
		BaseCache: filepath.Dir(netBin),
		// NODEINIT_CLUSTER_FLAVOR=systemd: the same checks on kind's
		// model, systemd as each node's PID 1.
		Flavor: os.Getenv("NODEINIT_CLUSTER_FLAVOR"),
	}
	before, err := cluster.ReadHost()
	if err != nil {
		t.Fatal(err)
	}
	c, err := cluster.Create(cfg, t.Logf)
	deleted := false
	if c != nil {
		t.Cleanup(func() {
			if !deleted {
				if t.Failed() {
					dumpCluster(t, c)
				}
				for _, err := range c.Delete() {
					t.Error(err)
				}
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	tm := c.Times
	t.Logf("cluster up: images %v, control plane %v; node containers started and images loaded %v, first Node Ready %v, all %d Ready %v, flannel and CoreDNS ready %v after the start",
		r(tm.Images), r(tm.ControlPlane), r(tm.NodesStarted), r(tm.FirstReady), len(c.NodeNames), r(tm.AllReady), r(tm.Addons))

	if _, err := c.KubectlIn(time.Minute, workloads, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	for _, o := range []string{"daemonset/probe", "deployment/web"} {
		must(t, kubectl(c, 3*time.Minute, "rollout", "status", o, "--timeout=180s"))
	}

	probes := podsOf(t, c, "app=probe")
	t.Run("DaemonSetOnEveryNode", func(t *testing.T) {
		var nodes []string
		for _, p := range probes {
			nodes = append(nodes, p.node)
		}
		sort.Strings(nodes)
		if !slices.Equal(nodes, c.NodeNames) {
			t.Errorf("the DaemonSet's pods run on %v; want one on each of %v", nodes, c.NodeNames)
		}
	})

	t.Run("PodToPodAcrossNodes", func(t *testing.T) {
		for _, from := range probes {
			for _, to := range probes {
				if from.node == to.node {
					continue
				}
				out, err := kubectlOut(c, time.Minute, "exec", from.name, "--", "sh", "-c", httpGet(to.ip, 8080))
				if err != nil || lastLine(out) != to.name {
					t.Errorf("from %s (%s) to %s (%s, %s): %q, %v", from.name, from.node, to.name, to.node, to.ip, out, err)
				}
			}
		}
		a, b := probes[0], probes[1]
		ping, err := kubectlOut(c, time.Minute, "exec", a.name, "--", "ping", "-c", "10", "-i", "0.2", "-q", b.ip)
		must(t, err)
		t.Logf("pod to pod across nodes (%s on %s to %s on %s): ping %s; HTTP request (nc, process start included) %v",
			a.name, a.node, b.name, b.node, pingSummary(ping), perRequest(t, c, a.name, b.ip, 8080))
	})

	svc, err := kubectlOut(c, time.Minute, "get", "service", "probe", "-o", "jsonpath={.spec.clusterIP}")
	must(t, err)
	t.Run("ServicesFromEveryNode", func(t *testing.T) {
		for _, n := range c.NodeNames {
			for i := range 3 {
				out, err := c.Podman(time.Minute, "exec", n, "curl", "-sS", "-m", "5", "http://"+svc+"/")
				if err != nil || !strings.HasPrefix(strings.TrimSpace(out), "probe-") {
					t.Errorf("ClusterIP %s from node %s (try %d): %q, %v", svc, n, i, out, err)
				}
			}
			for _, ip := range c.NodeIPs {
				out, err := c.Podman(time.Minute, "exec", n, "curl", "-sS", "-m", "5", "http://"+ip+":30080/")
				if err != nil || !strings.HasPrefix(strings.TrimSpace(out), "probe-") {
					t.Errorf("NodePort %s:30080 from node %s: %q, %v", ip, n, out, err)
				}
			}
		}
		t.Logf("ClusterIP Service %s from a pod on %s: %v a request (nc, process start included)", svc, probes[0].node, perRequest(t, c, probes[0].name, svc, 80))
	})

	t.Run("DNS", func(t *testing.T) {
		for _, name := range []string{"probe", "probe.default.svc.cluster.local", "kubernetes.default.svc.cluster.local"} {
			// busybox's nslookup tries the search domains too, and exits
			// 1 when any of them has no answer: its output says.
			out, err := kubectlOut(c, time.Minute, "exec", probes[0].name, "--", "sh", "-c", "nslookup "+name+" 2>&1; true")
			if err != nil {
				t.Errorf("nslookup %s: %v", name, err)
				continue
			}
			t.Logf("nslookup %s:\n%s", name, out)
			if !strings.Contains(out, cluster.DNSIP) {
				t.Errorf("nslookup %s was not answered by CoreDNS at %s:\n%s", name, cluster.DNSIP, out)
			}
			if strings.HasPrefix(name, "probe") && !strings.Contains(out, "Address: "+svc) && !strings.Contains(out, "Address 1: "+svc) {
				t.Errorf("nslookup %s did not give the Service's %s:\n%s", name, svc, out)
			}
		}
	})

	t.Run("LogsExecAndProxyOnEveryNode", func(t *testing.T) {
		for _, p := range probes {
			out, err := kubectlOut(c, time.Minute, "logs", p.name)
			if err != nil || !strings.Contains(out, "serving "+p.name+" on "+p.node) {
				t.Errorf("kubectl logs %s (on %s): %q, %v", p.name, p.node, out, err)
			}
			out, err = kubectlOut(c, time.Minute, "exec", p.name, "--", "cat", "/www/index.html")
			if err != nil || strings.TrimSpace(out) != p.name {
				t.Errorf("kubectl exec %s (on %s): %q, %v", p.name, p.node, out, err)
			}
			// The API server's own way to a pod, which its proxy,
			// webhooks and aggregated APIs take: the pod's address.
			out, err = kubectlOut(c, time.Minute, "get", "--raw", "/api/v1/namespaces/default/pods/"+p.name+":8080/proxy/")
			if err != nil || strings.TrimSpace(out) != p.name {
				t.Errorf("the API server's proxy to %s (on %s): %q, %v", p.name, p.node, out, err)
			}
		}
	})

	// A pod whose image is pulled always, from a registry this machine
	// cannot reach: with the cluster's registry as its mirror each node's
	// containerd pulls it from there; without, the pull fails. The image
	// is the cluster's busybox with a label of its own, so an image of its
	// own: once the kubelet has pulled an image under one name, it pulls
	// again to check any other name of the same image before a pod may
	// run it (its pulled-image records), and the busybox the nodes were
	// loaded with has no registry to be pulled from.
	t.Run("PullAlwaysThroughTheRegistry", func(t *testing.T) {
		testenv.RequireTool(t, "docker-registry")
		const image = "registry.k8s.io/nodeinit-test/busybox:pull-always"
		start := time.Now()
		work := t.TempDir()
		df := filepath.Join(work, "Dockerfile")
		must(t, os.WriteFile(df, []byte("FROM "+cluster.BusyboxImage+"\nLABEL org.opencontainers.image.title=pull-always\n"), 0o644))
		archive := filepath.Join(work, "pull-always.tar")
		for _, args := range [][]string{
			{"build", "-q", "--network=none", "-f", df, "-t", image, work},
			{"save", "--format", "docker-archive", "-o", archive, image},
			{"rmi", image},
		} {
			_, err := c.Podman(5*time.Minute, args...)
			must(t, err)
		}
		reg, err := c.StartRegistry(filepath.Join(work, "registry-store"), filepath.Join(work, "registry"))
		must(t, err)
		defer func() { must(t, reg.Stop()) }()
		must(t, reg.Push([]string{archive}, nil))
		must(t, reg.Mirror("registry.k8s.io"))
		t.Logf("registry on %s up, busybox pushed, the nodes' mirror of registry.k8s.io in %v", reg.Addr, r(time.Since(start)))
		for _, n := range c.NodeNames {
			pod := "pull-always-" + n
			must(t, kubectl(c, time.Minute, "run", pod, "--image="+image, "--image-pull-policy=Always", "--restart=Never",
				`--overrides={"spec":{"nodeName":"`+n+`"}}`, "--", "true"))
			must(t, kubectl(c, 2*time.Minute, "wait", "pod/"+pod, "--for=jsonpath={.status.phase}=Succeeded", "--timeout=120s"))
			events, err := kubectlOut(c, time.Minute, "get", "events", "--field-selector=involvedObject.name="+pod, "-o", "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}")
			must(t, err)
			if !strings.Contains(events, "Successfully pulled image \""+image+"\"") {
				t.Errorf("pod %s on %s: no pull of %s in its events:\n%s", pod, n, image, events)
			}
			must(t, kubectl(c, time.Minute, "delete", "pod", pod, "--wait=false"))
		}
		must(t, reg.Unmirror("registry.k8s.io"))
		pod := "pull-always-unmirrored"
		must(t, kubectl(c, time.Minute, "run", pod, "--image="+image, "--image-pull-policy=Always", "--restart=Never", "--", "true"))
		must(t, kubectl(c, 2*time.Minute, "wait", "pod/"+pod, "--for=jsonpath={.status.containerStatuses[0].state.waiting.reason}=ErrImagePull", "--timeout=120s"))
		must(t, kubectl(c, time.Minute, "delete", "pod", pod, "--wait=false"))
	})

	// A rolling update of the DaemonSet: every pod replaced, one on each
	// node again.
	t.Run("DaemonSetRollingUpdate", func(t *testing.T) {
		old := map[string]bool{}
		for _, p := range podsOf(t, c, "app=probe") {
			old[p.name] = true
		}
		start := time.Now()
		must(t, kubectl(c, time.Minute, "set", "env", "daemonset/probe", "ROLLOUT=2"))
		must(t, kubectl(c, 3*time.Minute, "rollout", "status", "daemonset/probe", "--timeout=180s"))
		var now []pod
		testenv.WaitFor(t, time.Minute, "the old DaemonSet pods gone", func() bool {
			now = podsOf(t, c, "app=probe")
			for _, p := range now {
				if old[p.name] {
					return false
				}
			}
			return true
		})
		t.Logf("DaemonSet rolled over %d nodes in %v", len(now), r(time.Since(start)))
		var nodes []string
		for _, p := range now {
			nodes = append(nodes, p.node)
		}
		if !slices.Equal(nodes, c.NodeNames) {
			t.Errorf("after the rolling update the DaemonSet's pods run on %v; want one on each of %v", nodes, c.NodeNames)
		}
	})

	t.Run("NodeStoppedAndStarted", func(t *testing.T) {
		node := c.NodeNames[1]
		id, err := c.Podman(time.Minute, "exec", node, "cat", "/etc/machine-id")
		must(t, err)
		// Requests to the web Service, behind its PodDisruptionBudget,
		// from a pod on another node, every 100 ms while the node is
		// drained and stopped and its pods come up elsewhere.
		web, err := kubectlOut(c, time.Minute, "get", "service", "web", "-o", "jsonpath={.spec.clusterIP}")
		must(t, err)
		client := podsOf(t, c, "app=probe")[0]
		if client.node == node {
			t.Fatalf("the requests' pod %s is on the node to stop", client.name)
		}
		// The busybox image is /bin alone: the loop makes its /tmp.
		loop := `mkdir -p /tmp && rm -f /tmp/requests /tmp/stop; (while [ ! -e /tmp/stop ]; do if ` + httpGet(strings.TrimSpace(web), 80) +
			` | grep -q web-; then echo ok; else echo "fail $(cat /proc/uptime)"; fi >> /tmp/requests; sleep 0.1; done) </dev/null >/dev/null 2>&1 &`
		must(t, kubectl(c, time.Minute, "exec", client.name, "--", "sh", "-c", loop))
		drain, stop, err := c.StopNode(node)
		must(t, err)
		code, err := c.Podman(time.Minute, "inspect", "--format", "{{.State.ExitCode}}", node)
		must(t, err)
		t.Logf("node %s drained in %v, its container stopped in %v, exit code %s", node, r(drain), r(stop), strings.TrimSpace(code))
		// systemd halts with reboot(2), which ends PID 1 of a pid
		// namespace as SIGINT would: 130. nodeinit exits with the
		// kubelet's status.
		want := "0"
		if c.Flavor == cluster.FlavorSystemd {
			want = "130"
		}
		if strings.TrimSpace(code) != want {
			t.Errorf("node %s's PID 1 exited %s after podman stop; want %s", node, strings.TrimSpace(code), want)
		}
		must(t, kubectl(c, 3*time.Minute, "rollout", "status", "deployment/web", "--timeout=180s"))
		for _, p := range podsOf(t, c, "app=web") {
			if p.node == node {
				t.Errorf("pod %s is still on the stopped node %s", p.name, node)
			}
		}
		out, err := kubectlOut(c, time.Minute, "exec", client.name, "--", "sh", "-c", "touch /tmp/stop; sleep 3; cat /tmp/requests")
		must(t, err)
		ok, failed := strings.Count(out, "ok\n"), strings.Count(out, "fail")
		t.Logf("requests to the web Service (PodDisruptionBudget minAvailable 2 of 3) from %s during the node's drain, stop and the rescheduling: %d answered, %d failed", client.node, ok, failed)
		if failed > 0 || ok < 20 {
			t.Errorf("%d of %d requests to the web Service failed during the node's drain and stop (want 0 of at least 20):\n%s", failed, ok+failed, testenv.Tail(out, 20))
		}
		ready, err := c.StartNode(node)
		must(t, err)
		id2, err := c.Podman(time.Minute, "exec", node, "cat", "/etc/machine-id")
		must(t, err)
		t.Logf("node %s started again: Ready %v after podman start, machine-id %s", node, r(ready), strings.TrimSpace(id2))
		if strings.TrimSpace(id) != strings.TrimSpace(id2) || len(strings.TrimSpace(id)) != 32 {
			t.Errorf("node %s's machine-id was %q, is %q after its restart", node, id, id2)
		}
		// The DaemonSet counts the node's pod available until its new
		// kubelet reports the pod's new sandbox: wait for the pod itself.
		must(t, kubectl(c, 3*time.Minute, "rollout", "status", "daemonset/probe", "--timeout=180s"))
		testenv.WaitFor(t, 2*time.Minute, fmt.Sprintf("a DaemonSet pod on each of the %d nodes after the node's restart", len(c.NodeNames)), func() bool {
			return len(podsOf(t, c, "app=probe")) == len(c.NodeNames)
		})
	})

	t.Run("DeletedWithNothingLeft", func(t *testing.T) {
		start := time.Now()
		deleted = true
		for _, err := range c.Delete() {
			t.Error(err)
		}
		t.Logf("cluster deleted in %v", r(time.Since(start)))
		for _, l := range c.Leftovers(before) {
			t.Errorf("left on the machine: %s", l)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("the cluster's directory %s is still there", dir)
		}
	})
}

// pod is a pod's name, node and IP.
type pod struct{ name, node, ip string }

func podsOf(t *testing.T, c *cluster.Cluster, selector string) []pod {
	t.Helper()
	out, err := kubectlOut(c, time.Minute, "get", "pods", "-l", selector, "--field-selector=status.phase=Running",
		"-o", `jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName} {.status.podIP}{"\n"}{end}`)
	must(t, err)
	var pods []pod
	for l := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(l); len(f) == 3 {
			pods = append(pods, pod{f[0], f[1], f[2]})
		}
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].node < pods[j].node })
	return pods
}

// httpGet is a shell line that sends an HTTP GET to ip:port with busybox's
// nc and prints the answer. (The static busybox's wget looks the "http"
// port up through NSS, which a static glibc program cannot load: it
// crashes.)
func httpGet(ip string, port int) string {
	return fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 %s %d`, ip, port)
}

// lastLine is the last non-empty line of an HTTP answer: the body the
// web servers send, their pod's name.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(strings.ReplaceAll(s, "\r", "")), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// perRequest is the mean time of 100 HTTP requests from a pod to
// ip:port, each a new nc, timed by the pod's /proc/uptime (busybox's date
// has no nanoseconds): 10 ms over 100 requests, 0.1 ms a request.
func perRequest(t *testing.T, c *cluster.Cluster, from, ip string, port int) time.Duration {
	t.Helper()
	script := `cs() { read up rest < /proc/uptime; echo ${up%.*}${up#*.}; }; a=$(cs); for i in $(seq 100); do ` + httpGet(ip, port) +
		` | grep -q probe- || exit 1; done; b=$(cs); echo $(( (b - a) * 100 ))`
	out, err := kubectlOut(c, time.Minute, "exec", from, "--", "sh", "-c", script)
	must(t, err)
	us, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("timing %s:%d from %s: %q", ip, port, from, out)
	}
	return time.Duration(us) * time.Microsecond
}

// pingSummary is ping's round-trip line.
func pingSummary(out string) string {
	for l := range strings.SplitSeq(out, "\n") {
		if strings.Contains(l, "round-trip") || strings.Contains(l, "rtt") {
			return strings.TrimSpace(l)
		}
	}
	return strings.TrimSpace(out)
}

func kubectl(c *cluster.Cluster, timeout time.Duration, args ...string) error {
	_, err := c.Kubectl(timeout, args...)
	return err
}

func kubectlOut(c *cluster.Cluster, timeout time.Duration, args ...string) (string, error) {
	return c.Kubectl(timeout, args...)
}

// dumpCluster logs what a failed run needs: the pods, the nodes, each
// node's nodeinit log and its kubelet's and containerd's last lines.
func dumpCluster(t *testing.T, c *cluster.Cluster) {
	out, err := c.Kubectl(time.Minute, "get", "nodes,pods", "--all-namespaces", "-o", "wide")
	t.Logf("nodes and pods:\n%s%v", out, err)
	out, _ = c.Kubectl(time.Minute, "get", "events", "--all-namespaces", "--sort-by=.lastTimestamp")
	t.Logf("events:\n%s", testenv.Tail(out, 40))
	for _, n := range c.NodeNames {
		log, _ := c.Podman(time.Minute, "logs", n)
		t.Logf("node %s, nodeinit's log:\n%s", n, testenv.Tail(log, 30))
		for _, f := range []string{"executor.log", "runtime.log", "proxy.log"} {
			out, _ := c.Podman(time.Minute, "exec", n, "tail", "-n", "25", "/var/log/nodeinit/"+f)
			t.Logf("node %s, %s:\n%s", n, f, out)
		}
	}
}

// buildDir is a build's directory: $env when set, else what the build
// script prints with --cached (the build itself is make's).
func buildDir(t *testing.T, env, script string) string {
	t.Helper()
	if dir := os.Getenv(env); dir != "" {
		return dir
	}
	out, err := exec.Command(filepath.Join(testenv.ModuleRoot(t), script), "--cached").Output()
	testenv.Require(t, err == nil, fmt.Sprintf("the build of %s (make e2e-cluster builds it)", script))
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

func r(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
