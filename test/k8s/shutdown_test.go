//go:build k8s

package k8s

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// drainPod is a pod whose preStop hook notes the time in the node's
// directory (a hostPath: containerd runs on the host) and whose container
// takes a moment to end on TERM, within its grace period.
const drainPod = `apiVersion: v1
kind: Pod
metadata: {name: drain, namespace: default}
spec:
  terminationGracePeriodSeconds: 20
  volumes: [{name: out, hostPath: {path: %s}}]
  containers:
  - name: c
    image: ` + busyboxImage + `
    imagePullPolicy: Never
    command: [sh, -c, 'trap "sleep 1; exit 0" TERM; while :; do sleep 1; done']
    volumeMounts: [{name: out, mountPath: /out}]
    lifecycle: {preStop: {exec: {command: [sh, -c, "date +%%s > /out/prestop"]}}}
`

// kubeletShutdown turns on the kubelet's graceful node shutdown: 30s in all,
// 10s of it for critical pods.
const kubeletShutdown = "shutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s\n"

// With --graceful-node-shutdown, stopping the node drains it: the kubelet
// takes its delay lock from nodeinit's login1 at start; on TERM it gets
// PrepareForShutdown, runs the pod's preStop hook, ends the pod the way its
// node shutdown ends pods and reports the Node shutting down, releases the
// lock, and only then gets the TERM; nodeinit exits 0 within the delay and
// the grace period. It runs for each release of the matrix (releases).
func TestGracefulNodeShutdownDrainsThePods(t *testing.T) {
	c := getCluster(t)
	for _, r := range releases(t) {
		t.Run(r.version, func(t *testing.T) {
			k := c.startNode(t, nodeSpec{bin: r.bin, kubeletConfig: kubeletShutdown, flags: []string{"--graceful-node-shutdown"}})
			k.waitReady(90 * time.Second)
			if v := k.getNode().Status.NodeInfo.KubeletVersion; v != r.version {
				t.Errorf("the Node's kubelet is %s; want %s", v, r.version)
			}
			k.waitLog(30*time.Second, 0, `"Took a shutdown delay inhibitor"`, `who="kubelet"`)
			k.create("/api/v1/namespaces/default/pods", "drain", fmt.Sprintf(drainPod, k.dir))
			k.waitPods("metadata.name=drain", 1, 60*time.Second)

			k.stopAndCheckDrained()
		})
	}
}

// With nodeinit's delay shorter than the kubelet's shutdownGracePeriod, the
// kubelet raises it as it does on a machine: it writes
// /etc/systemd/logind.conf.d/99-kubelet.conf and has systemd reload logind
// (KillUnit of systemd-logind.service with SIGHUP). nodeinit's logind
// reloads its configuration and reports the kubelet's 30s, the kubelet
// takes its lock, and stopping the node drains it. Without the reload the
// kubelet would turn graceful node shutdown off and leave its pods
// running. It runs for each release of the matrix (releases).
func TestAKubeletThatRaisesAShortDelayDrainsTheNode(t *testing.T) {
	c := getCluster(t)
	for _, r := range releases(t) {
		t.Run(r.version, func(t *testing.T) {
			keepLogindDropIn(t)
			k := c.startNode(t, nodeSpec{bin: r.bin, kubeletConfig: kubeletShutdown,
				flags: []string{"--graceful-node-shutdown", "--graceful-node-shutdown-delay=10s"}})
			k.waitReady(90 * time.Second)
			k.waitLog(30*time.Second, 0, `"Reloaded logind's configuration"`, `inhibitDelayMax="30s"`, `was="10s"`, `from="/etc/systemd/logind.conf.d/99-kubelet.conf"`)
			k.waitLog(30*time.Second, 0, `"Took a shutdown delay inhibitor"`, `who="kubelet"`)
			if b, err := os.ReadFile(kubeletLogindDropIn); err != nil || !strings.Contains(string(b), "InhibitDelayMaxSec=30") {
				t.Errorf("the kubelet's drop-in: %q, %v", b, err)
			}
			k.create("/api/v1/namespaces/default/pods", "drain", fmt.Sprintf(drainPod, k.dir))
			k.waitPods("metadata.name=drain", 1, 60*time.Second)
			k.stopAndCheckDrained()
		})
	}
}

// kubeletLogindDropIn is where the kubelet writes the delay it wants
// (pkg/kubelet/nodeshutdown/systemd, OverrideInhibitDelay).
const kubeletLogindDropIn = "/etc/systemd/logind.conf.d/99-kubelet.conf"

// keepLogindDropIn puts the kubelet's logind drop-in and the directories
// above it back as they were when the test ends: the kubelet writes into
// the host's /etc.
func keepLogindDropIn(t *testing.T) {
	t.Helper()
	old, err := os.ReadFile(kubeletLogindDropIn)
	existed := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	var made []string // directories the kubelet may make, deepest first
	for d := filepath.Dir(kubeletLogindDropIn); d != "/"; d = filepath.Dir(d) {
		if _, err := os.Stat(d); errors.Is(err, fs.ErrNotExist) {
			made = append(made, d)
		}
	}
	t.Cleanup(func() {
		if existed {
			must(t, os.WriteFile(kubeletLogindDropIn, old, 0o644))
			return
		}
		if err := os.Remove(kubeletLogindDropIn); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Error(err)
		}
		for _, d := range made {
			if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("remove %s, which the kubelet made: %v", d, err)
			}
		}
	})
}

