//go:build k8s

package k8s

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	nodecluster "github.com/nodeinit/nodeinit/test/cluster"
	"github.com/nodeinit/nodeinit/test/testenv"
	"golang.org/x/sys/unix"
)

// The images of the e2e suite that make conformance makes here, under the
// names the suite's release gives them (e2e.test --list-images), so that
// its pods find them in containerd and pull nothing.
const (
	conformanceAgnhost = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"
	conformanceBusybox = "registry.k8s.io/e2e-test-images/busybox:1.37.0-2"
	conformancePause   = "registry.k8s.io/pause:3.10.2"
	conformanceNginx   = "registry.k8s.io/e2e-test-images/nginx:1.27.0-2"
	// conformanceRegistry is where the suite's images come from.
	conformanceRegistry = "registry.k8s.io"
)

// conformanceAgnhostPackages are the Debian packages of the agnhost image's
// root: the tools upstream's Alpine image carries for the specs that exec
// them in its pods (images/agnhost/Dockerfile names which is which).
var conformanceAgnhostPackages = []string{"bind9-dnsutils", "curl", "netcat-openbsd", "iproute2", "iperf", "socat", "util-linux", "ca-certificates", "net-tools", "procps", "wget", "iputils-ping"}

// TestConformance runs Kubernetes' own end-to-end suite (e2e.test, of the
// release the real-node tests run) against nodeinit nodes, and writes each
// spec's result as JUnit and as a table. The nodes are one nodeinit node on
// the shared control plane, or the nodes of a cluster make cluster brought
// up. make conformance builds the suite and runs it; the environment says
// what to run:
//
//	NODEINIT_CONFORMANCE_BIN     the suite's build (test/k8s/conformance/build.sh)
//	NODEINIT_CONFORMANCE_SPECS   a file of spec names, one a line, run exactly
//	NODEINIT_CONFORMANCE_FOCUS   or a ginkgo focus of its own (a regular expression)
//	NODEINIT_CONFORMANCE_CLUSTER a cluster's directory (test/cluster): its nodes, not one of the fixture's
//	NODEINIT_CONFORMANCE_PROCS   ginkgo processes (default 1); above 1 the [Serial] specs run after the rest, alone
//	NODEINIT_CONFORMANCE_REPORT  where junit_01.xml (one for each pass), results.md and e2e*.log go
//	NODEINIT_CONFORMANCE_TIMEOUT the suite's own bound (default 30m)
//
// Without NODEINIT_CONFORMANCE_BIN it skips, and fails in CI; make e2e-k8s
// leaves it out by name. Any spec that fails fails the test; so does a
// spec of the file that did not run or was skipped, since the file is the
// fixed set a run must cover.
func TestConformance(t *testing.T) {
	o := conformanceFromEnv(t)
	var nodes conformanceNodes
	if dir := os.Getenv("NODEINIT_CONFORMANCE_CLUSTER"); dir != "" {
		nodes = conformanceOnCluster(t, o.suite, dir)
	} else {
		nodes = getCluster(t).conformanceOnNode(t, o.suite, o.report)
	}
	o.run(t, nodes)
}

// conformanceOptions are what a run of the suite runs, and how.
type conformanceOptions struct {
	suite, report string // the suite's build; where its reports go
	specsFile     string // the fixed set's file, or ""
	specs         []string
	focus, labels string
	timeout       time.Duration
	procs         int
}

// conformanceFromEnv reads a run's options from the environment
// (TestConformance says which variable is what).
func conformanceFromEnv(t *testing.T) conformanceOptions {
	t.Helper()
	// make e2e-k8s leaves this test out by name; what runs it names the
	// suite's build.
	suite := os.Getenv("NODEINIT_CONFORMANCE_BIN")
	testenv.Require(t, suite != "", "the e2e suite's build in NODEINIT_CONFORMANCE_BIN (make conformance sets it)")
	specsFile, focus := os.Getenv("NODEINIT_CONFORMANCE_SPECS"), os.Getenv("NODEINIT_CONFORMANCE_FOCUS")
	var specs []string
	switch {
	case specsFile != "" && focus != "":
		t.Fatal("NODEINIT_CONFORMANCE_SPECS and NODEINIT_CONFORMANCE_FOCUS both set: one says what runs")
	case specsFile != "":
		var err error
		if specs, err = conformanceReadSpecs(specsFile); err != nil {
			t.Fatal(err)
		}
		focus = conformanceFocus(specs)
	case focus == "":
		t.Fatal("neither NODEINIT_CONFORMANCE_SPECS nor NODEINIT_CONFORMANCE_FOCUS says which specs to run")
	}
	timeout := 30 * time.Minute
	if v := os.Getenv("NODEINIT_CONFORMANCE_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("NODEINIT_CONFORMANCE_TIMEOUT: %v", err)
		}
		timeout = d
	}
	procs := 1
	if v := os.Getenv("NODEINIT_CONFORMANCE_PROCS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("NODEINIT_CONFORMANCE_PROCS=%q: not a number of processes", v)
		}
		procs = n
	}
	report := os.Getenv("NODEINIT_CONFORMANCE_REPORT")
	if report == "" {
		report = t.TempDir()
	}
	must(t, os.MkdirAll(report, 0o755))
	e2e := filepath.Join(suite, "e2e.test")
	if _, err := os.Stat(e2e); err != nil {
		t.Fatalf("the suite is not built in %s: make conformance builds it (%v)", suite, err)
	}
	if procs > 1 && !fileExists(filepath.Join(suite, "ginkgo")) {
		t.Fatalf("NODEINIT_CONFORMANCE_PROCS=%d needs the ginkgo command, which %s lacks: make conformance-build builds it", procs, suite)
	}
	if specs != nil {
		conformanceCheckSpecs(t, e2e, specs)
	}
	return conformanceOptions{suite: suite, report: report, specsFile: specsFile, specs: specs, focus: focus,
		labels: os.Getenv("NODEINIT_CONFORMANCE_LABELS"), timeout: timeout, procs: procs}
}

