//go:build k8s

package k8s

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// hostDrainMarker is what the host-shutdown pod's preStop hook writes to
// the guest's kernel log, at level 2 (crit), so that the kernel prints it
// on the serial console, which qemu writes to a file here: it reaches the
// test before the guest powers off, with nothing in the guest to survive.
const hostDrainMarker = "nodeinit-prestop-marker"

// hostDrainPod is drainPod with the kernel log instead of a directory:
// privileged, with the guest's /dev/kmsg, its preStop hook writes
// hostDrainMarker there.
const hostDrainPod = `apiVersion: v1
kind: Pod
metadata: {name: hostdrain, namespace: default}
spec:
  terminationGracePeriodSeconds: 20
  volumes: [{name: kmsg, hostPath: {path: /dev/kmsg, type: CharDevice}}]
  containers:
  - name: c
    image: ` + busyboxImage + `
    imagePullPolicy: Never
    securityContext: {privileged: true}
    command: [sh, -c, 'trap "sleep 1; exit 0" TERM; while :; do sleep 1; done']
    volumeMounts: [{name: kmsg, mountPath: /dev/kmsg}]
    lifecycle: {preStop: {exec: {command: [sh, -c, "echo '<2>` + hostDrainMarker + `' > /dev/kmsg"]}}}
`

// staticPodEndingOnTerm is staticPod with a container that ends on TERM.
var staticPodEndingOnTerm = strings.Replace(staticPod, `command: [sleep, "1000000"]`,
	`command: [sh, -c, 'trap "exit 0" TERM; while :; do sleep 1; done']`, 1)

// guestPowerDown is the kernel's last line on the console before qemu
// exits (-no-reboot and no -no-shutdown: a powered-off guest ends qemu).
const guestPowerDown = "reboot: Power down"

// The bounds of the host's shutdown: the drain within the host's delay
// (60 s) and systemd's stop of everything else (its default stop timeout,
// 90 s, for a unit that does not stop) with TCG's slowness on top.
const (
	hostDelaySec        = 60
	guestPowerOffBound  = 5 * time.Minute
	guestQemuExitBound  = time.Minute
	guestLogFollowBound = time.Minute
)

