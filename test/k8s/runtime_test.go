//go:build k8s

package k8s

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runtimeTaskPod is a pod made after containerd's restart: the kubelet
// runs it only once it talks to the runtime that came back.
const runtimeTaskPod = `apiVersion: v1
kind: Pod
metadata: {name: after-restart, namespace: default}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: sleep
    image: ` + busyboxImage + `
    imagePullPolicy: Never
    command: [sleep, "1000000"]
`

// TestRuntimeTaskRunsContainerd2ForTheKubelet: nodeinit runs containerd 2
// as the node's runtime, the real kubelet uses it. The kubelet starts only
// once containerd answers the CRI; a static pod runs; containerd killed is
// restarted after its backoff, the kubelet left alone, the pods' containers
// kept, and a pod made afterwards runs; a TERM stops the kubelet, then
// kube-proxy, then containerd, then its shims and the pods, and nodeinit
// reaps them all itself.
func TestRuntimeTaskRunsContainerd2ForTheKubelet(t *testing.T) {
	c := getCluster(t)
	bin := filepath.Join(c.bin, "containerd-"+containerd2Version)
	if _, err := os.Stat(filepath.Join(bin, "containerd")); err != nil {
		t.Fatalf("containerd %s is missing from %s: run make k8s", containerd2Version, c.bin)
	}
	// The images go in first, with containerd run by the test once: the
	// node's containerd finds them in its root, as a node image's does.
	ctd, err := startContainerdFrom(filepath.Join(c.dir, "ctd2task"), filepath.Join(c.bin, "crictl"), bin, containerd2Config)
	if ctd == nil {
		t.Fatal(err)
	}
	for _, a := range c.archives {
		if err == nil {
			err = ctd.importImage(a)
		}
	}
	if stopErr := ctd.stop(15 * time.Second); err == nil {
		err = stopErr
	}
	must(t, err)

	conf := filepath.Join(ctd.dir, "config.toml")
	k := c.startNode(t, nodeSpec{runtime: ctd, env: []string{"PATH=" + bin + string(filepath.ListSeparator) + os.Getenv("PATH")},
		flags: []string{"--runtime-path=" + filepath.Join(bin, "containerd"), "--runtime-arg=--config", "--runtime-arg=" + conf,
			"--runtime-socket=" + ctd.socket(), "--runtime-wait-timeout=60s", "--proxy-restart-backoff=500ms", "--shutdown-grace-period=10s"}})
	_, took := k.waitReady(90 * time.Second)
	log := k.log()
	answered, line := k.lineAfter(log, "The container runtime answers on its socket; starting the node", 0)
	kubeletStart := time.Duration(-1)
	for _, l := range nodeinitLines(log) {
		if kubeletStart < 0 && strings.Contains(l.text, `task="executor"`) && strings.Contains(l.text, `"Started task"`) {
			kubeletStart = l.at
		}
	}
	if kubeletStart < answered {
		t.Errorf("the kubelet started at %v, before containerd answered at %v", kubeletStart, answered)
	}
	t.Logf("%s; Node Ready %v after nodeinit started", line, took.Round(10*time.Millisecond))
	if !strings.Contains(log, "The executor names the runtime's socket itself; nodeinit adds no endpoint") {
		t.Errorf("nodeinit did not say it left the kubelet's containerRuntimeEndpoint alone:\n%s", log)
	}

	static := k.waitPods("metadata.name=static-sleeper-"+nodeName, 1, 90*time.Second)
	before, err := ctd.cri("ps", "--quiet", "--name", "sleep", "--label", "io.kubernetes.pod.name="+static[0].Metadata.Name)
	must(t, err)

	kids := k.children()
	containerd, kubelet := kids["containerd"], kids["kubelet"]
	if containerd == 0 || kubelet == 0 {
		t.Fatalf("nodeinit's children: %v", kids)
	}
	killed := time.Now()
	must(t, syscall.Kill(containerd, syscall.SIGKILL))
	restarted := k.waitLog(30*time.Second, 0, `"Restarted task"`, `task="runtime"`)
	t.Logf("containerd restarted: %s", restarted.text)
	if got := k.children()["kubelet"]; got != kubelet {
		t.Errorf("the kubelet is pid %d after containerd's restart, was %d", got, kubelet)
	}
	k.create("/api/v1/namespaces/default/pods", "after-restart", runtimeTaskPod)
	k.waitPods("metadata.name=after-restart", 1, 120*time.Second)
	_, _ = k.waitReady(60 * time.Second)
	t.Logf("a pod made after containerd's restart Running %v after the KILL; the Node Ready", time.Since(killed).Round(10*time.Millisecond))
	after, err := ctd.cri("ps", "--quiet", "--name", "sleep", "--label", "io.kubernetes.pod.name="+static[0].Metadata.Name)
	must(t, err)
	if strings.TrimSpace(after) != strings.TrimSpace(before) {
		t.Errorf("the static pod's container was %q before containerd's restart, %q after", before, after)
	}

	since := logTime(time.Now())
	stopped := time.Now()
	if code := k.stop(90 * time.Second); code != 0 {
		t.Errorf("nodeinit exited %d after TERM, want the kubelet's 0", code)
	}
	total := time.Since(stopped)
	log = k.log()
	var at []time.Duration
	prev := since
	for _, msg := range []string{"Executor ended", "Sent TERM to the proxy", "Proxy ended", "Sent TERM to the container runtime",
		"Container runtime ended", "Sent TERM to every other process: what is left of the runtime's shims and pods", "All processes have ended"} {
		when, _ := k.lineAfter(log, msg, prev)
		at, prev = append(at, when-since), when
	}
	if strings.Contains(log, "Exiting with processes that could not be reaped") {
		t.Errorf("nodeinit left processes behind:\n%s", log)
	}
	if left := runtimeTaskShims(bin, ctd.socket()); len(left) > 0 {
		t.Errorf("containerd-shim processes left: %v", left)
	}
	t.Logf("TERM: kubelet ended at %v, kube-proxy got TERM at %v and ended at %v, containerd got TERM at %v and ended at %v, "+
		"the rest got TERM at %v, all ended at %v; nodeinit exited after %v",
		at[0].Round(time.Millisecond), at[1].Round(time.Millisecond), at[2].Round(time.Millisecond), at[3].Round(time.Millisecond),
		at[4].Round(time.Millisecond), at[5].Round(time.Millisecond), at[6].Round(time.Millisecond), total.Round(time.Millisecond))
}

// logTime is t as a time of day, as nodeinitLines has it.
func logTime(t time.Time) time.Duration {
	h, m, s := t.Clock()
	return time.Duration(h)*time.Hour + time.Duration(m)*time.Minute + time.Duration(s)*time.Second + time.Duration(t.Nanosecond()/1000)*time.Microsecond
}

// runtimeTaskShims are the processes running a shim from bin for the
// containerd serving on socket: the fixture's own containerd runs the same
// binaries, and its shims are not the node's.
func runtimeTaskShims(bin, socket string) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil || !strings.HasPrefix(exe, bin+"/") || !strings.Contains(filepath.Base(exe), "shim") {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if args := strings.Split(string(cmdline), "\x00"); slices.Contains(args, socket) {
			out = append(out, fmt.Sprintf("%d %s", pid, strings.Join(args, " ")))
		}
	}
	return out
}
