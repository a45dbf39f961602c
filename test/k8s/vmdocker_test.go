//go:build k8s

package k8s

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startGuestDocker starts the guest's Docker engine, Debian's docker.io
// with its defaults (the systemd cgroup driver on a cgroup v2 host, the
// host's containerd), and checks that it reports that driver and has the
// node image, which imageStores put in its store. The engine keeps running
// for the guest's other Docker cases.
func startGuestDocker(t *testing.T, v *vm) {
	t.Helper()
	start := time.Now()
	v.ssh("systemctl start docker.service")
	started := time.Since(start)
	info := strings.Fields(v.ssh("docker info --format '{{.ServerVersion}} {{.CgroupDriver}} {{.CgroupVersion}}'"))
	if len(info) != 3 || info[1] != "systemd" || info[2] != "2" {
		t.Fatalf("the guest's Docker engine reports %q; want the systemd cgroup driver on cgroup v2", info)
	}
	if _, err := v.sshTimeout(time.Minute, "docker image inspect --format '{{.Id}}' "+nodeImage); err != nil {
		t.Fatalf("the guest's Docker engine lacks the node image: %v", err)
	}
	t.Logf("the guest's Docker %s (cgroup driver %s, cgroup v%s) started in %v", info[0], info[1], info[2], started.Round(100*time.Millisecond))
}

// checkGuestDockerNode runs the node image in the guest's Docker with the
// README's line and --graceful-node-shutdown, the kubelet on the systemd
// cgroup driver: the container is in the scope Docker's systemd driver
// makes, the Node is Ready, the static pod runs below kubepods.slice, the
// Node has a machine-id of its own, kept across docker restart (which
// drains the node and starts a new kubelet), and docker stop drains the
// node (the pod's preStop hook runs) and the container exits 0.
func (c *cluster) checkGuestDockerNode(t *testing.T, v *vm) {
	k := c.runGuestNodeIn(t, v, "docker", vmKubeletConfig+kubeletShutdown, staticPod, nil, "--graceful-node-shutdown")
	n, took := k.waitGuestReady(5 * time.Minute)
	t.Logf("Node %s Ready %v after docker run (kubelet %s)", n.Metadata.Name, took.Round(100*time.Millisecond), n.Status.NodeInfo.KubeletVersion)
	inspect := strings.Fields(v.ssh("docker inspect --format '{{.Id}} {{.State.Pid}}' " + guestNodeName))
	if len(inspect) != 2 {
		t.Fatalf("docker inspect: %q", inspect)
	}
	cg := strings.TrimSpace(v.ssh("cat /proc/" + inspect[1] + "/cgroup"))
	if want := "0::/system.slice/docker-" + inspect[0] + ".scope"; cg != want {
		t.Errorf("nodeinit (pid %s in the guest) is in %q; want %q, the scope of Docker's systemd driver", inspect[1], cg, want)
	}
	static := k.waitPods("metadata.name=static-sleeper-"+nodeName, 1, 5*time.Minute)
	t.Logf("static pod %s Running %v after docker run; nodeinit in %s", static[0].Metadata.Name, time.Since(k.started).Round(100*time.Millisecond), strings.TrimPrefix(cg, "0::"))
	checkSystemdPod(t, v)
	checkGuestMachineID(t, v, n)
	id := n.Status.NodeInfo.MachineID
	k.waitLog(3*time.Minute, 0, `"Took a shutdown delay inhibitor"`, `who="kubelet"`)

	// docker restart: the drain, then a new nodeinit and kubelet in the
	// same container, which report Ready anew.
	was := n.condition("Ready").LastTransitionTime
	began := time.Now()
	v.ssh("docker restart --time 60 " + guestNodeName)
	restarted := time.Since(began)
	var starts []logLine
	for _, l := range nodeinitLines(k.log()) {
		if strings.Contains(l.text, `"Starting nodeinit"`) {
			starts = append(starts, l)
		}
	}
	if len(starts) != 2 {
		t.Fatalf("the node's log after docker restart has %d runs of nodeinit; want 2", len(starts))
	}
	// The first run's lines are the restart's stop: its own drain.
	d := drainOf(k.log(), starts[0].at, starts[1].at)
	for _, p := range d.problems {
		t.Errorf("docker restart's drain: %s", p)
	}
	t.Logf("docker restart's drain: %v from PrepareForShutdown to its end; the kubelet's TERM %v after it", (d.over - d.began).Round(time.Millisecond), (d.term - d.over).Round(time.Millisecond))
	k.since = starts[1].at
	deadline := time.Now().Add(5 * time.Minute)
	for n = k.getNode(); !n.ready() || !n.condition("Ready").LastTransitionTime.After(was); n = k.getNode() {
		if time.Now().After(deadline) {
			t.Fatalf("the Node was not Ready anew within 5m of docker restart: Ready %+v", n.condition("Ready"))
		}
		time.Sleep(2 * time.Second)
	}
	t.Logf("docker restart (the drain included) %v; the Node Ready from the new kubelet %v after the restart began",
		restarted.Round(100*time.Millisecond), time.Since(began).Round(100*time.Millisecond))
	checkGuestMachineID(t, v, n)
	if got := n.Status.NodeInfo.MachineID; got != id {
		t.Errorf("after docker restart the Node's machineID is %q, was %q", got, id)
	}

	k.waitLog(3*time.Minute, k.since, `"Took a shutdown delay inhibitor"`, `who="kubelet"`)
	k.create("/api/v1/namespaces/default/pods", "drain", fmt.Sprintf(drainPod, guestDrainDir))
	k.waitPods("metadata.name=drain", 1, 5*time.Minute)
	k.stopAndCheckGuestDrained(v, guestCrictl)
}