// run runs the suite against nodes, writes the table and fails the test
// on any failed spec, and on any spec of the fixed set that did not pass.
func (o conformanceOptions) run(t *testing.T, nodes conformanceNodes) {
	t.Helper()
	args := append([]string{
		"--kubeconfig=" + nodes.kubeconfig,
		"--provider=skeleton",
		"--kubectl-path=" + nodes.kubectl,
		"--num-nodes=" + strconv.Itoa(nodes.count),
		"--e2e-output-dir=" + o.report,
		// Nothing to gather the nodes' logs over ssh from: the run's own
		// logs are the nodes' directories.
		"--disable-log-dump",
	}, nodes.args...)

	// One pass, or with several processes two, as Kubernetes' CI runs the
	// suite: the [Serial] specs (labelled Serial) must have the cluster to
	// themselves, so they run after the others, on one process.
	// NODEINIT_CONFORMANCE_LABELS, a ginkgo label filter, narrows the
	// focus: NodeConformance && !Conformance, say, for the node's specs
	// that a [Conformance] run leaves out.
	passes := []conformancePass{{name: "", procs: 1, labels: o.labels}}
	if o.procs > 1 {
		passes = []conformancePass{{name: "parallel", procs: o.procs, labels: andLabels(o.labels, "!Serial")},
			{name: "serial", procs: 1, labels: andLabels(o.labels, "Serial")}}
	}
	var cases []conformanceCase
	var runErrs []error
	start := time.Now()
	deadline := start.Add(o.timeout)
	for _, pass := range passes {
		dir, junit, log := pass.files(o.report)
		must(t, os.MkdirAll(dir, 0o755))
		_ = os.Remove(junit)
		remaining := time.Until(deadline).Round(time.Second)
		cmd := pass.command(o.suite, o.focus, remaining, dir, args)
		t.Logf("running %s", strings.Join(cmd, " "))
		passStart := time.Now()
		runErr := conformanceRun(cmd, log, remaining+2*time.Minute)
		got, err := conformanceReadJUnit(junit)
		if err != nil {
			t.Fatalf("the suite wrote no report (%v; it ended with %v); the end of %s:\n%s", err, runErr, log, conformanceTail(log, 40))
		}
		t.Logf("pass %q: %d specs reported in %v (%s)", pass.name, len(got), time.Since(passStart).Round(time.Second), conformanceExit(runErr))
		cases = append(cases, conformancePassCases(got, len(passes))...)
		if runErr != nil {
			runErrs = append(runErrs, fmt.Errorf("%s: %w", log, runErr))
		}
	}
	took := time.Since(start)

	results := conformanceResults(cases, o.specs)
	table := conformanceTable(results)
	must(t, os.WriteFile(filepath.Join(o.report, "results.md"), []byte(table), 0o644))
	counts := map[string]int{}
	for _, r := range results {
		counts[r.status]++
	}
	t.Logf("the suite ran in %v on %d node(s), %d process(es) (%v): %d specs: %d passed, %d failed, %d skipped, %d not run\n%s\ntable: %s, JUnit and logs: %s",
		took.Round(time.Second), nodes.count, o.procs, errors.Join(runErrs...), len(results), counts["passed"], counts["failed"], counts["skipped"], counts["not run"],
		table, filepath.Join(o.report, "results.md"), o.report)
	for _, r := range results {
		switch {
		case r.status == "failed":
			t.Errorf("failed: %s: %s", r.name, r.reason)
		case r.listed && r.status != "passed":
			t.Errorf("%s, though it is in the fixed set of %s: %s: %s", r.status, o.specsFile, r.name, r.reason)
		}
	}
	if len(runErrs) > 0 && counts["failed"] == 0 {
		t.Errorf("the suite ended with %v and no spec failed", errors.Join(runErrs...))
	}
}

// conformanceNodes are the nodes a run tests, and how the suite reaches
// them.
type conformanceNodes struct {
	kubeconfig, kubectl string
	count               int
	args                []string // more of e2e.test's flags
}

