//go:build k8s

package k8s

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// The release matrix. The suite runs the release test/k8s/build pins
// (control plane, kubelet, kube-proxy); the node part is also run with the
// kubelet and kube-proxy of the oldest minor still supported upstream,
// test/k8s/build/<oldestRelease>, against that control plane (the
// version-skew policy allows a kubelet and kube-proxy three minors older
// than the apiserver). The older release runs the tests that prove the
// node part: start, Ready, a static pod, a Deployment behind a Service,
// TERM in order (TestOldestReleaseNode), sizing
// (TestOldestReleaseNodeSizedToItsCgroupParent), and the flag and field
// checks, which run for every release of the matrix.
const oldestRelease = "v1.35"

// release is one release of the matrix: its version (the build's VERSION
// file) and the directory of its binaries.
type release struct {
	version, bin string
}

// oldestBin is the directory of the oldest release's kubelet and
// kube-proxy: $NODEINIT_K8S_OLDEST_BIN (make e2e-k8s sets it), else what
// build.sh --release prints, building them the first time.
func oldestBin(t *testing.T) string {
	t.Helper()
	return buildDir(t, "NODEINIT_K8S_OLDEST_BIN", k8sBuildScript, "--release", oldestRelease)
}

// releases is the matrix: the suite's release first, then the oldest.
func releases(t *testing.T) []release {
	t.Helper()
	var out []release
	for _, bin := range []string{k8sBin(t), oldestBin(t)} {
		b, err := os.ReadFile(filepath.Join(bin, "VERSION"))
		must(t, err)
		out = append(out, release{version: strings.TrimSpace(string(b)), bin: bin})
	}
	if !strings.HasPrefix(out[1].version, oldestRelease+".") {
		t.Fatalf("%s holds %s; want the %s release", out[1].bin, out[1].version, oldestRelease)
	}
	return out
}

// TestOldestReleaseNode: the oldest release's kubelet and kube-proxy under
// nodeinit, against the suite's control plane: the Node registers with the
// kubelet's version and is Ready, the static pod and the Deployment run,
// kube-proxy programs the Service, and TERM stops the kubelet first and
// kube-proxy after, nodeinit exiting 0. nodeinit read the kubelet's
// release from its build information.
func TestOldestReleaseNode(t *testing.T) {
	c := getCluster(t)
	old := releases(t)[1]
	k := c.startNode(t, nodeSpec{bin: old.bin})
	k.checkRunningNode("iptables")
	if v := k.getNode().Status.NodeInfo.KubeletVersion; v != old.version {
		t.Errorf("the Node's kubelet is %s; want %s", v, old.version)
	}
	k.waitLog(10*time.Second, 0, "The executor's kubelet release", `version="`+old.version+`"`)
	t.Logf("TERM: %v", k.stopAndCheck(90*time.Second))
}

// TestOldestReleaseNodeSizedToItsCgroupParent is the sized half of
// TestNodeSizedToItsCgroupParent with the oldest release's kubelet.
func TestOldestReleaseNodeSizedToItsCgroupParent(t *testing.T) {
	c := getCluster(t)
	old := releases(t)[1]
	checkSizedToCgroupParent(t, c, fmt.Sprintf("/nodeinit-k8s-size-old-%d", os.Getpid()), old.bin)
}

// cgroupV1Host says /sys/fs/cgroup is not a cgroup2 mount: a cgroup v1
// host, as the kubelet tells (libcontainer's IsCgroup2UnifiedMode).
func cgroupV1Host(t *testing.T) bool {
	var st unix.Statfs_t
	must(t, unix.Statfs("/sys/fs/cgroup", &st))
	return st.Type != unix.CGROUP2_SUPER_MAGIC
}

