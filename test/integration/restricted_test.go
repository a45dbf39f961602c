package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/cgroups"
	"github.com/nodeinit/nodeinit/test/testenv"
)

// fakeKubelet is an executor named kubelet, so that nodeinit makes the
// checks it makes for a kubelet: it writes its arguments, what /dev/kmsg
// is, and how the cgroupfs is mounted, as it sees them, to report in its
// directory, and exits 0.
const fakeKubelet = `#!/bin/sh
out="$(dirname "$0")/report"
{
	echo "args: $*"
	echo "kmsg: $(stat -L -c '%F %t:%T' /dev/kmsg 2>&1)"
	awk '{ for (i = 7; $i != "-"; i++); if ($(i+1) ~ /^cgroup2?$/) print "cgroupfs: " $5 " " $6 }' /proc/self/mountinfo
} > "$out"
`

// restricted is one run of nodeinit in a private mount namespace that
// setup (a shell script run there first) makes into a restricted
// container, with fakeKubelet as its executor; o says more of how
// (read-only mounts, a user namespace).
type restricted struct {
	n      *testenv.Node
	dir    string
	report string
}

func runRestricted(t *testing.T, o testenv.Options, setup string, flags []string, kubeletArgs ...string) restricted {
	t.Helper()
	testenv.RequireRoot(t)
	dir := t.TempDir()
	kubelet := filepath.Join(dir, "kubelet")
	if err := os.WriteFile(kubelet, []byte(fakeKubelet), 0o755); err != nil {
		t.Fatal(err)
	}
	args := append(append(append([]string{"--run-proxy=false"}, flags...), "--", kubelet), kubeletArgs...)
	var prefix []string
	if setup != "" {
		prefix = []string{"/bin/sh", "-c", "set -e\n" + setup + "\nexec \"$@\"", "setup"}
	}
	o.MountNS, o.Prefix, o.Env = true, prefix, []string{"DIR=" + dir}
	n := testenv.Launch(t, o, args...)
	n.Wait(30 * time.Second)
	r := restricted{n: n, dir: dir}
	if b, err := os.ReadFile(filepath.Join(dir, "report")); err == nil {
		r.report = string(b)
	}
	return r
}

// line is the one line of the report that starts with key.
func (r restricted) line(key string) string {
	for l := range strings.SplitSeq(r.report, "\n") {
		if strings.HasPrefix(l, key+": ") {
			return strings.TrimPrefix(l, key+": ")
		}
	}
	return ""
}

// adjusted are nodeinit's log lines for the adjustments of check.
func (r restricted) adjusted(check string) []string {
	return r.n.Lines('I', `"Adjusted the node to its container"`, `check="`+check+`"`)
}

// hideKmsg makes /dev a tmpfs of this mount namespace with the host's
// null, zero, random and urandom, and no kmsg. /dev is made private
// first, so nothing of it reaches the host.
const hideKmsg = `mount --make-rprivate /dev
mkdir -p "$DIR/hostdev"
mount --rbind /dev "$DIR/hostdev"
mount -t tmpfs -o mode=755 tmpfs /dev
for d in null zero random urandom; do touch /dev/$d; mount --bind "$DIR/hostdev/$d" /dev/$d; done
umount -l "$DIR/hostdev"`

// No /dev/kmsg: nodeinit binds /dev/null over it for a kubelet and says
// once why; skipped, the kubelet finds none.
func TestMissingDevKmsg(t *testing.T) {
	r := runRestricted(t, testenv.Options{}, hideKmsg, nil)
	if got := r.line("kmsg"); got != "character special file 1:3" {
		t.Errorf("the kubelet's /dev/kmsg is %q; want /dev/null (character special file 1:3); log:\n%s", got, r.n.Log())
	}
	if a := r.adjusted("kmsg"); len(a) != 1 {
		t.Errorf("want one line for the /dev/kmsg adjustment; got %q", a)
	}
	if w := r.n.Lines('W', "The kubelet sees no kernel OOM events"); len(w) != 1 {
		t.Errorf("want one warning that the kernel's OOM events are not seen; log:\n%s", r.n.Log())
	}
	t.Logf("%s", r.adjusted("kmsg"))

	r = runRestricted(t, testenv.Options{}, hideKmsg, []string{"--skip-container-checks=kmsg"})
	if got := r.line("kmsg"); !strings.Contains(got, "No such file") {
		t.Errorf("with the check skipped the kubelet's /dev/kmsg is %q; want none", got)
	}
	if a := r.adjusted("kmsg"); len(a) != 0 {
		t.Errorf("the check was skipped, but: %q", a)
	}
}