// conformanceOnNode makes the suite's images, imports them into the
// fixture's containerd and starts one nodeinit node for the suite.
func (c *cluster) conformanceOnNode(t *testing.T, suite, report string) conformanceNodes {
	t.Helper()
	start := time.Now()
	for _, a := range conformanceImages(t, suite, c.podman, c.dir, c.net) {
		must(t, c.containerd.importImage(a))
	}
	// pause: the fixture's sandbox image is a pause of its own (holds the
	// pod's namespaces, reaps, exits on TERM), the same program the suite
	// runs as a container of its own under this name.
	for _, alias := range append(conformanceAliases, [2]string{pauseImage, conformancePause}) {
		if _, err := run(time.Minute, c.containerd.ctr, "--address", c.containerd.socket(), "--namespace", "k8s.io",
			"images", "tag", "--force", alias[0], alias[1]); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("the suite's images made and imported into containerd in %v", time.Since(start).Round(100*time.Millisecond))

	name, addr := conformanceNodeName(t)
	c.startConformanceNode(t, name, addr)
	kubeconfig := filepath.Join(report, "admin.conf")
	must(t, os.WriteFile(kubeconfig, c.pki.kubeconfig(apiServer, c.admin), 0o600))
	return conformanceNodes{kubeconfig: kubeconfig, kubectl: filepath.Join(c.bin, "kubectl"), count: 1,
		args: []string{"--container-runtime-endpoint=" + c.containerd.endpoint()}}
}

// conformanceOnCluster makes the suite's images with a podman store of its
// own and serves them to the nodes of the cluster in dir (make cluster)
// from a registry on the host: each node's containerd pulls them as it
// needs them, through the registry as its mirror of registry.k8s.io.
func conformanceOnCluster(t *testing.T, suite, dir string) conformanceNodes {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "podman")
	testenv.RequireTool(t, "docker-registry")
	cl, err := nodecluster.Open(dir, t.Logf)
	if err != nil {
		t.Fatalf("%v (make cluster brings a cluster up)", err)
	}
	if out, err := cl.Kubectl(30*time.Second, "get", "nodes"); err != nil {
		t.Fatalf("the cluster in %s does not answer: %v", dir, err)
	} else {
		t.Logf("the cluster's nodes:\n%s", out)
	}
	work := t.TempDir()
	p, err := newPodman(filepath.Join(work, "podman"))
	must(t, err)
	t.Cleanup(func() {
		for _, err := range p.close() {
			t.Error(err)
		}
	})
	archives := conformanceImages(t, suite, p, work, cl.NetBin)
	aliases := append(conformanceAliases, [2]string{nodecluster.PauseImage, conformancePause})

	// The nodes pull every image of the suite, as a connected cluster's
	// would, from registry.k8s.io, which this machine cannot reach: a
	// registry on the host is their mirror of it, holding the images
	// above and their second names. Its store is kept beside the suite's
	// images, so a run that finds it has the registry up in seconds, and
	// a node pulls only the images its pods run.
	pushed := slices.Concat(archives, []string{cl.ImageArchive(nodecluster.PauseImage)})
	// The key: the archives' names, which say what each is made of, and
	// the pause program (each cluster builds its own pause image of it).
	var names []string
	for _, a := range archives {
		names = append(names, filepath.Base(a))
	}
	names = append(names, cl.Pause)
	for _, alias := range aliases {
		names = append(names, alias[0]+"="+alias[1])
	}
	store := filepath.Join(suite, "images", "registry-"+conformanceKey(t, names...))
	start := time.Now()
	reg, filled, err := conformanceStartRegistry(cl, store, work, pushed, aliases)
	must(t, err)
	t.Cleanup(func() {
		if err := reg.Unmirror(conformanceRegistry); err != nil {
			t.Error(err)
		}
		if err := reg.Stop(); err != nil {
			t.Error(err)
		}
	})
	t.Logf("a registry on %s, the %d nodes' mirror of %s, up in %v (its store filled: %v)",
		reg.Addr, len(cl.NodeNames), conformanceRegistry, time.Since(start).Round(100*time.Millisecond), filled)
	return conformanceNodes{kubeconfig: cl.Kubeconfig(), kubectl: filepath.Join(cl.K8sBin, "kubectl"), count: len(cl.NodeNames)}
}

// conformanceStartRegistry starts the cluster's registry on store and
// makes it the nodes' mirror of registry.k8s.io. A store that is not
// there is filled first with the archives' images (and aliases): in a
// store of the run's own, renamed into place once whole, so that two runs
// side by side never share a partial one; stores of other images go.
func conformanceStartRegistry(cl *nodecluster.Cluster, store, work string, archives []string, aliases [][2]string) (r *nodecluster.Registry, filled bool, err error) {
	if _, err := os.Stat(store); err != nil {
		partial := fmt.Sprintf("%s.partial-%d", store, os.Getpid())
		if err := os.RemoveAll(partial); err != nil {
			return nil, false, err
		}
		fill, err := cl.StartRegistry(partial, filepath.Join(work, "registry-fill"))
		if err != nil {
			return nil, false, err
		}
		err = fill.Push(archives, aliases)
		if serr := fill.Stop(); err == nil {
			err = serr
		}
		if err == nil {
			err = os.Rename(partial, store)
			if _, serr := os.Stat(store); err != nil && serr == nil {
				err = nil // another run's, whole, came first
			}
		}
		if rerr := os.RemoveAll(partial); err == nil {
			err = rerr
		}
		if err != nil {
			return nil, false, err
		}
		filled = true
		stale, _ := filepath.Glob(filepath.Join(filepath.Dir(store), "registry-*"))
		for _, d := range stale {
			if d != store && !strings.Contains(filepath.Base(d), ".partial-") {
				_ = os.RemoveAll(d)
			}
		}
	}
	r, err = cl.StartRegistry(store, filepath.Join(work, "registry"))
	if err != nil {
		return nil, filled, err
	}
	if err := r.Mirror(conformanceRegistry); err != nil {
		_ = r.Stop()
		return nil, filled, err
	}
	return r, filled, nil
}

// andLabels is both ginkgo label filters, a and b; a may be empty.
func andLabels(a, b string) string {
	if a == "" {
		return b
	}
	return "(" + a + ") && " + b
}

// conformancePass is one run of the suite: e2e.test itself on one
// process, or ginkgo's command on several.
type conformancePass struct {
	name   string // "" for the only pass
	procs  int
	labels string // a ginkgo label filter, or ""
}

// files are the pass's directory, where the suite writes its JUnit report
// (junit_01.xml: the spec names without ginkgo's labels appended, as
// Kubernetes' CI reads them), and its log.
func (p conformancePass) files(report string) (dir, junit, log string) {
	dir, suffix := report, ""
	if p.name != "" {
		dir, suffix = filepath.Join(report, p.name), "-"+p.name
	}
	return dir, filepath.Join(dir, "junit_01.xml"), filepath.Join(report, "e2e"+suffix+".log")
}

// command is the pass's command line: e2e.test with the suite's flags and
// ginkgo's, or ginkgo running e2e.test on procs processes; the suite
// writes its report into dir.
func (p conformancePass) command(suite, focus string, timeout time.Duration, dir string, args []string) []string {
	args = append(slices.Clone(args), "--report-dir="+dir)
	ginkgo := []string{"focus=" + focus, "timeout=" + timeout.String(), "no-color", "v", "silence-skips"}
	if p.labels != "" {
		ginkgo = append(ginkgo, "label-filter="+p.labels)
	}
	e2e := filepath.Join(suite, "e2e.test")
	if p.procs == 1 {
		cmd := append([]string{e2e}, args...)
		for _, f := range ginkgo {
			cmd = append(cmd, "--ginkgo."+f)
		}
		return cmd
	}
	cmd := []string{filepath.Join(suite, "ginkgo"), "--procs=" + strconv.Itoa(p.procs)}
	for _, f := range ginkgo {
		cmd = append(cmd, "--"+f)
	}
	return append(append(cmd, e2e, "--"), args...)
}

