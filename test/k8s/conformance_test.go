//go:build k8s

package k8s

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// The images of the e2e suite that make conformance makes here, under the
// names the suite's release gives them (e2e.test --list-images), so that
// its pods find them in containerd and pull nothing.
const (
	conformanceAgnhost = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"
	conformanceBusybox = "registry.k8s.io/e2e-test-images/busybox:1.37.0-2"
	conformancePause   = "registry.k8s.io/pause:3.10.2"
)

// conformanceAgnhostPackages are the Debian packages of the agnhost image's
// root: the tools upstream's Alpine image carries for the specs that exec
// them in its pods (images/agnhost/Dockerfile names which is which).
var conformanceAgnhostPackages = []string{"bind9-dnsutils", "curl", "netcat-openbsd", "iproute2", "iperf", "socat", "util-linux", "ca-certificates", "net-tools", "procps", "wget", "iputils-ping"}

// TestConformance runs Kubernetes' own end-to-end suite (e2e.test, of the
// release the real-node tests run) against one nodeinit node on the shared
// control plane, and writes each spec's result as JUnit and as a table.
// make conformance builds the suite and runs it; the environment says what
// to run:
//
//	NODEINIT_CONFORMANCE_BIN     the suite's build (test/k8s/conformance/build.sh)
//	NODEINIT_CONFORMANCE_SPECS   a file of spec names, one a line, run exactly
//	NODEINIT_CONFORMANCE_FOCUS   or a ginkgo focus of its own (a regular expression)
//	NODEINIT_CONFORMANCE_REPORT  where junit.xml, results.md and e2e.log go
//	NODEINIT_CONFORMANCE_TIMEOUT the suite's own bound (default 30m)
//
// Without NODEINIT_CONFORMANCE_BIN it does not run: make e2e-k8s leaves the
// suite to make conformance. Any spec that fails fails the test; so does a
// spec of the file that did not run or was skipped, since the file is the
// fixed set a run must cover.
func TestConformance(t *testing.T) {
	suite := os.Getenv("NODEINIT_CONFORMANCE_BIN")
	if suite == "" {
		t.Skip("the e2e suite runs with make conformance (NODEINIT_CONFORMANCE_BIN names its build)")
	}
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
	report := os.Getenv("NODEINIT_CONFORMANCE_REPORT")
	if report == "" {
		report = t.TempDir()
	}
	must(t, os.MkdirAll(report, 0o755))
	e2e := filepath.Join(suite, "e2e.test")
	if _, err := os.Stat(e2e); err != nil {
		t.Fatalf("the suite is not built in %s: make conformance builds it (%v)", suite, err)
	}
	if specs != nil {
		conformanceCheckSpecs(t, e2e, specs)
	}

	c := getCluster(t)
	start := time.Now()
	c.conformanceImages(t, suite)
	t.Logf("the suite's images (agnhost, busybox, pause) made and imported into containerd in %v", time.Since(start).Round(100*time.Millisecond))

	name, addr := conformanceNodeName(t)
	c.startConformanceNode(t, name, addr)

	kubeconfig := filepath.Join(report, "admin.conf")
	must(t, os.WriteFile(kubeconfig, c.pki.kubeconfig(apiServer, c.admin), 0o600))
	junit := filepath.Join(report, "junit.xml")
	log := filepath.Join(report, "e2e.log")
	_ = os.Remove(junit)
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--provider=skeleton",
		"--kubectl-path=" + filepath.Join(c.bin, "kubectl"),
		"--container-runtime-endpoint=" + c.containerd.endpoint(),
		"--e2e-output-dir=" + report,
		// Nothing to gather the node's logs over ssh from: the run's own
		// logs are the node's directory.
		"--disable-log-dump",
		"--ginkgo.focus=" + focus,
		"--ginkgo.junit-report=" + junit,
		"--ginkgo.timeout=" + timeout.String(),
		"--ginkgo.no-color",
		"--ginkgo.v",
	}
	t.Logf("running %s %s", e2e, strings.Join(args[:len(args)-5], " "))
	start = time.Now()
	runErr := conformanceRun(e2e, args, log, timeout+2*time.Minute)
	took := time.Since(start)

	cases, err := conformanceReadJUnit(junit)
	if err != nil {
		t.Fatalf("the suite wrote no report (%v; it ended with %v); the end of %s:\n%s", err, runErr, log, conformanceTail(log, 40))
	}
	results := conformanceResults(cases, specs)
	table := conformanceTable(results)
	must(t, os.WriteFile(filepath.Join(report, "results.md"), []byte(table), 0o644))
	counts := map[string]int{}
	for _, r := range results {
		counts[r.status]++
	}
	t.Logf("the suite ran in %v (%s): %d specs: %d passed, %d failed, %d skipped, %d not run\n%s\nJUnit: %s, table: %s, log: %s",
		took.Round(time.Second), conformanceExit(runErr), len(results), counts["passed"], counts["failed"], counts["skipped"], counts["not run"],
		table, junit, filepath.Join(report, "results.md"), log)
	for _, r := range results {
		switch {
		case r.status == "failed":
			t.Errorf("failed: %s: %s", r.name, r.reason)
		case r.listed && r.status != "passed":
			t.Errorf("%s, though it is in the fixed set of %s: %s: %s", r.status, specsFile, r.name, r.reason)
		}
	}
	if runErr != nil && counts["failed"] == 0 {
		t.Errorf("the suite ended with %v and no spec failed; the end of %s:\n%s", runErr, log, conformanceTail(log, 40))
	}
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