// checkHostShutdown boots a guest of its own (it powers it off), raises
// its logind's InhibitDelayMaxSec to 60 s, and runs the node there with
// the README's podman line, which mounts the guest's /run, so nodeinit
// reaches the guest's system bus, and --graceful-node-shutdown, the
// kubelet's shutdownGracePeriod 30s (10s of it for critical pods). It
// starts a pod whose preStop hook writes hostDrainMarker to the guest's
// console, then powers the guest off with systemctl poweroff, through the
// guest's logind.
//
// With drain, nodeinit's default: nodeinit takes its delay lock on the
// guest's logind (its log line, systemd-inhibit --list), the guest's
// PrepareForShutdown drains the node, so the preStop hook runs, and the
// marker reaches the console before the kernel powers the guest off.
// Without it (--drain-on-host-shutdown=false), nodeinit says so, holds no
// lock on the guest's logind, and no marker comes before the power-down:
// the guest's systemd stops the container and the pods' scopes on its own.
// oldest, when not empty, is the oldest release's version: the node runs
// its kubelet and kube-proxy (oldestBinaries), and the Node must report it.
func (c *cluster) checkHostShutdown(t *testing.T, share, stores string, drain bool, oldest string) {
	dir := t.TempDir()
	v := bootNodeHost(t, dir, share, stores)

	setGuestInhibitDelay(t, v)

	flags := []string{"--graceful-node-shutdown"}
	if !drain {
		flags = append(flags, "--drain-on-host-shutdown=false")
	}
	var engineFlags []string
	if oldest != "" {
		engineFlags = oldestBinaries()
	}
	// Without the drain the guest's systemd stops the pods' scopes itself,
	// with TERM: the static pod's sleep, PID 1 of its container, ignores
	// it and would hold the power-down for systemd's stop timeout (90 s).
	// All this case shows is that no drain came first; its static pod ends
	// on TERM.
	static := staticPod
	if !drain {
		static = staticPodEndingOnTerm
	}
	k := c.runGuestNodeIn(t, v, "podman", vmKubeletConfig+kubeletShutdown, static, engineFlags, flags...)
	// nodeinit's output after the power-off: podman logs -f in a unit of
	// the guest's own, into the shared folder, as it comes.
	hostLog := filepath.Join(k.dir, "node.log")
	guestLog := guestShare + "/" + filepath.Base(k.dir) + "/node.log"
	podmanLog := k.log
	k.log = func() string {
		if v.qemu.running() {
			return podmanLog()
		}
		b, err := os.ReadFile(hostLog)
		if err != nil {
			return err.Error()
		}
		return string(b)
	}
	n, took := k.waitGuestReady(5 * time.Minute)
	t.Logf("Node Ready %v after podman run, kubelet %s", took.Round(100*time.Millisecond), n.Status.NodeInfo.KubeletVersion)
	if v := n.Status.NodeInfo.KubeletVersion; oldest != "" && v != oldest {
		t.Errorf("the Node's kubelet is %s; want the oldest release's %s", v, oldest)
	}
	if drain {
		l := k.waitLog(3*time.Minute, 0, "Took a shutdown delay lock on the host's logind", fmt.Sprintf(`hostDelay="%v"`, hostDelaySec*time.Second))
		t.Logf("nodeinit: %s", l.text)
	} else {
		l := k.waitLog(3*time.Minute, 0, "The host's shutdown will not drain the node", "--drain-on-host-shutdown=false")
		t.Logf("nodeinit: %s", l.text)
	}
	k.waitLog(3*time.Minute, 0, `"Took a shutdown delay inhibitor"`, `who="kubelet"`)
	locks := v.ssh("systemd-inhibit --list --no-pager")
	held := strings.Contains(locks, "nodeinit")
	t.Logf("the guest's delay locks (systemd-inhibit --list):\n%s", strings.TrimSpace(locks))
	if held != drain {
		t.Errorf("nodeinit's delay lock on the guest's logind: held %v, want %v", held, drain)
	}

	k.create("/api/v1/namespaces/default/pods", "hostdrain", hostDrainPod)
	k.waitPods("metadata.name=hostdrain", 1, 5*time.Minute)
	v.ssh(fmt.Sprintf("systemd-run --quiet --unit=node-log --collect sh -c 'exec podman logs -f %s > %s 2>&1'", guestNodeName, guestLog))
	for deadline := time.Now().Add(guestLogFollowBound); ; time.Sleep(time.Second) {
		if fi, err := os.Stat(hostLog); err == nil && fi.Size() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("podman logs -f wrote nothing into the shared folder within %v", guestLogFollowBound)
		}
	}

	off := powerOffGuest(t, v, k.dir)
	if off.down == 0 {
		// A hung guest: the cleanup's stop of qemu kills it.
		return
	}
	marker, down := off.marker, off.down
	log := k.log()
	mode := map[bool]string{true: "with the drain", false: "without the drain (--drain-on-host-shutdown=false)"}[drain]
	if marker > 0 {
		t.Logf("the host's shutdown %s: systemctl poweroff to the preStop marker on the console %v, to the kernel's power-down %v",
			mode, marker.Round(100*time.Millisecond), down.Round(100*time.Millisecond))
	} else {
		t.Logf("the host's shutdown %s: no preStop marker before the power-down; systemctl poweroff to the kernel's power-down %v",
			mode, down.Round(100*time.Millisecond))
	}
	t.Logf("nodeinit's log about the shutdown:\n%s", shutdownLines(log))
	if drain {
		if marker == 0 {
			t.Errorf("the pod's preStop hook did not write %s to the console before %q: the host's shutdown did not drain the node", hostDrainMarker, guestPowerDown)
		}
		if !strings.Contains(log, "The host is shutting down: draining the node") {
			t.Errorf("nodeinit's log lacks %q", "The host is shutting down: draining the node")
		}
		for _, p := range hostDrainProblems(log) {
			t.Errorf("the host's shutdown: %s", p)
		}
	} else if marker > 0 {
		t.Errorf("with --drain-on-host-shutdown=false the preStop hook wrote %s before the power-down (%v after poweroff)", hostDrainMarker, marker)
	}
}

// hostDrainProblems reads nodeinit's log of a host's shutdown: one drain
// in all, for the host's shutdown ("Draining the node for the host's
// shutdown"; the container's own stop that follows must not drain again),
// over because the node drained, and the host's lock released once, only
// after the drain was over. It returns what is wrong.
func hostDrainProblems(log string) []string {
	var drains, overs, releases []logLine
	for _, l := range nodeinitLines(log) {
		switch {
		case strings.Contains(l.text, `"Draining the node for the host's shutdown"`), strings.Contains(l.text, `"Draining the node before the executor stops"`):
			drains = append(drains, l)
		case strings.Contains(l.text, `"Drain over"`):
			overs = append(overs, l)
		case strings.Contains(l.text, `"Released the shutdown delay lock on the host's logind`):
			releases = append(releases, l)
		}
	}
	if len(drains) != 1 || len(overs) != 1 || len(releases) != 1 {
		return []string{fmt.Sprintf("nodeinit's log has %d drains, %d ends of one and %d releases of the host's lock; want one of each", len(drains), len(overs), len(releases))}
	}
	var problems []string
	if !strings.Contains(drains[0].text, `"Draining the node for the host's shutdown"`) {
		problems = append(problems, "the one drain was not the host's: "+drains[0].text)
	}
	if !strings.Contains(overs[0].text, `reason="the node has drained"`) {
		problems = append(problems, "the drain was over for another reason than the kubelet's release: "+overs[0].text)
	}
	if overs[0].at < drains[0].at || releases[0].at < overs[0].at {
		problems = append(problems, fmt.Sprintf("the drain began at %v and was over at %v, the host's lock released at %v: want the release after the drain", drains[0].at, overs[0].at, releases[0].at))
	}
	return problems
}