// conformanceReadSpecs reads a file of full spec names, one a line, as
// e2e.test --list-tests prints them; blank lines and lines starting with #
// are left out.
func conformanceReadSpecs(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var specs []string
	for l := range strings.Lines(string(data)) {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") {
			specs = append(specs, l)
		}
	}
	if len(specs) == 0 {
		return nil, fmt.Errorf("%s names no spec", path)
	}
	return specs, nil
}

// conformanceFocus is the ginkgo focus that selects exactly specs: each
// name whole. The text ginkgo matches a focus against ends with the spec's
// full name but does not begin with it, hence the space or start before it.
func conformanceFocus(specs []string) string {
	quoted := make([]string, len(specs))
	for i, s := range specs {
		quoted[i] = regexp.QuoteMeta(s)
	}
	return `(^|\s)(` + strings.Join(quoted, "|") + ")$"
}

// conformanceCheckSpecs fails the test when a spec of the fixed set is not
// in the suite: a release renames specs, and a name that selects nothing
// must not pass unnoticed.
func conformanceCheckSpecs(t *testing.T, e2e string, specs []string) {
	t.Helper()
	out, err := stdoutOf(2*time.Minute, e2e, "--list-tests")
	if err != nil {
		t.Fatalf("list the suite's specs: %v", err)
	}
	have := map[string]bool{}
	for l := range strings.Lines(out) {
		// "    k8s.io/kubernetes@v1.37.2/test/e2e/x.go:52: NAME"
		if _, name, ok := strings.Cut(strings.TrimSpace(l), ": "); ok {
			have[name] = true
		}
	}
	for _, s := range specs {
		if !have[s] {
			t.Errorf("the suite has no spec %q", s)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// conformanceNodeName is the node's name and the address the kubelet
// listens on: the machine's own host name, lower-cased, and the address it
// resolves to. The API server reaches a kubelet at the Node's Hostname
// address first, for logs, exec, attach and port-forward; a node named
// after a name that does not resolve to where its kubelet listens fails
// every spec that reads a pod's logs.
func conformanceNodeName(t *testing.T) (name, addr string) {
	t.Helper()
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	name = strings.ToLower(host)
	addrs, err := net.LookupHost(name)
	if err != nil {
		t.Fatalf("the machine's name %q does not resolve (%v): the API server reaches the node's kubelet by its name", name, err)
	}
	for _, a := range addrs {
		if ip := net.ParseIP(a); ip != nil && ip.To4() != nil {
			return name, a
		}
	}
	t.Fatalf("the machine's name %q resolves to no IPv4 address (%v)", name, addrs)
	return "", ""
}

// startConformanceNode runs a node as startNode does (nodeinit as PID 1 of
// new pid and mount namespaces, the real kubelet and kube-proxy), named
// name, with its kubelet listening on addr, and waits for it to be Ready.
// The Node object is deleted when the test ends, after the node stops.
func (c *cluster) startConformanceNode(t *testing.T, name, addr string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.api.remove(ctx, "/api/v1/nodes/"+name); err != nil {
			t.Errorf("delete the node %s: %v", name, err)
		}
	})
	spec := nodeSpec{
		flags:       []string{"--hostname-override=" + name},
		kubeletArgs: []string{"--hostname-override=" + name, "--address=" + addr},
		binary:      testenv.Build(t, "./cmd/nodeinit"),
	}
	dir := t.TempDir()
	c.writeNodeFiles(t, dir, dir, spec)
	// The kubelet's identity is its node's: the NodeRestriction admission
	// lets system:node:NAME register and update the Node NAME only.
	kubelet, err := c.pki.issue("kubelet-conformance", "system:node:"+name, []string{"system:nodes"})
	must(t, err)
	serving, err := c.pki.issue("serving-conformance", name, nil, addr, name)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, "kubelet.conf"), c.pki.kubeconfig(apiServer, kubelet), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "kubelet-serving.crt"), serving.cert, 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "kubelet-serving.key"), serving.key, 0o600))
	k := c.launchNodeWith(t, dir, testenv.Options{Binary: spec.binary}, c.nodeArgs(dir, spec)...)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	q := url.Values{"fieldSelector": {"metadata.name=" + name}}
	items, err := watchUntil(ctx, c.api, "/api/v1/nodes", q, func(n node) string { return n.Metadata.Name },
		func(ns []node) bool { return len(ns) == 1 && ns[0].ready() || !k.running() })
	if err != nil || len(items) != 1 || !items[0].ready() {
		k.dumpLogs()
		t.Fatalf("the node %s did not become Ready within 2m (nodeinit running: %v, error: %v)", name, k.running(), err)
	}
	t.Logf("node %s Ready %v after nodeinit started; its kubelet serves on %s:10250", name, time.Since(k.started).Round(100*time.Millisecond), addr)
}

