//go:build k8s

package k8s

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// webDeployment runs two busybox httpd pods that serve their own name and
// the service-account token the kubelet mounted into them: the page proves
// that the token's tmpfs, mounted by the kubelet in nodeinit's mount
// namespace, reached the container that containerd made outside it.
const webDeployment = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: httpd
        image: ` + busyboxImage + `
        imagePullPolicy: Never
        command: [sh, -c, 'mkdir /www && echo "$HOSTNAME $(cat /var/run/secrets/kubernetes.io/serviceaccount/token)" > /www/index.html && exec httpd -f -p 8080 -h /www']
        ports: [{containerPort: 8080}]
        readinessProbe:
          tcpSocket: {port: 8080}
          periodSeconds: 1
`

const webService = `apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  type: ClusterIP
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080, protocol: TCP}]
`

// create creates an object from its YAML manifest in the collection at
// path (such as /api/v1/namespaces/default/pods) and has the node's
// teardown delete it (path/name).
func (k *kubeNode) create(path, name, manifest string) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	must(k.t, k.c.api.create(ctx, path, manifest))
	k.created = append(k.created, path+"/"+name)
}

// deployWeb creates the web Deployment and Service.
func (k *kubeNode) deployWeb() {
	k.t.Helper()
	k.create("/apis/apps/v1/namespaces/default/deployments", "web", webDeployment)
	k.create("/api/v1/namespaces/default/services", "web", webService)
}

// waitPods waits until n pods matching selector (a label selector, or a
// field selector when it starts with "metadata.") run on the node and are
// Ready, and returns them.
func (k *kubeNode) waitPods(selector string, n int, timeout time.Duration) []pod {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	q := url.Values{"labelSelector": {selector}}
	if strings.HasPrefix(selector, "metadata.") {
		q = url.Values{"fieldSelector": {selector}}
	}
	ready := func(ps []pod) []pod {
		var out []pod
		for _, p := range ps {
			if p.Spec.NodeName == nodeName && p.Status.Phase == "Running" && p.ready() && p.Metadata.DeletionTimestamp == nil {
				out = append(out, p)
			}
		}
		return out
	}
	items, err := watchUntil(ctx, k.c.api, "/api/v1/namespaces/default/pods", q, func(p pod) string { return p.Metadata.Name },
		func(ps []pod) bool { return len(ready(ps)) >= n || !k.running() })
	if got := ready(items); err != nil || len(got) < n {
		k.dumpLogs()
		k.t.Fatalf("%d of %d pods %q Running and Ready within %v (error: %v); pods: %s", len(got), n, selector, timeout, err, podSummary(items))
	}
	return ready(items)
}

func podSummary(ps []pod) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "\n  %s on %q: %s, conditions %+v, containers %+v", p.Metadata.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
	}
	return b.String()
}

// clusterIP is the web Service's address.
func (k *kubeNode) clusterIP() string {
	k.t.Helper()
	var s service
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must(k.t, k.c.api.get(ctx, "/api/v1/namespaces/default/services/web", &s))
	if s.Spec.ClusterIP == "" {
		k.t.Fatal("the web Service has no cluster IP")
	}
	return s.Spec.ClusterIP
}

// waitRules waits until kube-proxy's rules for the Service at ip, with
// each pod IP as an endpoint, are in the host's tables for mode, and
// returns how long that took.
func (k *kubeNode) waitRules(mode, ip string, pods []pod, timeout time.Duration) time.Duration {
	k.t.Helper()
	start := time.Now()
	var listing string
	deadline := start.Add(timeout)
	for {
		listing = rulesFor(k.t, mode)
		if programmed(mode, listing, ip, pods) {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			k.dumpLogs()
			k.t.Fatalf("kube-proxy (%s mode) did not program %s with the pods' endpoints within %v; the rules:\n%s", mode, ip, timeout, listing)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rulesFor lists where kube-proxy keeps its rules in mode: the nat table of
// iptables, or its own nftables table.
func rulesFor(t interface{ Fatal(...any) }, mode string) string {
	var out string
	var err error
	switch mode {
	case "iptables":
		out, err = run(30*time.Second, "iptables-save", "-t", "nat")
	case "nftables":
		out, err = run(30*time.Second, "nft", "list", "table", "ip", "kube-proxy")
	}
	if err != nil && mode == "iptables" {
		t.Fatal(err)
	}
	return out
}

// programmed reports whether listing sends the Service's IP to a service
// chain and holds a DNAT to each pod, in the form of either release of the
// matrix.
func programmed(mode, listing, ip string, pods []pod) bool {
	switch mode {
	case "iptables":
		if !strings.Contains(listing, "-d "+ip+"/32") || !strings.Contains(listing, `--comment "default/web cluster IP"`) {
			return false
		}
		for _, p := range pods {
			if !strings.Contains(listing, "--to-destination "+p.Status.PodIP+":8080") {
				return false
			}
		}
	case "nftables":
		if !strings.Contains(listing, ip+" . tcp . 80") {
			return false
		}
		// An endpoint chain's own DNAT (to v1.36), or an entry of the
		// service chain's DNAT map (v1.37: "dnat ip to numgen random mod 2
		// map { 0 : IP . PORT, ... }").
		for _, p := range pods {
			if !strings.Contains(listing, "dnat to "+p.Status.PodIP+":8080") && !strings.Contains(listing, ": "+p.Status.PodIP+" . 8080") {
				return false
			}
		}
	}
	return true
}

// checkService fetches the Service's page from the host through its
// cluster IP (kube-proxy's DNAT, the CNI bridge, the pod) until it answers,
// and checks that it comes from one of pods and holds that pod's own
// service-account token. It returns the pod that answered.
func (k *kubeNode) checkService(ip string, pods []pod, timeout time.Duration) string {
	k.t.Helper()
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	deadline := time.Now().Add(timeout)
	var last string
	for {
		resp, err := client.Get("http://" + ip + "/")
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return k.checkPage(string(body), pods)
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			k.dumpLogs()
			k.t.Fatalf("http://%s/ did not answer within %v: %s", ip, timeout, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkPage checks "NAME TOKEN": NAME one of pods, TOKEN a service-account
// token the API server signed for that pod.
func (k *kubeNode) checkPage(page string, pods []pod) string {
	k.t.Helper()
	name, token, ok := strings.Cut(strings.TrimSpace(page), " ")
	var claims struct {
		Sub        string
		Kubernetes struct {
			Namespace string
			Pod       struct{ Name string }
		} `json:"kubernetes.io"`
	}
	parts := strings.Split(token, ".")
	if !ok || len(parts) != 3 {
		k.t.Fatalf("the page is %q; want a pod name and its service-account token", testenv.Tail(page, 3))
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err == nil {
		err = json.Unmarshal(payload, &claims)
	}
	if err != nil {
		k.t.Fatalf("the token served by %s is no JWT: %v", name, err)
	}
	found := false
	for _, p := range pods {
		found = found || p.Metadata.Name == name
	}
	if !found || claims.Sub != "system:serviceaccount:default:default" || claims.Kubernetes.Pod.Name != name {
		k.t.Errorf("pod %q (one of the web pods: %v) served a token for %q, pod %q", name, found, claims.Sub, claims.Kubernetes.Pod.Name)
	}
	return name
}

// checkTokenMounted checks that each pod's spec mounts a projected
// service-account token, as the ServiceAccount admission adds it.
func (k *kubeNode) checkTokenMounted(pods []pod) {
	k.t.Helper()
	for _, p := range pods {
		if m := p.tokenMount(); m != "/var/run/secrets/kubernetes.io/serviceaccount/token" {
			k.t.Errorf("pod %s mounts its service-account token at %q", p.Metadata.Name, m)
		}
	}
}