// swapOn puts a /proc/swaps with a swap file over the real one, in this
// mount namespace only.
const swapOn = `printf 'Filename\tType\tSize\tUsed\tPriority\n/swapfile                               file\t\t1048572\t\t0\t\t-2\n' > "$DIR/swaps"
mount --bind "$DIR/swaps" /proc/swaps`

// Swap on and the kubelet's failSwapOn unset: one line naming the setting,
// exit 1, the kubelet never started; with failSwapOn false in its
// configuration, or the check skipped, it starts.
func TestSwapOn(t *testing.T) {
	r := runRestricted(t, testenv.Options{}, swapOn, nil)
	if code := r.n.ExitCode(); code != 1 {
		t.Errorf("nodeinit exited %d; want 1", code)
	}
	errs := r.n.Lines('E')
	if len(errs) != 1 || !strings.Contains(errs[0], "Swap is on (/swapfile)") || !strings.Contains(errs[0], "set failSwapOn: false") {
		t.Errorf("want one error line naming the swap and failSwapOn; got %q", errs)
	}
	if r.report != "" {
		t.Errorf("the kubelet was started: %s", r.report)
	}
	t.Logf("%s", errs)

	conf := filepath.Join(t.TempDir(), "kubelet.yaml")
	if err := os.WriteFile(conf, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfailSwapOn: false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, run := range map[string]struct{ flags, kubelet []string }{
		"failSwapOn false": {nil, []string{"--config=" + conf}},
		"check skipped":    {[]string{"--skip-container-checks=swap"}, nil},
	} {
		r = runRestricted(t, testenv.Options{}, swapOn, run.flags, run.kubelet...)
		if code := r.n.ExitCode(); code != 0 || r.report == "" {
			t.Errorf("%s: nodeinit exited %d, the kubelet's report %q; want it run, exit 0\n%s", name, code, r.report, r.n.Log())
		}
	}
}

// The kubelet's root dir on a file system its cAdvisor does not know
// (ramfs): one line naming the mount and its device, exit 1.
func TestRootDirOnAFileSystemTheKubeletCannotFind(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kubelet-root")
	r := runRestricted(t, testenv.Options{}, fmt.Sprintf(`mkdir -p %s && mount -t ramfs ramfs-of-the-test %s`, dir, dir), nil, "--root-dir="+dir)
	if code := r.n.ExitCode(); code != 1 {
		t.Errorf("nodeinit exited %d; want 1", code)
	}
	errs := r.n.Lines('E')
	if len(errs) != 1 || !strings.Contains(errs[0], "The kubelet's root dir "+dir+" is on ramfs-of-the-test (ramfs, device ") {
		t.Errorf("want one error line naming the root dir, its mount and device; got %q", errs)
	}
	t.Logf("%s", errs)
}

// Only loopback nameservers in /etc/resolv.conf (a stub resolver): the
// kubelet gets systemd-resolved's upstream file when that has real ones,
// else a warning says the pods' resolver would loop.
func TestLoopbackNameservers(t *testing.T) {
	const stub = `printf 'nameserver 127.0.0.53\noptions edns0\n' > "$DIR/resolv.conf"
mount --bind "$DIR/resolv.conf" /etc/resolv.conf
mount -t tmpfs tmpfs /run`
	r := runRestricted(t, testenv.Options{}, stub+"\nmkdir -p /run/systemd/resolve\nprintf 'nameserver 192.0.2.53\\n' > /run/systemd/resolve/resolv.conf", nil)
	if args := r.line("args"); !strings.Contains(args, "--resolv-conf=/run/systemd/resolve/resolv.conf") {
		t.Errorf("the kubelet's arguments are %q; want --resolv-conf=/run/systemd/resolve/resolv.conf\n%s", args, r.n.Log())
	}
	if a := r.adjusted("resolv-conf"); len(a) != 1 || !strings.Contains(a[0], "only loopback nameservers (127.0.0.53)") {
		t.Errorf("want one line for the adjustment naming the loopback nameserver; got %q", a)
	}

	r = runRestricted(t, testenv.Options{}, stub, nil)
	if args := r.line("args"); strings.Contains(args, "--resolv-conf") {
		t.Errorf("without systemd-resolved's file the kubelet got %q", args)
	}
	if w := r.n.Lines('W', "only loopback nameservers (127.0.0.53)", "resolver that loops"); len(w) != 1 {
		t.Errorf("want one warning that the pods' resolver would loop; log:\n%s", r.n.Log())
	}

	r = runRestricted(t, testenv.Options{}, stub+"\nmkdir -p /run/systemd/resolve\nprintf 'nameserver 192.0.2.53\\n' > /run/systemd/resolve/resolv.conf", nil,
		"--resolv-conf=/etc/k8s-resolv.conf")
	if args := r.line("args"); strings.Count(args, "--resolv-conf") != 1 {
		t.Errorf("the operator's --resolv-conf must stay the only one: %q", args)
	}
}

// A read-only cgroupfs of the container's own — a cgroup namespace of its
// own with the cgroup2 hierarchy mounted afresh in it, read-only, as a
// runtime with --cgroupns=private mounts it: nodeinit, which has
// CAP_SYS_ADMIN here, remounts it read-write for a kubelet and says so
// once; skipped, it stays read-only. A read-only mount of the host's whole
// tree — every hierarchy of this host bound read-only in its own cgroup
// namespace, as a runtime without a cgroup namespace mounts cgroup v2: one
// line refuses it, nothing is remounted and the kubelet never starts.
func TestReadOnlyCgroupfsIsRemountedForAKubelet(t *testing.T) {
	l, err := cgroups.ReadLayout("/")
	if err != nil {
		t.Fatal(err)
	}
	var mounts []string
	unified := ""
	for _, h := range l.Hierarchies {
		mounts = append(mounts, h.Mountpoint)
		if h.Unified {
			unified = h.Mountpoint
		}
	}
	testenv.Require(t, unified != "", "a mounted cgroup2 hierarchy")
	options := func(r restricted) map[string]string {
		out := map[string]string{}
		for l := range strings.SplitSeq(r.report, "\n") {
			if f := strings.Fields(strings.TrimPrefix(l, "cgroupfs: ")); strings.HasPrefix(l, "cgroupfs: ") && len(f) == 2 {
				out[f[0]] = f[1]
			}
		}
		return out
	}
	own := testenv.Options{Unshare: []string{"--cgroup"}}
	// Every hierarchy is mounted afresh in the namespace, as a runtime
	// with --cgroupns=private mounts them: a v1 hierarchy left as the
	// host's would show cgroups above the namespace's root, which nodeinit
	// refuses to take for the container's. Only the cgroup2 one is
	// read-only.
	fresh := fmt.Sprintf("umount -l %[1]s\nmount -t cgroup2 -o ro,nosuid,nodev,noexec nodeinit-test %[1]s", unified)
	for _, h := range l.Hierarchies {
		if !h.Unified {
			fresh += fmt.Sprintf("\numount -l %[1]s\nmount -t cgroup -o nosuid,nodev,noexec,%[2]s nodeinit-test %[1]s", h.Mountpoint, strings.Join(h.Controllers, ","))
		}
	}
	r := runRestricted(t, own, fresh, nil)
	if o := options(r)[unified]; !strings.HasPrefix(o, "rw,") {
		t.Errorf("the kubelet sees %s mounted %q; want read-write; log:\n%s", unified, o, r.n.Log())
	}
	if a := r.adjusted("cgroupfs"); len(a) != 1 || !strings.Contains(a[0], "root / of the container's cgroup namespace") {
		t.Errorf("want one adjustment for the cgroup namespace's own mount:\n%s", strings.Join(a, "\n"))
	}
	r = runRestricted(t, own, fresh, []string{"--skip-container-checks=cgroupfs"})
	if o := options(r)[unified]; !strings.HasPrefix(o, "ro,") {
		t.Errorf("with the check skipped the kubelet sees %s mounted %q; want it left read-only", unified, o)
	}

	r = runRestricted(t, testenv.Options{ReadOnly: mounts}, "", nil)
	if code := r.n.ExitCode(); code != 1 || r.report != "" {
		t.Errorf("exit %d, kubelet's report %q; want 1 and no kubelet for the host's cgroup tree; log:\n%s", code, r.report, r.n.Log())
	}
	if e := r.n.Lines('E', "is the host's whole cgroup tree", "mount it read-write"); len(e) != 1 {
		t.Errorf("want one error line refusing the host's cgroup tree; log:\n%s", r.n.Log())
	}
	if a := r.adjusted("cgroupfs"); len(a) != 0 {
		t.Errorf("the host's cgroup tree was remounted:\n%s", strings.Join(a, "\n"))
	}
}

// inotify limits below a node's needs: a warning with the sysctl to set;
// with --raise-inotify-limits nodeinit raises them and says so. The test
// writes the host's sysctl and puts it back.
func TestLowInotifyLimits(t *testing.T) {
	testenv.RequireRoot(t)
	const file = "/proc/sys/fs/inotify/max_user_instances"
	// Both limits are put back: --raise-inotify-limits raises each that is low.
	for _, f := range []string{file, "/proc/sys/fs/inotify/max_user_watches"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		was := strings.TrimSpace(string(b))
		t.Cleanup(func() {
			if err := os.WriteFile(f, []byte(was), 0); err != nil {
				t.Errorf("put back %s=%s: %v", f, was, err)
			}
		})
	}
	if b, _ := os.ReadFile(file); func() bool { n, _ := strconv.Atoi(strings.TrimSpace(string(b))); return n >= 512 }() {
		if err := os.WriteFile(file, []byte("128"), 0); err != nil {
			t.Fatal(err)
		}
	}
	r := runRestricted(t, testenv.Options{}, "", nil)
	if w := r.n.Lines('W', "fs.inotify.max_user_instances is", "below the 512", "sysctl -w fs.inotify.max_user_instances=512"); len(w) != 1 {
		t.Errorf("want one warning with the sysctl to set; log:\n%s", r.n.Log())
	}

	r = runRestricted(t, testenv.Options{}, "", []string{"--raise-inotify-limits"})
	if a := r.adjusted("inotify"); len(a) == 0 || !strings.Contains(strings.Join(a, "\n"), "fs.inotify.max_user_instances=512") {
		t.Errorf("want the raise logged; log:\n%s", r.n.Log())
	}
	if now, _ := os.ReadFile(file); strings.TrimSpace(string(now)) != "512" {
		t.Errorf("%s is %s after --raise-inotify-limits; want 512", file, now)
	}
}

// In a user namespace nodeinit adds KubeletInUserNamespace=true to a
// kubelet's feature gates beside the operator's own, and refuses in one line
// (exit 1) when the cgroups the kubelet needs cannot be written.
func TestUserNamespace(t *testing.T) {
	userns := testenv.Options{Unshare: []string{"--user", "--map-root-user"}}
	r := runRestricted(t, userns, "", nil, "--feature-gates=NodeSwap=true")
	args := r.line("args")
	if !strings.Contains(args, "--feature-gates=NodeSwap=true") || !strings.Contains(args, "--feature-gates=KubeletInUserNamespace=true") {
		t.Errorf("the kubelet's arguments are %q; want the operator's gates and KubeletInUserNamespace=true\n%s", args, r.n.Log())
	}
	if a := r.adjusted("user-namespace"); len(a) != 1 {
		t.Errorf("want one line for the gate; got %q", a)
	}
	// The operator's own value stays, with a warning.
	r = runRestricted(t, userns, "", nil, "--feature-gates=KubeletInUserNamespace=false")
	if args := r.line("args"); strings.Count(args, "KubeletInUserNamespace") != 1 {
		t.Errorf("the operator's KubeletInUserNamespace=false was overridden: %q", args)
	}
	if w := r.n.Lines('W', "sets KubeletInUserNamespace=false"); len(w) != 1 {
		t.Errorf("want one warning about the operator's false; log:\n%s", r.n.Log())
	}

	l, err := cgroups.ReadLayout("/")
	if err != nil {
		t.Fatal(err)
	}
	ro := userns
	for _, h := range l.Hierarchies {
		ro.ReadOnly = append(ro.ReadOnly, h.Mountpoint)
	}
	testenv.Require(t, len(ro.ReadOnly) > 0, "a mounted cgroup hierarchy")
	r = runRestricted(t, ro, "", []string{"--skip-container-checks=cgroupfs"})
	if code := r.n.ExitCode(); code != 1 || r.report != "" {
		t.Errorf("nodeinit exited %d, the kubelet's report %q; want exit 1 before the kubelet starts", code, r.report)
	}
	errs := r.n.Lines('E')
	if len(errs) != 1 || !strings.Contains(errs[0], "In a user namespace the kubelet needs to write the container's cgroup") {
		t.Errorf("want one error line that the cgroup is not writable; got %q", errs)
	}
	t.Logf("%s", errs)
}

// --write-flags shows what nodeinit would change for its container: in a
// network namespace of its own kube-proxy's line has
// --conntrack-max-per-core=0, and stderr says why; stdout holds the two
// command lines alone.
func TestWriteFlagsShowsTheAdjustments(t *testing.T) {
	testenv.RequireRoot(t)
	nodeinit := testenv.BuildRaced(t, "./cmd/nodeinit")
	cmd := exec.Command(testenv.RequireTool(t, "unshare"), "--net", nodeinit, "--write-flags", "--proxy-path=/opt/bin/kube-proxy", "--", "/opt/bin/kubelet")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 || !strings.HasSuffix(lines[1], " --conntrack-max-per-core=0") {
		t.Errorf("--write-flags printed %q; want the kubelet's line and kube-proxy's with --conntrack-max-per-core=0", lines)
	}
	if !strings.Contains(stderr.String(), `nodeinit: Adjusted the node to its container check="conntrack" change="--conntrack-max-per-core=0 for kube-proxy" reason="/proc/sys/net/netfilter/nf_conntrack_max is read-only`) {
		t.Errorf("stderr does not show the adjustment and its reason:\n%s", stderr.String())
	}
}