// conformanceImages makes the suite's images with the podman p, in work,
// once per build of the suite (they are kept beside it), and returns their
// archives; net is the cluster's build (make cluster-build), whose CoreDNS
// and etcd two of them carry.
func conformanceImages(t *testing.T, suite string, p *podman, work, net string) []string {
	t.Helper()
	root := testenv.ModuleRoot(t)
	dir := filepath.Join(suite, "images")
	must(t, os.MkdirAll(dir, 0o755))
	defer conformanceLockImages(t, dir)()

	// agnhost: the program built with the suite, on a Debian root.
	// Its fake registry (fake-registry-server serves /var/registry) holds
	// a pause image under the tag "testing", as upstream's holds pause
	// 3.10.2: the nodes' own pause program.
	agnhostDef := filepath.Join(root, "images", "agnhost", "Dockerfile")
	pause := testenv.Build(t, "./test/k8s/pause")
	agnhost := filepath.Join(dir, "agnhost-"+conformanceKey(t, agnhostDef, strings.Join(conformanceAgnhostPackages, ","), pause)+".tar")
	if !fileExists(agnhost) {
		base := debianRoot(t, filepath.Dir(suite), conformanceAgnhostPackages)
		const baseImage = "localhost/nodeinit-conformance-agnhost-base:test"
		if _, err := p.run(5*time.Minute, "import", base, baseImage); err != nil {
			t.Fatal(err)
		}
		ctxDir := filepath.Join(work, "images", "agnhost")
		must(t, linkOrCopy(filepath.Join(suite, "agnhost"), filepath.Join(ctxDir, "agnhost")))
		for _, f := range []string{"localhost.crt", "localhost.key"} {
			must(t, linkOrCopy(filepath.Join(suite, "agnhost-files", f), filepath.Join(ctxDir, f)))
		}
		conformanceFakeRegistry(t, p, pause, work, filepath.Join(ctxDir, "registry", "pause"), "testing")
		conformanceBuild(t, p, agnhostDef, ctxDir, agnhost, conformanceAgnhost, "BASE="+baseImage)
	}

	// busybox: Debian's busybox-static, a link for each applet.
	busyboxDef := filepath.Join(root, "images", "busybox", "Dockerfile")
	bb := filepath.Join(conformanceBusyBox(t, root, filepath.Dir(suite)), "busybox")
	busybox := filepath.Join(dir, "busybox-"+conformanceKey(t, busyboxDef, filepath.Join(filepath.Dir(busyboxDef), "passwd"),
		filepath.Join(filepath.Dir(busyboxDef), "group"), bb)+".tar")
	if !fileExists(busybox) {
		ctxDir := filepath.Join(work, "images", "conformance-busybox")
		must(t, linkOrCopy(bb, filepath.Join(ctxDir, "bin", "busybox")))
		list, err := run(10*time.Second, bb, "--list")
		must(t, err)
		for _, applet := range strings.Fields(list) {
			if applet != "busybox" && !strings.Contains(applet, "/") {
				must(t, os.Symlink("busybox", filepath.Join(ctxDir, "bin", applet)))
			}
		}
		for _, f := range []string{"passwd", "group"} {
			must(t, linkOrCopy(filepath.Join(filepath.Dir(busyboxDef), f), filepath.Join(ctxDir, f)))
		}
		conformanceBuild(t, p, busyboxDef, ctxDir, busybox, conformanceBusybox)
	}

	archives := []string{agnhost, busybox}
	// The rest of images/k8s-e2e, on the agnhost made above or a Debian
	// root; each is kept beside the suite like those two.
	if _, err := p.run(5*time.Minute, "load", "-i", agnhost); err != nil {
		t.Fatal(err)
	}
	e2eImages := filepath.Join(root, "images", "k8s-e2e")
	// derived makes the image tag of images/k8s-e2e/name, its context the
	// files (from: name in the context); key is more of what it is made of.
	derived := func(name, tag string, files map[string]string, key string, buildArgs ...string) {
		t.Helper()
		def := filepath.Join(e2eImages, name, "Dockerfile")
		inputs := append([]string{def, agnhost, tag, key}, buildArgs...)
		var fromTo []string
		for from, to := range files {
			fromTo = append(fromTo, from, to)
		}
		slices.Sort(fromTo)
		inputs = append(inputs, fromTo...)
		archive := filepath.Join(dir, strings.NewReplacer("/", "_", ":", "_").Replace(path.Base(tag))+"-"+conformanceKey(t, inputs...)+".tar")
		if !fileExists(archive) {
			ctxDir := filepath.Join(work, "images", path.Base(tag))
			must(t, os.MkdirAll(ctxDir, 0o755))
			for from, to := range files {
				must(t, exec.Command("cp", "-R", from, filepath.Join(ctxDir, to)).Run())
			}
			conformanceBuild(t, p, def, ctxDir, archive, tag, buildArgs...)
		}
		archives = append(archives, archive)
	}
	nginxBase := debianRoot(t, filepath.Dir(suite), []string{"nginx-light"})
	const nginxBaseImage = "localhost/nodeinit-conformance-nginx-base:test"
	if _, err := p.run(5*time.Minute, "import", nginxBase, nginxBaseImage); err != nil {
		t.Fatal(err)
	}
	// The base's file name holds a hash of its package list.
	derived("nginx", conformanceNginx, map[string]string{filepath.Join(e2eImages, "nginx", "default.conf"): "default.conf"},
		filepath.Base(nginxBase), "BASE="+nginxBaseImage)
	kubernetes := conformanceModuleDir(t, root)
	for _, name := range []string{"kitten", "nautilus"} {
		derived("webserver", "registry.k8s.io/e2e-test-images/"+name+":1.8",
			map[string]string{filepath.Join(kubernetes, "test", "images", name, "html"): "html"}, "", "AGNHOST="+conformanceAgnhost)
	}
	derived("nonroot", "registry.k8s.io/e2e-test-images/nonroot:1.5", nil, "", "AGNHOST="+conformanceAgnhost)
	if _, err := p.run(5*time.Minute, "load", "-i", busybox); err != nil {
		t.Fatal(err)
	}
	derived("nonewprivs", "registry.k8s.io/e2e-test-images/nonewprivs:1.4",
		map[string]string{conformanceNNP(t, root, work): "nnp"}, busybox, "BUSYBOX="+conformanceBusybox)
	derived("glibc-dns-testing", "registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1",
		map[string]string{filepath.Join(net, "coredns"): "coredns"}, "", "AGNHOST="+conformanceAgnhost)
	// The Aggregator spec's pod: the sample-apiserver of the suite's
	// release and the cluster's etcd, of the release its name gives, each
	// on the busybox image.
	derived("sample-apiserver", "registry.k8s.io/e2e-test-images/sample-apiserver:1.29.2",
		map[string]string{conformanceSampleAPIServer(t, root, work): "sample-apiserver"}, busybox, "BUSYBOX="+conformanceBusybox)
	derived("etcd", "registry.k8s.io/etcd:3.7.0-0", map[string]string{filepath.Join(net, "etcd"): "etcd"}, busybox, "BUSYBOX="+conformanceBusybox)

	// Archives of images made of other inputs (an earlier agnhost, say)
	// are not used again: they go, as the registry's stale stores do.
	kept, err := filepath.Glob(filepath.Join(dir, "*.tar"))
	must(t, err)
	for _, a := range kept {
		if !slices.Contains(archives, a) {
			must(t, os.Remove(a))
		}
	}
	return archives
}