// setGuestInhibitDelay raises the guest's logind's InhibitDelayMaxSec to
// hostDelaySec with a drop-in, as a node's host is configured for the
// kubelet's shutdownGracePeriod.
func setGuestInhibitDelay(t *testing.T, v *vm) {
	t.Helper()
	v.ssh(fmt.Sprintf(`set -e; mkdir -p /etc/systemd/logind.conf.d
printf '[Login]\nInhibitDelayMaxSec=%d\n' > /etc/systemd/logind.conf.d/90-node.conf
systemctl restart systemd-logind`, hostDelaySec))
	want := fmt.Sprintf("t %d", hostDelaySec*1000000)
	if got := strings.TrimSpace(v.ssh("busctl get-property org.freedesktop.login1 /org/freedesktop/login1 org.freedesktop.login1.Manager InhibitDelayMaxUSec")); got != want {
		t.Fatalf("the guest's logind has InhibitDelayMaxUSec %q after the drop-in; want %q", got, want)
	}
}

// guestPowerOff is what a guest's systemctl poweroff showed: when the
// preStop marker and the kernel's power-down reached the console, after
// the poweroff (0: not before the power-down), and the console's lines
// after it.
type guestPowerOff struct {
	marker, down time.Duration
	after        string
}

// powerOffGuest powers the guest off with systemctl poweroff, through its
// logind, and watches its console for hostDrainMarker and the kernel's
// power-down, bounded by guestPowerOffBound. The guest's journal follows
// into dir (a directory in the shared folder) from a unit the shutdown's
// transaction does not stop (no default dependencies): it runs until
// systemd-shutdown's last kill, so it shows what the guest's systemd
// waited for. It logs what waited and the journal around the longest wait.
func powerOffGuest(t *testing.T, v *vm, dir string) guestPowerOff {
	t.Helper()
	hostJournal := filepath.Join(dir, "journal.log")
	v.ssh(fmt.Sprintf("systemd-run --quiet --unit=journal-follow --collect -p DefaultDependencies=no sh -c 'exec journalctl -f -n 0 -o short-monotonic > %s 2>&1'",
		guestShare+"/"+filepath.Base(dir)+"/journal.log"))

	before, err := os.ReadFile(v.console())
	must(t, err)
	if strings.Contains(string(before), hostDrainMarker) {
		t.Fatalf("the console shows %s before the guest's shutdown", hostDrainMarker)
	}
	var off guestPowerOff
	poweroff := time.Now()
	if out, err := v.sshTimeout(time.Minute, "systemctl poweroff --no-block"); err != nil {
		// The guest may close the connection as it goes down.
		t.Logf("systemctl poweroff: %s %v", out, err)
	}
	for deadline := poweroff.Add(guestPowerOffBound); off.down == 0; time.Sleep(100 * time.Millisecond) {
		b, _ := os.ReadFile(v.console())
		off.after = string(b[min(len(before), len(b)):])
		if off.marker == 0 && strings.Contains(off.after, hostDrainMarker) {
			off.marker = time.Since(poweroff)
		}
		if i := strings.Index(off.after, guestPowerDown); i >= 0 {
			off.down = time.Since(poweroff)
			// Both may be seen in one read: the order is the console's.
			if j := strings.Index(off.after, hostDrainMarker); j > i {
				off.marker = 0
			}
		}
		if off.down == 0 && (!v.qemu.running() || time.Now().After(deadline)) {
			t.Errorf("the guest did not power off within %v of systemctl poweroff (qemu running: %v)", guestPowerOffBound, v.qemu.running())
			break
		}
	}
	select {
	case <-v.qemu.done:
	case <-time.After(guestQemuExitBound):
		t.Errorf("qemu still runs %v after the guest's power-down", guestQemuExitBound)
	}
	if off.down == 0 {
		return off
	}

	// What took the guest's time to stop: systemd's stop jobs, its
	// killing of what did not stop, the kernel's last lines.
	var slow []string
	for l := range strings.SplitSeq(off.after, "\n") {
		for _, w := range []string{"stop job", "timed out", "Killing", "SIGKILL"} {
			if strings.Contains(l, w) {
				slow = append(slow, strings.TrimSpace(l))
				break
			}
		}
	}
	t.Logf("the guest's console after systemctl poweroff: what waited (stop jobs, timeouts, kills):\n%s\nlast lines:\n%s",
		testenv.Tail(strings.Join(slow, "\n"), 20), testenv.Tail(off.after, 30))
	if b, err := os.ReadFile(hostJournal); err != nil {
		t.Logf("the guest's journal: %v", err)
	} else {
		t.Logf("the guest's journal during the shutdown, around its longest wait:\n%s", longestWait(string(b), 12))
	}
	return off
}