// conformanceImages makes the suite's agnhost and busybox images (once per
// build of the suite: they are kept beside it) and imports them and the
// fixture's pause image, under the suite's names, into containerd.
func (c *cluster) conformanceImages(t *testing.T, suite string) {
	t.Helper()
	root := testenv.ModuleRoot(t)
	dir := filepath.Join(suite, "images")
	must(t, os.MkdirAll(dir, 0o755))

	// agnhost: the program built with the suite, on a Debian root.
	agnhostDef := filepath.Join(root, "images", "agnhost", "Dockerfile")
	agnhost := filepath.Join(dir, "agnhost-"+conformanceKey(t, agnhostDef, strings.Join(conformanceAgnhostPackages, ","))+".tar")
	if !fileExists(agnhost) {
		base := debianRoot(t, filepath.Dir(suite), conformanceAgnhostPackages)
		const baseImage = "localhost/nodeinit-conformance-agnhost-base:test"
		if _, err := c.podman.run(5*time.Minute, "import", base, baseImage); err != nil {
			t.Fatal(err)
		}
		ctxDir := filepath.Join(c.dir, "images", "agnhost")
		must(t, linkOrCopy(filepath.Join(suite, "agnhost"), filepath.Join(ctxDir, "agnhost")))
		for _, f := range []string{"localhost.crt", "localhost.key"} {
			must(t, linkOrCopy(filepath.Join(suite, "agnhost-files", f), filepath.Join(ctxDir, f)))
		}
		c.conformanceBuild(t, agnhostDef, ctxDir, agnhost, conformanceAgnhost, "BASE="+baseImage)
	}

	// busybox: Debian's busybox-static, a link for each applet.
	busyboxDef := filepath.Join(root, "images", "busybox", "Dockerfile")
	bb, err := exec.LookPath("busybox")
	must(t, err)
	busybox := filepath.Join(dir, "busybox-"+conformanceKey(t, busyboxDef, filepath.Join(filepath.Dir(busyboxDef), "passwd"),
		filepath.Join(filepath.Dir(busyboxDef), "group"), bb)+".tar")
	if !fileExists(busybox) {
		ctxDir := filepath.Join(c.dir, "images", "conformance-busybox")
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
		c.conformanceBuild(t, busyboxDef, ctxDir, busybox, conformanceBusybox)
	}

	for _, a := range []string{agnhost, busybox} {
		must(t, c.containerd.importImage(a))
	}
	// pause: the fixture's sandbox image is a pause of its own (holds the
	// pod's namespaces, reaps, exits on TERM), the same program the suite
	// runs as a container of its own under this name.
	if _, err := run(time.Minute, c.containerd.ctr, "--address", c.containerd.socket(), "--namespace", "k8s.io",
		"images", "tag", "--force", pauseImage, conformancePause); err != nil {
		t.Fatal(err)
	}
}

// conformanceBuild builds the image tag from the Dockerfile def and the
// context ctxDir and saves it as a docker-archive at archive.
func (c *cluster) conformanceBuild(t *testing.T, def, ctxDir, archive, tag string, buildArgs ...string) {
	t.Helper()
	text, err := os.ReadFile(def)
	must(t, err)
	start := time.Now()
	must(t, c.podman.build(tag, string(text), ctxDir, buildArgs...))
	tmp := archive + ".partial"
	_ = os.Remove(tmp)
	if _, err := c.podman.run(5*time.Minute, "save", "--format", "docker-archive", "-o", tmp, tag); err != nil {
		t.Fatal(err)
	}
	must(t, os.Rename(tmp, archive))
	t.Logf("%s built from %s in %v", tag, def, time.Since(start).Round(100*time.Millisecond))
}

// conformanceKey is a short hash of files' contents and more strings, to
// name an image archive after what it is made of.
func conformanceKey(t *testing.T, inputs ...string) string {
	t.Helper()
	h := sha256.New()
	for _, in := range inputs {
		if f, err := os.Open(in); err == nil {
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

// conformanceRun runs the suite with its output in log, bounded.
func conformanceRun(e2e string, args []string, log string, timeout time.Duration) error {
	f, err := os.Create(log)
	if err != nil {
		return err
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, e2e, args...)
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
	if f := conformanceFocus(specs[:2]); !regexp.MustCompile(f).MatchString("e2e.go:12 [sig-a] X fails") || regexp.MustCompile(f).MatchString("[sig-a] X fails badly") {
		t.Errorf("focus %q selects the wrong specs", f)
	}
}