// conformanceLockImages holds the suite's image directory for this run
// alone until the returned func is called. Two runs side by side (a
// cluster of each flavour, say) would otherwise build the same archives at
// once, each in its own podman store, and one would rename the other's
// partial archive away; the second waits, then finds them built.
func conformanceLockImages(t *testing.T, dir string) (unlock func()) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	must(t, err)
	start := time.Now()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("lock %s: %v", f.Name(), err)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Logf("waited %v for another run to build the suite's images", waited.Round(100*time.Millisecond))
	}
	return func() { f.Close() } // closing the file drops the lock
}

// conformanceSampleAPIServer builds Kubernetes' sample aggregated API
// server of the suite's release (k8s.io/sample-apiserver) into work, in the
// suite's module, whose go.mod pins the release's module versions.
func conformanceSampleAPIServer(t *testing.T, root, work string) string {
	t.Helper()
	out := filepath.Join(work, "sample-apiserver")
	start := time.Now()
	cmd := exec.Command("go", "build", "-mod=readonly", "-trimpath", "-o", out, "k8s.io/sample-apiserver")
	cmd.Dir = filepath.Join(root, "test", "k8s", "conformance")
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the sample-apiserver: %v\n%s", err, b)
	}
	t.Logf("sample-apiserver built in %v", time.Since(start).Round(100*time.Millisecond))
	return out
}

// conformanceNNP builds the nonewprivs image's program, nnp, of the suite's
// release (k8s.io/kubernetes/test/images/nonewprivs) into work.
func conformanceNNP(t *testing.T, root, work string) string {
	t.Helper()
	out := filepath.Join(work, "nnp")
	cmd := exec.Command("go", "build", "-mod=readonly", "-trimpath", "-o", out, "k8s.io/kubernetes/test/images/nonewprivs")
	cmd.Dir = filepath.Join(root, "test", "k8s", "conformance")
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build nnp: %v\n%s", err, b)
	}
	return out
}

// conformanceBusyBox is the directory of BusyBox built from its upstream
// source (images/busybox/build.sh, once per machine, in cacheDir).
func conformanceBusyBox(t *testing.T, root, cacheDir string) string {
	t.Helper()
	return scriptDir(t, filepath.Join(root, "images", "busybox", "build.sh"), cacheDir)
}

// conformanceAliases are the suite's images made as another of its images
// (images/k8s-e2e/README.md): the first name of each pair is given the
// second too.
var conformanceAliases = [][2]string{
	{conformanceAgnhost, "registry.k8s.io/e2e-test-images/agnhost:2.55"},
	{conformanceNginx, "registry.k8s.io/e2e-test-images/nginx:1.28.0-2"},
}

// conformanceModuleDir is the directory of the suite's Kubernetes module in
// the module cache, where the kitten and nautilus pages are.
func conformanceModuleDir(t *testing.T, root string) string {
	t.Helper()
	cmd := exec.Command("go", "list", "-mod=readonly", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes")
	cmd.Dir = filepath.Join(root, "test", "k8s", "conformance")
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	out, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("the suite's module k8s.io/kubernetes is not in the module cache (%v): make conformance-build downloads it", err)
	}
	return strings.TrimSpace(string(out))
}

// conformanceBuild builds the image tag from the Dockerfile def and the
// context ctxDir and saves it as a docker-archive at archive.
func conformanceBuild(t *testing.T, p *podman, def, ctxDir, archive, tag string, buildArgs ...string) {
	t.Helper()
	text, err := os.ReadFile(def)
	must(t, err)
	start := time.Now()
	must(t, p.build(tag, string(text), ctxDir, buildArgs...))
	tmp := archive + ".partial"
	_ = os.Remove(tmp)
	if _, err := p.run(5*time.Minute, "save", "--format", "docker-archive", "-o", tmp, tag); err != nil {
		t.Fatal(err)
	}
	must(t, os.Rename(tmp, archive))
	t.Logf("%s built from %s in %v", tag, def, time.Since(start).Round(100*time.Millisecond))
}