// shutdownLines are nodeinit's own lines (klog's pid 1) of a node's log
// about the drain and the host's shutdown, the last 40.
func shutdownLines(log string) string {
	var out []string
	for _, l := range nodeinitLines(log) {
		if f := strings.Fields(l.text); len(f) < 3 || f[2] != "1" {
			continue
		}
		for _, w := range []string{"The host", "host's logind", "Drain", "drain", "shutdown delay", "the executor"} {
			if strings.Contains(l.text, w) {
				out = append(out, l.text)
				break
			}
		}
	}
	return strings.Join(out[max(0, len(out)-40):], "\n")
}

// longestWait finds, in a journal printed with -o short-monotonic, the
// longest time between two lines, and returns n lines before it and n
// after, with the wait between them: what a shutdown waited for.
func longestWait(journal string, n int) string {
	lines := strings.Split(strings.TrimSpace(journal), "\n")
	stamp := func(l string) (float64, bool) {
		open, end := strings.IndexByte(l, '['), strings.IndexByte(l, ']')
		if open != 0 || end < 0 {
			return 0, false
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(l[1:end]), 64)
		return f, err == nil
	}
	at, gap, last := -1, 0.0, -1.0
	for i, l := range lines {
		s, ok := stamp(l)
		if !ok {
			continue
		}
		if last >= 0 && s-last > gap {
			at, gap = i, s-last
		}
		last = s
	}
	if at < 0 {
		return testenv.Tail(journal, 2*n)
	}
	out := slices.Clone(lines[max(0, at-n):at])
	out = append(out, fmt.Sprintf("    ... %.1f s ...", gap))
	return strings.Join(append(out, lines[at:min(len(lines), at+n)]...), "\n")
}

// TestHostDrainProblems: the host's lock released after the drain, once,
// after one drain; a release before the drain's end or a second drain fail.
func TestHostDrainProblems(t *testing.T) {
	const (
		drain    = `I1203 10:00:01.000000       1 supervisor.go:1] "Draining the node for the host's shutdown" timeout="30s"`
		over     = `I1203 10:00:09.000000       1 supervisor.go:1] "Drain over" reason="the node has drained"`
		release  = `I1203 10:00:09.100000       1 client.go:1] "Released the shutdown delay lock on the host's logind: the host's shutdown goes on"`
		early    = `I1203 10:00:05.000000       1 client.go:1] "Released the shutdown delay lock on the host's logind: the host's shutdown goes on"`
		again    = `I1203 10:00:12.000000       1 supervisor.go:1] "Draining the node before the executor stops" signal="SIGTERM"`
		noSecond = `I1203 10:00:12.000000       1 supervisor.go:1] "The node has drained for the host's shutdown already: no second drain" signal="SIGTERM"`
	)
	for _, c := range []struct {
		log  []string
		want int
	}{
		{[]string{drain, over, release, noSecond}, 0},
		{[]string{drain, early, over}, 1},
		{[]string{drain, over, release, again}, 1},
		{[]string{drain, over}, 1},
	} {
		if p := hostDrainProblems(strings.Join(c.log, "\n")); len(p) != c.want {
			t.Errorf("%q: problems %q; want %d", c.log, p, c.want)
		}
	}
}

// TestStaticPodEndingOnTerm: the host's shutdown without the drain runs a
// static pod whose container ends on TERM, not staticPod's sleep.
func TestStaticPodEndingOnTerm(t *testing.T) {
	if staticPodEndingOnTerm == staticPod || !strings.Contains(staticPodEndingOnTerm, `trap "exit 0" TERM`) {
		t.Errorf("the static pod of the host's shutdown without the drain does not end on TERM:\n%s", staticPodEndingOnTerm)
	}
}