// stopAndCheckDrained stops a node whose kubelet holds its delay lock and
// runs the pod drain (drainPod), and checks it drained: nodeinit sent
// PrepareForShutdown, the kubelet ran the preStop hook, ended the pod as
// its node shutdown ends pods and reported the Node shutting down, and
// released its lock before it got TERM; nodeinit exited 0 within the delay
// and the grace period.
func (k *kubeNode) stopAndCheckDrained() {
	t := k.t
	t.Helper()
	stopped := time.Now()
	s := k.stopAndCheck(90 * time.Second)
	took := time.Since(stopped)
	t.Logf("graceful node shutdown: %v in all; after the drain, %v", took.Round(time.Millisecond), s)
	if s.code != 0 {
		t.Errorf("nodeinit exited %d, want 0", s.code)
	}
	// The delay (the kubelet's 30s) and the grace period (20s) bound it.
	if took > 50*time.Second {
		t.Errorf("the stop took %v, more than the delay and the grace period", took)
	}
	k.checkDrained()
	// The kubelet's node shutdown ends a pod with the DisruptionTarget
	// condition, reason TerminationByKubelet.
	p := k.getPod("drain")
	var byKubelet bool
	for _, c := range p.Status.Conditions {
		if c.Type == "DisruptionTarget" && c.Status == "True" && c.Reason == "TerminationByKubelet" {
			byKubelet = true
			t.Logf("the pod ended %s: %s", p.Status.Phase, c.Message)
		}
	}
	if p.Status.Phase == "Running" || !byKubelet {
		t.Errorf("the pod is %s with conditions %+v: not ended by the kubelet's node shutdown", p.Status.Phase, p.Status.Conditions)
	}
	if n := k.getNode(); !strings.Contains(n.condition("Ready").Message, "shutting down") {
		t.Errorf("the Node does not show the shutdown: Ready is %+v", n.condition("Ready"))
	}
}

// checkDrained checks from nodeinit's log and the preStop hook's file
// that the node drained before the kubelet got TERM: nodeinit sent
// PrepareForShutdown, the kubelet released its lock, the drain was over
// for that reason, the TERM came after it, and the pod's preStop hook ran.
// It returns how long the drain took.
func (k *kubeNode) checkDrained() time.Duration {
	t := k.t
	t.Helper()
	log := k.log()
	for _, want := range []string{`"Draining the node before the executor stops"`, `"Drain over" reason="the node has drained"`,
		`"Released a shutdown delay inhibitor" who="kubelet"`} {
		if !strings.Contains(log, want) {
			t.Errorf("nodeinit's log lacks %s", want)
		}
	}
	drained := k.waitLog(0, k.since, `"Drain over"`).at
	term := k.waitLog(0, drained, `"Forwarded signal to the executor"`).at
	took := drained - k.waitLog(0, k.since, `"Draining the node before the executor stops"`).at
	t.Logf("the drain took %v from PrepareForShutdown to the release of the lock", took.Round(time.Millisecond))
	if term < drained {
		t.Errorf("the kubelet got TERM before the drain was over")
	}
	b, err := os.ReadFile(filepath.Join(k.dir, "prestop"))
	if err != nil {
		t.Errorf("the pod's preStop hook did not run: %v", err)
	} else {
		t.Logf("preStop ran at %s", strings.TrimSpace(string(b)))
	}
	return took
}

// Without the flag the kubelet has no logind: TERM stops it at once and its
// pods keep running, with nobody managing them.
func TestWithoutGracefulNodeShutdownThePodsAreLeftRunning(t *testing.T) {
	c := getCluster(t)
	k := c.startNode(t, nodeSpec{kubeletConfig: kubeletShutdown})
	k.waitReady(90 * time.Second)
	k.create("/api/v1/namespaces/default/pods", "drain", fmt.Sprintf(drainPod, k.dir))
	k.waitPods("metadata.name=drain", 1, 60*time.Second)
	s := k.stopAndCheck(60 * time.Second)
	t.Logf("without graceful node shutdown: %v", s)
	if _, err := os.Stat(filepath.Join(k.dir, "prestop")); err == nil {
		t.Error("the preStop hook ran without graceful node shutdown")
	}
	if p := k.getPod("drain"); p.Status.Phase != "Running" {
		t.Errorf("the pod is %s, want still Running (as the kubelet left it)", p.Status.Phase)
	}
	if strings.Contains(k.log(), "Draining the node") {
		t.Error("nodeinit drained without --graceful-node-shutdown")
	}
}

// getPod reads a pod of the default namespace.
func (k *kubeNode) getPod(name string) pod {
	k.t.Helper()
	var p pod
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must(k.t, k.c.api.get(ctx, "/api/v1/namespaces/default/pods/"+name, &p))
	return p
}