// conformanceFakeRegistry lays an image of the pause program out in dir as
// agnhost's fake-registry-server serves it, under tag: the manifest in
// manifests/ and the config and layers in blobs/, each at
// sha256/<first two>/<hash>/data, and a file named after the tag holding
// the manifest's digest.
func conformanceFakeRegistry(t *testing.T, p *podman, pause, work, dir, tag string) {
	t.Helper()
	ctxDir := filepath.Join(work, "images", "fake-registry-pause")
	must(t, linkOrCopy(pause, filepath.Join(ctxDir, "pause")))
	const image = "localhost/nodeinit-conformance-fake-registry-pause:test"
	must(t, p.build(image, "FROM scratch\nCOPY pause /pause\nENTRYPOINT [\"/pause\"]\n", ctxDir))
	oci := filepath.Join(work, "fake-registry-pause.oci")
	if _, err := p.run(time.Minute, "save", "--format", "oci-dir", "-o", oci, image); err != nil {
		t.Fatal(err)
	}
	blob := func(digest string) string {
		algo, hash, _ := strings.Cut(digest, ":")
		return filepath.Join(oci, "blobs", algo, hash)
	}
	place := func(digest, under string) {
		t.Helper()
		algo, hash, ok := strings.Cut(digest, ":")
		if !ok || len(hash) < 2 {
			t.Fatalf("the pause image's OCI layout names a digest %q", digest)
		}
		must(t, linkOrCopy(blob(digest), filepath.Join(dir, under, algo, hash[:2], hash, "data")))
	}
	var index struct {
		Manifests []struct{ Digest string } `json:"manifests"`
	}
	b, err := os.ReadFile(filepath.Join(oci, "index.json"))
	must(t, err)
	must(t, json.Unmarshal(b, &index))
	if len(index.Manifests) != 1 {
		t.Fatalf("the pause image's OCI layout holds %d manifests, not one", len(index.Manifests))
	}
	digest := index.Manifests[0].Digest
	var manifest struct {
		MediaType string                    `json:"mediaType"`
		Config    struct{ Digest string }   `json:"config"`
		Layers    []struct{ Digest string } `json:"layers"`
	}
	b, err = os.ReadFile(blob(digest))
	must(t, err)
	must(t, json.Unmarshal(b, &manifest))
	if manifest.MediaType == "" {
		// The server answers with the manifest's own mediaType as its
		// Content-Type; a client cannot read one without.
		t.Fatalf("the pause image's manifest %s names no mediaType", digest)
	}
	place(digest, "manifests")
	place(manifest.Config.Digest, "blobs")
	for _, l := range manifest.Layers {
		place(l.Digest, "blobs")
	}
	must(t, os.WriteFile(filepath.Join(dir, "manifests", tag), []byte(digest+"\n"), 0o644))
	if _, err := p.run(time.Minute, "rmi", image); err != nil {
		t.Fatal(err)
	}
}