// TestNodeinitSaysTheKubeletWillRefuseCgroupV1: on this cgroup v1 host, a
// kubelet of every release of the matrix (all from v1.35) whose
// configuration leaves failCgroupV1 unset exits at start. nodeinit, as PID
// 1, reads the kubelet's release from its binary and says so in one
// warning before it starts it, naming what to set; the kubelet then exits
// with its own message and nodeinit with the kubelet's status (1). With
// failCgroupV1: false (every other node of the suite) it says nothing.
func TestNodeinitSaysTheKubeletWillRefuseCgroupV1(t *testing.T) {
	testenv.RequireRoot(t)
	if !cgroupV1Host(t) {
		t.Fatal("this host's /sys/fs/cgroup is cgroup2: the test is for a cgroup v1 host, as the project's machines are")
	}
	nodeinit := testenv.BuildRaced(t, "./cmd/nodeinit")
	for _, r := range releases(t) {
		t.Run(r.version, func(t *testing.T) {
			dir := t.TempDir()
			config := filepath.Join(dir, "kubelet.yaml")
			must(t, os.WriteFile(config, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: cgroupfs\nfailSwapOn: false\n"), 0o644))
			kubelet := []string{filepath.Join(r.bin, "kubelet"), "--config=" + config, "--root-dir=" + filepath.Join(dir, "root")}

			// --write-flags: the same line, on stderr.
			_, stderr, code := runSplit(t, append([]string{nodeinit, "--write-flags", "--run-proxy=false", "--skip-container-checks=all", "--"}, kubelet...)...)
			want := fmt.Sprintf("The kubelet (%s, read from its main module k8s.io/kubernetes) will exit at start on this cgroup v1 host", r.version)
			if code != 0 || !strings.Contains(stderr, want) || !strings.Contains(stderr, "set failCgroupV1: false in "+config) {
				t.Errorf("nodeinit --write-flags exited %d, stderr %q; want a warning with %q", code, stderr, want)
			}

			started := time.Now()
			n := testenv.Launch(t, testenv.Options{MountNS: true, Dir: dir}, append([]string{"--run-proxy=false", "--skip-container-checks=all", "--"}, kubelet...)...)
			code = n.Wait(60 * time.Second)
			log := n.Log()
			t.Logf("nodeinit exited %d %v after its start", code, time.Since(started).Round(time.Millisecond))
			warned := n.Lines('W', want, "failCgroupV1 is unset, and a kubelet from v1.35 on defaults it to true", "set failCgroupV1: false in "+config)
			if len(warned) != 1 {
				t.Fatalf("nodeinit's log has %d warnings %q; want one:\n%s", len(warned), want, testenv.Tail(log, 30))
			}
			t.Logf("nodeinit: %s", warned[0])
			at := strings.Index(log, warned[0])
			if started := strings.Index(log, `"Started task" task="executor"`); started < 0 || started < at {
				t.Errorf("the warning is not before the kubelet's start:\n%s", testenv.Tail(log, 30))
			}
			// The kubelet logs to its stderr, nodeinit's.
			if !strings.Contains(n.Stderr(), "kubelet is configured to not run on a host using cgroup v1") {
				t.Errorf("the kubelet did not exit on cgroup v1:\n%s", testenv.Tail(n.Stderr(), 30))
			}
			if code != 1 {
				t.Errorf("nodeinit exited %d; want the kubelet's 1", code)
			}

			// failCgroupV1: false: nothing to say.
			must(t, os.WriteFile(config, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfailCgroupV1: false\n"), 0o644))
			_, stderr, _ = runSplit(t, append([]string{nodeinit, "--write-flags", "--run-proxy=false", "--skip-container-checks=all", "--"}, kubelet...)...)
			if strings.Contains(stderr, "cgroup v1") {
				t.Errorf("with failCgroupV1: false nodeinit says %q", stderr)
			}
		})
	}
}

// TestKubeletTakesTheFlagsAndFieldsNodeinitUses: every kubelet flag
// nodeinit writes or reads and every KubeletConfiguration field it reads is
// one the kubelet of each release of the matrix knows. The kubelet is run
// with all of them at once, and failCgroupV1 true in a --config-dir
// drop-in, so that on this cgroup v1 host it parses its flags, decodes the
// file and the drop-in strictly, merges them, validates, and exits there,
// before it starts anything: its output must show the cgroup v1 refusal
// and no unknown flag or field. nodeinit, given the same command line,
// predicts that exit from the same files; with --fail-cgroupv1=true over
// failCgroupV1: false it predicts the flag's win, which the kubelet shows.
func TestKubeletTakesTheFlagsAndFieldsNodeinitUses(t *testing.T) {
	testenv.RequireRoot(t)
	if !cgroupV1Host(t) {
		t.Fatal("this host's /sys/fs/cgroup is cgroup2: the test stops the kubelet on its cgroup v1 refusal")
	}
	nodeinit := testenv.BuildRaced(t, "./cmd/nodeinit")
	// Every field node.KubeletConfig decodes, at values the kubelet
	// accepts; shutdownGracePeriodByPodPriority excludes the two
	// shutdownGracePeriod fields, so it has a run of its own.
	fields := []string{`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupRoot: /
cgroupDriver: cgroupfs
address: 127.0.0.1
failSwapOn: false
featureGates: {KubeletInUserNamespace: true}
resolvConf: /etc/resolv.conf
shutdownGracePeriod: 30s
shutdownGracePeriodCriticalPods: 10s
systemReserved: {cpu: 100m, memory: 100Mi}
kubeReserved: {cpu: 100m, memory: 50Mi}
evictionHard: {memory.available: 100Mi}
mergeDefaultEvictionSettings: true
reservedSystemCPUs: "0"
enforceNodeAllocatable: [pods]
`, `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
shutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: 20}]
`}
	const refused = "kubelet is configured to not run on a host using cgroup v1"
	for _, r := range releases(t) {
		t.Run(r.version, func(t *testing.T) {
			dir := t.TempDir()
			dropIns := filepath.Join(dir, "kubelet.conf.d")
			must(t, os.MkdirAll(dropIns, 0o755))
			must(t, os.WriteFile(filepath.Join(dropIns, "50-cgroupv1.conf"), []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfailCgroupV1: true\n"), 0o644))
			// Every flag nodeinit writes (--cgroup-root, --system-reserved,
			// --feature-gates, --resolv-conf) or reads.
			flags := []string{"--config-dir=" + dropIns, "--kubeconfig=" + filepath.Join(dir, "kubelet.conf"),
				"--cgroup-driver=cgroupfs", "--cgroup-root=/", "--fail-swap-on=false", "--feature-gates=KubeletInUserNamespace=true",
				"--node-ip=127.0.0.1", "--hostname-override=nodeinit-flags", "--address=127.0.0.1", "--root-dir=" + filepath.Join(dir, "root"),
				"--resolv-conf=/etc/resolv.conf", "--system-reserved=cpu=100m,memory=100Mi", "--kube-reserved=cpu=100m",
				"--eviction-hard=memory.available<100Mi", "--enforce-node-allocatable=pods", "--reserved-cpus=0",
				"--experimental-allocatable-ignore-eviction=false", "--v=1"}
			for i, text := range fields {
				config := filepath.Join(dir, fmt.Sprintf("kubelet-%d.yaml", i))
				must(t, os.WriteFile(config, []byte(text), 0o644))
				argv := append([]string{filepath.Join(r.bin, "kubelet"), "--config=" + config}, flags...)
				out, err := run(60*time.Second, argv...)
				checkRefusal(t, r, argv, out, err, refused)

				_, stderr, _ := runSplit(t, append([]string{nodeinit, "--write-flags", "--run-proxy=false", "--skip-container-checks=all", "--"}, argv...)...)
				if want := "failCgroupV1 is true in " + config + " " + filepath.Join(dropIns, "50-cgroupv1.conf"); !strings.Contains(stderr, want) {
					t.Errorf("nodeinit --write-flags' stderr %q lacks %q", stderr, want)
				}
			}

			// The flag over the file: false in the drop-in, true on the
			// command line.
			must(t, os.WriteFile(filepath.Join(dropIns, "50-cgroupv1.conf"), []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfailCgroupV1: false\n"), 0o644))
			argv := append([]string{filepath.Join(r.bin, "kubelet"), "--config=" + filepath.Join(dir, "kubelet-0.yaml"), "--fail-cgroupv1=true"}, flags...)
			out, err := run(60*time.Second, argv...)
			checkRefusal(t, r, argv, out, err, refused)
			_, stderr, _ := runSplit(t, append([]string{nodeinit, "--write-flags", "--run-proxy=false", "--skip-container-checks=all", "--"}, argv...)...)
			if want := "its --fail-cgroupv1=true overrides failCgroupV1: false in "; !strings.Contains(stderr, want) {
				t.Errorf("nodeinit --write-flags' stderr %q lacks %q", stderr, want)
			}
		})
	}
}

// checkRefusal checks that the kubelet run as argv exited on its cgroup v1
// validation, having taken every flag and field.
func checkRefusal(t *testing.T, r release, argv []string, out string, err error, refused string) {
	t.Helper()
	if err == nil {
		t.Fatalf("kubelet %s ran as %q and exited 0; want its cgroup v1 refusal", r.version, argv)
	}
	for _, bad := range []string{"unknown flag", "failed to parse kubelet flag", "strict decoding", "unknown field", "failed to load kubelet config", "failed to merge kubelet configs"} {
		if strings.Contains(out, bad) {
			t.Errorf("kubelet %s: %q in its output:\n%s", r.version, bad, testenv.Tail(out, 20))
		}
	}
	if !strings.Contains(out, refused) {
		t.Errorf("kubelet %s did not exit on its cgroup v1 validation:\n%s", r.version, testenv.Tail(out, 20))
	}
}