// guestPodsContainerd is the guest's second containerd, for the kubelet of
// a Docker containerizer task: runc through the cgroupfs driver, so that
// the kubelet (on the cgroupfs driver too) makes its pods' cgroups below
// the task's scope, which Docker's systemd driver delegates to the
// container; systemd puts no unit below a scope, so the systemd driver
// cannot. Its own root, state and socket, beside the guest's containerd;
// the same CNI network and pause image.
const guestPodsContainerd = `version = 2
root = "/var/lib/containerd-cgroupfs"
state = "/run/containerd-cgroupfs"

[grpc]
  address = "/run/containerd-cgroupfs/containerd.sock"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "` + pauseImage + `"

[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = false

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "/etc/cni/net.d"
`

// The second containerd's socket, its crictl, and its root.
const (
	guestPodsSocket  = "/run/containerd-cgroupfs/containerd.sock"
	guestPodsCrictl  = guestShare + "/k8s/crictl --runtime-endpoint unix://" + guestPodsSocket + " --image-endpoint unix://" + guestPodsSocket + " --timeout 60s"
	guestPodsRoot    = "/var/lib/containerd-cgroupfs"
	guestPodsUnit    = "containerd-cgroupfs.service"
	guestTaskUnit    = "mesos-docker-executor.service"
	guestTaskSandbox = "/var/lib/mesos/slaves/%[1]s/frameworks/%[2]s/executors/%[3]s/runs/%[4]s"
)

// startGuestPodsContainerd starts guestPodsContainerd in a unit of the
// guest's systemd, imports the pause and busybox images into it, and when
// the test ends removes its pods, stops it and removes its directories.
func startGuestPodsContainerd(t *testing.T, v *vm) {
	t.Helper()
	must(t, os.WriteFile(filepath.Join(v.share, "containerd-cgroupfs.toml"), []byte(guestPodsContainerd), 0o644))
	t.Cleanup(func() {
		if !v.qemu.running() {
			return
		}
		script := fmt.Sprintf(`set -u
%[1]s rmp --all --force >/dev/null || echo "crictl rmp failed"
systemctl stop %[2]s; systemctl reset-failed %[2]s 2>/dev/null
rm -rf %[3]s /run/containerd-cgroupfs`, guestPodsCrictl, guestPodsUnit, guestPodsRoot)
		if out, err := v.sshTimeout(5*time.Minute, script); err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("removing the second containerd: %s %v", out, err)
		}
	})
	start := time.Now()
	v.ssh(fmt.Sprintf(`set -e
systemd-run --quiet --unit=%[1]s containerd --config %[2]s/containerd-cgroupfs.toml
for i in $(seq 120); do ctr --address %[3]s version >/dev/null 2>&1 && break; sleep 1; done
for a in pause busybox; do ctr --address %[3]s --namespace k8s.io images import %[2]s/images/$a.tar >/dev/null; done`,
		guestPodsUnit, guestShare, guestPodsSocket))
	t.Logf("a second containerd (runc with the cgroupfs driver) started in the guest, pause and busybox imported, in %v", time.Since(start).Round(100*time.Millisecond))
}