// conformanceKey is a short hash of files' contents and more strings (a
// directory's name counts as a string), to name an image archive after
// what it is made of.
func conformanceKey(t *testing.T, inputs ...string) string {
	t.Helper()
	h := sha256.New()
	for _, in := range inputs {
		if fileExists(in) {
			f, err := os.Open(in)
			must(t, err)
			_, err = io.Copy(h, f)
			f.Close()
			must(t, err)
		} else {
			io.WriteString(h, in)
		}
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// conformanceRun runs the suite's command line with its output in log,
// bounded.
func conformanceRun(cmdline []string, log string, timeout time.Duration) error {
	f, err := os.Create(log)
	if err != nil {
		return err
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, cmdline[0], cmdline[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.WaitDelay = 10 * time.Second
	err = cmd.Run()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("killed after %v", timeout)
	}
	return err
}

// conformanceExit says how the suite ended.
func conformanceExit(err error) string {
	if err == nil {
		return "exit code 0"
	}
	return err.Error()
}

// conformanceCase is one testcase of ginkgo's JUnit report.
type conformanceCase struct {
	Name    string  `xml:"name,attr"`
	Status  string  `xml:"status,attr"`
	Time    float64 `xml:"time,attr"`
	Skipped *struct {
		Message string `xml:"message,attr"`
	} `xml:"skipped"`
	Failure *struct {
		Message string `xml:"message,attr"`
		Type    string `xml:"type,attr"`
		Text    string `xml:",chardata"`
	} `xml:"failure"`
	Error *struct {
		Message string `xml:"message,attr"`
		Type    string `xml:"type,attr"`
		Text    string `xml:",chardata"`
	} `xml:"error"`
}

func conformanceReadJUnit(path string) ([]conformanceCase, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Suites []struct {
			Cases []conformanceCase `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var cases []conformanceCase
	for _, s := range doc.Suites {
		cases = append(cases, s.Cases...)
	}
	return cases, nil
}

// conformanceResult is one spec's line of the table.
type conformanceResult struct {
	name    string
	status  string // passed, failed, skipped or not run
	seconds float64
	reason  string
	listed  bool // in the fixed set
}

// conformanceResults are the specs that ran, failed or were skipped by
// their own decision (ginkgo lists the specs the focus left out as skipped
// too: those are left out here), and each spec of the fixed set that is
// not in the report, as not run. The suite's own setup and teardown nodes
// count only when they failed.
func conformanceResults(cases []conformanceCase, specs []string) []conformanceResult {
	var out []conformanceResult
	seen := map[string]bool{}
	for _, tc := range cases {
		name := strings.TrimPrefix(tc.Name, "[It] ")
		// The report's name is the spec's full text and then its labels,
		// " [Label1, Label2]", which --list-tests does not print.
		i := slices.IndexFunc(specs, func(s string) bool { return name == s || strings.HasPrefix(name, s+" [") })
		listed := i >= 0
		if listed {
			name = specs[i]
		}
		r := conformanceResult{name: name, status: tc.Status, seconds: tc.Time, listed: listed}
		switch {
		case tc.Failure != nil || tc.Error != nil || tc.Status == "failed" || tc.Status == "panicked" || tc.Status == "timedout" || tc.Status == "interrupted" || tc.Status == "aborted":
			r.status = "failed"
			r.reason = conformanceReason(tc)
		case tc.Status == "skipped" || tc.Status == "pending" || tc.Skipped != nil:
			if !listed && (specs != nil || conformanceFilteredOut(tc)) {
				continue
			}
			r.status = "skipped"
			if tc.Skipped != nil {
				r.reason = conformanceOneLine(tc.Skipped.Message)
			}
		case tc.Status == "passed":
			if !strings.HasPrefix(tc.Name, "[It] ") && !listed {
				continue // the suite's own setup and report nodes
			}
		}
		if listed {
			seen[name] = true
		}
		out = append(out, r)
	}
	for _, s := range specs {
		if !seen[s] {
			out = append(out, conformanceResult{name: s, status: "not run", listed: true, reason: "not in the suite's report"})
		}
	}
	return out
}

// conformancePassCases are the cases of one of passes passes that speak
// for their specs: with two, each pass reports the other's specs as
// skipped by its label filter, and only the pass that ran a spec counts.
func conformancePassCases(got []conformanceCase, passes int) []conformanceCase {
	if passes == 1 {
		return got
	}
	return slices.DeleteFunc(got, func(tc conformanceCase) bool {
		return tc.Status == "skipped" && conformanceFilteredOut(tc)
	})
}

// conformanceFilteredOut says whether ginkgo skipped the spec because the
// focus left it out ("skipped"), not because the spec decided so ("skipped
// - REASON").
func conformanceFilteredOut(tc conformanceCase) bool {
	return tc.Skipped == nil || tc.Skipped.Message == "skipped"
}

// conformanceReason is a failure's reason on one line: ginkgo's message,
// which names the expectation that failed.
func conformanceReason(tc conformanceCase) string {
	for _, f := range []*struct {
		Message string `xml:"message,attr"`
		Type    string `xml:"type,attr"`
		Text    string `xml:",chardata"`
	}{tc.Failure, tc.Error} {
		if f == nil {
			continue
		}
		if msg := conformanceOneLine(f.Message); msg != "" {
			return msg
		}
		return conformanceOneLine(f.Text)
	}
	return tc.Status
}

// conformanceOneLine squeezes a message onto one line of a table, at most
// 400 characters.
func conformanceOneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	s = strings.ReplaceAll(s, "|", `\|`)
	if len(s) > 400 {
		s = s[:400] + "…"
	}
	return s
}

// conformanceTable is the results as a Markdown table.
func conformanceTable(results []conformanceResult) string {
	var b strings.Builder
	b.WriteString("| spec | result | seconds | reason |\n|---|---|---|---|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %s | %.1f | %s |\n", strings.ReplaceAll(r.name, "|", `\|`), r.status, r.seconds, r.reason)
	}
	return b.String()
}

// conformanceTail is the last n lines of a file.
func conformanceTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// TestConformanceReport checks how a JUnit report of ginkgo's becomes the
// table: a spec of the fixed set is found under its name with the labels
// ginkgo appends, specs the focus left out are not listed, a spec's own
// skip and a failure keep their reasons, a spec of the set that is not in
// the report is "not run", and the suite's own setup counts only when it
// failed.
func TestConformanceReport(t *testing.T) {
	const report = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites><testsuite name="Kubernetes e2e suite">
 <testcase name="[SynchronizedBeforeSuite]" status="passed" time="1.5"></testcase>
 <testcase name="[It] [sig-a] X passes [NodeConformance] [sig-a, NodeConformance]" status="passed" time="12.25"></testcase>
 <testcase name="[It] [sig-a] X fails [sig-a]" status="failed" time="3"><failure message="expected 1&#xA;to equal | 2" type="failed">long text</failure></testcase>
 <testcase name="[It] [sig-a] X skips itself" status="skipped" time="0"><skipped message="skipped - Only supported for providers [gce]"></skipped></testcase>
 <testcase name="[It] [sig-b] left out by the focus" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
</testsuite></testsuites>`
	path := filepath.Join(t.TempDir(), "junit.xml")
	must(t, os.WriteFile(path, []byte(report), 0o644))
	cases, err := conformanceReadJUnit(path)
	must(t, err)
	specs := []string{"[sig-a] X passes [NodeConformance]", "[sig-a] X fails", "[sig-a] X skips itself", "[sig-a] X was renamed"}
	got := conformanceResults(cases, specs)
	want := []conformanceResult{
		{name: "[sig-a] X passes [NodeConformance]", status: "passed", seconds: 12.25, listed: true},
		{name: "[sig-a] X fails", status: "failed", seconds: 3, reason: `expected 1 to equal \| 2`, listed: true},
		{name: "[sig-a] X skips itself", status: "skipped", reason: "skipped - Only supported for providers [gce]", listed: true},
		{name: "[sig-a] X was renamed", status: "not run", reason: "not in the suite's report", listed: true},
	}
	if !slices.Equal(got, want) {
		t.Errorf("results:\n got %+v\nwant %+v", got, want)
	}
	// With a focus of one's own, a skip of the spec's own is listed, one of
	// the focus is not.
	got = conformanceResults(cases, nil)
	var names []string
	for _, r := range got {
		names = append(names, r.status+" "+r.name)
	}
	wantNames := []string{"passed [sig-a] X passes [NodeConformance] [sig-a, NodeConformance]", "failed [sig-a] X fails [sig-a]", "skipped [sig-a] X skips itself"}
	if !slices.Equal(names, wantNames) {
		t.Errorf("with a focus:\n got %q\nwant %q", names, wantNames)
	}
	// Two passes: the serial pass's report lists the parallel pass's specs
	// as left out by its label filter; they count once, as they ran.
	serial := conformancePassCases([]conformanceCase{
		{Name: "[It] [sig-a] X fails [sig-a]", Status: "skipped", Skipped: &struct {
			Message string `xml:"message,attr"`
		}{"skipped"}},
		{Name: "[It] [sig-a] X runs alone [Serial]", Status: "passed", Time: 2},
	}, 2)
	names = nil
	for _, r := range conformanceResults(append(conformancePassCases(cases, 2), serial...), specs) {
		names = append(names, r.status+" "+r.name)
	}
	wantNames = []string{"passed [sig-a] X passes [NodeConformance]", "failed [sig-a] X fails", "skipped [sig-a] X skips itself", "passed [sig-a] X runs alone [Serial]", "not run [sig-a] X was renamed"}
	if !slices.Equal(names, wantNames) {
		t.Errorf("two passes:\n got %q\nwant %q", names, wantNames)
	}
	if f := conformanceFocus(specs[:2]); !regexp.MustCompile(f).MatchString("e2e.go:12 [sig-a] X fails") || regexp.MustCompile(f).MatchString("[sig-a] X fails badly") {
		t.Errorf("focus %q selects the wrong specs", f)
	}
}