// shellQuote quotes argv for the guest's shell.
func shellQuote(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// checkGuestMesosTask runs the node image as the Mesos Docker containerizer
// runs images/node/marathon.json, in the guest's Docker on its systemd
// cgroup driver: the agent's docker run line (docker_test.go's
// mesosDockerTask, with --privileged and --cgroups_enable_cfs), attached,
// in a unit of the guest's systemd that plays the agent's executor. The
// kubelet runs on the cgroupfs driver against guestPodsContainerd.
// nodeinit finds the task's cgroup, system.slice/docker-<id>.scope, and
// hands it to the kubelet as its cgroup root; nodeinit, the kubelet and
// kube-proxy run below it, and so do the pods; the Node is sized to the
// task's memory and CPU (its v2 memory.max and cpu.max); the agent's kill,
// docker stop -t <the app's grace>, drains the node, and the container
// and the agent's docker run exit 0.
func (c *cluster) checkGuestMesosTask(t *testing.T, v *vm) {
	startGuestPodsContainerd(t, v)
	app := readMarathonNode(t)
	config := strings.NewReplacer("cgroupDriver: systemd", "cgroupDriver: cgroupfs",
		"unix:///run/containerd/containerd.sock", "unix://"+guestPodsSocket).Replace(vmKubeletConfig) + kubeletShutdown
	files := c.writeGuestNodeFiles(t, v, config, staticPod)

	const agentID, frameworkID = "4b3c2d1e-0000-4000-8000-000000000001-S0", "4b3c2d1e-0000-4000-8000-000000000002-0000"
	containerID := "6f1e2d3c-0000-4b5a-9c8d-7e6f5a4b3c2d"
	taskID := "kubernetes_node." + containerID
	sandbox := fmt.Sprintf(guestTaskSandbox, agentID, frameworkID, taskID, containerID)
	task := mesosDockerTask{
		name: "mesos-" + containerID, app: app, sandbox: sandbox, cfs: true,
		env:        map[string]string{"MESOS_TASK_ID": taskID, "MARATHON_APP_ID": app.ID},
		volumes:    appVolumes(t, app, "/etc/kubernetes", func(string) bool { return false }),
		privileged: []string{"--privileged"},
		// The pods' containerd's root, read-only: the eviction manager
		// stats the image file system. Its socket is in /run.
		more: []string{"-v", guestPodsRoot + ":" + guestPodsRoot + ":ro"},
		args: []string{"--graceful-node-shutdown"},
	}
	run := append([]string{"docker"}, task.runArgs(nodeImage)...)
	t.Logf("the agent's docker run: %s", strings.Join(run, " "))
	k := &kubeNode{t: t, c: c, dir: files, started: time.Now()}
	t.Cleanup(func() {
		c.removeGuestNode(t, v, k, fmt.Sprintf("docker rm --force %s; systemctl stop %[2]s; systemctl reset-failed %[2]s; rm -rf /var/lib/mesos; %[3]s rmp --all --force",
			task.name, guestTaskUnit, guestPodsCrictl))
	})
	v.ssh(fmt.Sprintf("set -e; mkdir -p %[1]s; systemd-run --quiet --unit=%[2]s sh -c '%[3]s > %[1]s/stdout 2> %[1]s/stderr; echo $? > %[1]s/exit'",
		sandbox, guestTaskUnit, strings.ReplaceAll(shellQuote(run), "'", `'\''`)))
	guestContainer(k, v, "docker", task.name)
	k.stop = func(time.Duration) int {
		grace := app.TaskKillGracePeriodSeconds
		v.ssh(fmt.Sprintf("docker stop -t %d %s", grace, task.name))
		code, err := strconv.Atoi(strings.TrimSpace(v.ssh("docker inspect --format '{{.State.ExitCode}}' " + task.name)))
		must(t, err)
		return code
	}
	n, took := k.waitGuestReady(5 * time.Minute)
	t.Logf("Node Ready %v after the agent's docker run", took.Round(100*time.Millisecond))

	// The task's scope, found and handed to the kubelet, with nodeinit in
	// its leaf (the kubelet enables the controllers of the scope for its
	// pods, which v2 allows only with no process in it).
	id := strings.TrimSpace(v.ssh("docker inspect --format '{{.Id}}' " + task.name))
	cg := "/system.slice/docker-" + id + ".scope"
	k.waitLog(0, 0, "MESOS_CONTAINER_NAME="+task.name, "a Docker containerizer task, whose cgroup is its engine's: staying in")
	kubelet := strings.TrimSpace(v.ssh("pgrep -x kubelet"))
	if line := strings.ReplaceAll(v.ssh("cat /proc/"+kubelet+"/cmdline"), "\x00", " "); !strings.Contains(line, "--cgroup-root="+cg+" ") {
		t.Errorf("the kubelet runs as %q, without --cgroup-root=%s", line, cg)
	}
	for name, pid := range map[string]string{"nodeinit": strings.TrimSpace(v.ssh("docker inspect --format '{{.State.Pid}}' " + task.name)),
		"the kubelet": kubelet, "kube-proxy": strings.TrimSpace(v.ssh("pgrep -x kube-proxy"))} {
		if in := strings.TrimSpace(v.ssh("cat /proc/" + pid + "/cgroup")); in != "0::"+cg+"/nodeinit" {
			t.Errorf("%s (pid %s in the guest) is in %q; want the leaf %s/nodeinit of the task's scope", name, pid, in, cg)
		}
	}
	k.waitPods("metadata.name=static-sleeper-"+nodeName, 1, 5*time.Minute)
	pid, podCgroup := guestStaticPodCgroup(t, v, guestPodsCrictl)
	if !strings.HasPrefix(podCgroup, cg+"/kubepods/") {
		t.Errorf("the static pod's container (pid %s in the guest) is in %s; want below %s/kubepods", pid, podCgroup, cg)
	}
	t.Logf("the task's scope %s: nodeinit, the kubelet and kube-proxy in its leaf %[1]s/nodeinit, the static pod's container in %s", cg, podCgroup)

	// The task's resources on its scope, as cgroup v2 files, and the Node
	// sized to them.
	limits := strings.Fields(v.ssh(fmt.Sprintf("cd /sys/fs/cgroup%s && cat memory.max cpu.max kubepods/memory.max", cg)))
	memory := int64(app.Mem) << 20
	quota := fmt.Sprint(int64(app.Cpus * float64(mesosCFSPeriod/time.Microsecond)))
	if len(limits) != 4 || limits[0] != fmt.Sprint(memory) || limits[1] != quota || limits[2] != "100000" {
		t.Errorf("the task's scope has memory.max, cpu.max and kubepods' memory.max %q; want %d, %s 100000", limits, memory, quota)
	}
	k.checkTaskSized(n, cg, "memory.max", "cpu.max", memory, int64(app.Cpus*1000))
	if len(limits) == 4 {
		if km, err := strconv.ParseInt(limits[3], 10, 64); err != nil || km > memory {
			t.Errorf("the kubepods cgroup's memory.max is %s; want one within the task's %d", limits[3], memory)
		}
	}
	t.Logf("the task's scope: memory.max %s, cpu.max %s %s; kubepods memory.max %s; the Node's capacity memory %s cpu %s, allocatable memory %s cpu %s",
		limits[0], limits[1], limits[2], limits[3], n.Status.Capacity["memory"], n.Status.Capacity["cpu"], n.Status.Allocatable["memory"], n.Status.Allocatable["cpu"])

	// The agent's kill drains the node.
	k.waitLog(3*time.Minute, 0, `"Took a shutdown delay inhibitor"`, `who="kubelet"`)
	k.create("/api/v1/namespaces/default/pods", "drain", fmt.Sprintf(drainPod, guestDrainDir))
	k.waitPods("metadata.name=drain", 1, 5*time.Minute)
	k.stopAndCheckGuestDrained(v, guestPodsCrictl)
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := v.sshTimeout(time.Minute, "cat "+sandbox+"/exit")
		if err == nil {
			if code := strings.TrimSpace(out); code != "0" {
				t.Errorf("the agent's docker run exited %s, want 0", code)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent's docker run did not end within a minute of its container")
		}
		time.Sleep(2 * time.Second)
	}
}
