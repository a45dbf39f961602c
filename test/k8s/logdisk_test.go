//go:build k8s

package k8s

import (
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/test/testenv"
)

const (
	// logDiskSize is the node's log disk: room for what the kubelet writes
	// at --v=4 from its start until the test fills the rest.
	logDiskSize = 32 << 20
	// logDiskRoom is what the test leaves free of it: the kubelet's output
	// fills it within a minute.
	logDiskRoom = 64 << 10
	// fullFor is how long the disk stays full once nodeinit has said so.
	fullFor = 30 * time.Second
	// lossReportEvery is the logfile package's bound on its lines about
	// lost output: one of each kind a minute per task.
	lossReportEvery = time.Minute
)

// Lines nodeinit logs about a task's lost output (package logfile).
const (
	lossStarts  = "Writing a task's output to its log file failed; its output is dropped, and counted, until a write succeeds"
	lossEnds    = "Writing a task's output to its log file works again"
	lossAtClose = "Closing a task's log file with output dropped since the last report"
)

// TestNodeWithAFullLogDisk runs a node with --log-dir on a small tmpfs and
// the kubelet at --v=4, fills the disk but for logDiskRoom and lets the
// kubelet's output fill the rest. While the disk is full: the Node stays
// Ready and the Service answers, nodeinit answers USR1 with its status
// and reaps orphans in its pid namespace, a new pod runs and is Ready, and
// nodeinit says once that the kubelet's output is lost, not once per
// write. Once the test frees the disk, the kubelet's lines are in its file
// again and nodeinit says how much was lost. TERM then ends the node with
// 0, and nothing of it runs on.
func TestNodeWithAFullLogDisk(t *testing.T) {
	c := getCluster(t)
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	must(t, os.Mkdir(logs, 0o755))
	// Mounted before the node starts, unmounted after it has ended (the
	// clean-ups run last first).
	must(t, unix.Mount("tmpfs", logs, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0755", logDiskSize)))
	t.Cleanup(func() {
		if err := unix.Unmount(logs, 0); err != nil {
			t.Errorf("unmount the log disk: %v", err)
		}
	})
	spec := nodeSpec{kubeletArgs: []string{"--v=4"}}
	c.writeNodeFiles(t, dir, dir, spec)
	k := c.launchNodeWith(t, dir, testenv.Options{}, c.nodeArgs(dir, spec)...)
	pods := k.checkRunningNode("iptables")
	ip := k.clusterIP()
	h, m, before, tasks := k.watchFault(ip)

	// The disk filled but for logDiskRoom; the kubelet's output takes the
	// rest.
	executorLog := filepath.Join(logs, "executor.log")
	written := fileSize(t, executorLog)
	filler := filepath.Join(logs, "filler")
	room := fillDisk(t, logs, filler, logDiskRoom)
	filled := time.Now()
	t.Logf("the log disk (%d MiB tmpfs) filled but for %d KiB, %v after nodeinit's start; the kubelet had written %d KiB",
		logDiskSize>>20, room>>10, filled.Sub(k.started).Round(time.Second), written>>10)
	full := k.waitLog(3*time.Minute, timeOfDay(filled), `"`+lossStarts+`"`, `task="executor"`)
	fullAt := clock(full.at)
	t.Logf("nodeinit said the kubelet's output is lost %v after the fill: %s", fullAt.Sub(filled).Round(time.Millisecond), full.text)
	if !strings.Contains(full.text, "no space left on device") {
		t.Errorf("the loss is not the full disk's: %s", full.text)
	}
	t.Logf("the log disk has %d bytes free", freeBytes(t, logs))

	// The node while the disk is full.
	k.checkStatus()
	k.checkReapsOrphans()
	h.checkWorkload(before, "with the log disk full")
	created := time.Now()
	k.create("/api/v1/namespaces/default/pods", "ready-probe", readyProbePod)
	k.waitPods("metadata.name=ready-probe", 1, 2*time.Minute)
	t.Logf("a pod created with the log disk full was Running and Ready %v later", time.Since(created).Round(time.Millisecond))
	time.Sleep(time.Until(fullAt.Add(fullFor)))
	if free := freeBytes(t, logs); free >= logDiskRoom/2 {
		t.Errorf("the log disk has %d bytes free after %v; want it full", free, fullFor)
	}

	// The disk freed: the kubelet's lines reach its file again, and
	// nodeinit says how much was lost.
	size := fileSize(t, executorLog)
	must(t, os.Remove(filler))
	freed := time.Now()
	var first string
	testenv.WaitFor(t, 30*time.Second, "a line of the kubelet's written after the disk was freed", func() bool {
		first = kubeletLineAfter(t, executorLog, size, timeOfDay(freed))
		return first != ""
	})
	back := time.Now()
	t.Logf("the kubelet's lines reached its file %v after the disk was freed: %.120s", back.Sub(freed).Round(time.Millisecond), first)
	ends := k.waitLog(30*time.Second, timeOfDay(freed), `"`+lossEnds+`"`, `task="executor"`)
	t.Logf("nodeinit said the kubelet's output is written again %v after the disk was freed: %s", clock(ends.at).Sub(freed).Round(time.Millisecond), ends.text)
	k.checkLossLines(filled, freed)

	m.stop()
	m.reportRequests(t)
	if notReady := m.notReady(t); notReady > 0 {
		t.Errorf("the Node was not Ready for %v with the log disk full", notReady)
	}
	k.checkService(ip, pods, 30*time.Second)
	if now := k.children(); !maps.Equal(now, tasks) {
		t.Errorf("nodeinit's children are %v; before the disk filled they were %v", now, tasks)
	}

	// TERM: the node ends with 0, and nothing of it runs on.
	s := k.stopAndCheck(90 * time.Second)
	t.Logf("TERM: %v", s)
	if s.code != 0 {
		t.Errorf("nodeinit exited %d on TERM; want 0", s.code)
	}
	for _, l := range nodeinitLines(k.log()) {
		if strings.Contains(l.text, `"`+lossAtClose+`"`) {
			t.Logf("%s", l.text)
		}
	}
	_, all := k.lineAfter(k.log(), "All processes have ended", 0)
	t.Logf("%s", all)
	reaped := 0
	if m := regexp.MustCompile(`orphansReaped=(\d+)`).FindStringSubmatch(all); m != nil {
		reaped, _ = strconv.Atoi(m[1])
	}
	if reaped < orphans {
		t.Errorf("nodeinit reaped fewer orphans than the %d the test made: %s", orphans, all)
	}
	for name, pid := range tasks {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			t.Errorf("%s (pid %d) still runs after nodeinit's exit", name, pid)
		}
	}
	for _, name := range []string{"kubelet", "kube-proxy"} {
		if pids := processesNamed(name); len(pids) > 0 {
			t.Errorf("%s runs after nodeinit's exit: %v", name, pids)
		}
	}
}

// readyProbePod is Ready once its exec probe has passed.
const readyProbePod = `apiVersion: v1
kind: Pod
metadata: {name: ready-probe, namespace: default}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: ` + busyboxImage + `
    imagePullPolicy: Never
    command: [sleep, "1000000"]
    readinessProbe:
      exec: {command: ["true"]}
      periodSeconds: 1
`

// fillDisk fills the file system of dir with the file filler until room
// bytes are free, and returns what is free.
func fillDisk(t *testing.T, dir, filler string, room int64) int64 {
	t.Helper()
	f, err := os.OpenFile(filler, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	must(t, err)
	defer f.Close()
	must(t, unix.Fallocate(int(f.Fd()), 0, 0, freeBytes(t, dir)-room))
	return freeBytes(t, dir)
}

// freeBytes is what the file system of dir has free.
func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var fs unix.Statfs_t
	must(t, unix.Statfs(dir, &fs))
	return int64(fs.Bavail) * fs.Bsize
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	must(t, err)
	return st.Size()
}

// kubeletLineAfter is the first klog line in the file at path, from byte
// offset on, logged at time of day after or later; "" when there is none.
func kubeletLineAfter(t *testing.T, path string, offset int64, after time.Duration) string {
	t.Helper()
	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, offset, 1<<30))
	must(t, err)
	for _, l := range nodeinitLines(string(b)) {
		if l.at >= after {
			return l.text
		}
	}
	return ""
}

// clock is today's time at time of day at.
func clock(at time.Duration) time.Time {
	y, mo, d := time.Now().UTC().Date()
	return time.Date(y, mo, d, 0, 0, 0, 0, time.UTC).Add(at)
}

// checkStatus sends nodeinit USR1 and waits for its status lines: its own
// and the executor's, which must be running.
func (k *kubeNode) checkStatus() {
	k.t.Helper()
	sent := time.Now()
	must(k.t, syscall.Kill(k.pid(), syscall.SIGUSR1))
	k.waitLog(10*time.Second, timeOfDay(sent), `"Init status"`)
	task := k.waitLog(10*time.Second, timeOfDay(sent), `"Task status"`, `task="executor"`)
	k.t.Logf("nodeinit answered USR1 %v after it was sent: %s", clock(task.at).Sub(sent).Round(10*time.Microsecond), task.text)
	if !strings.Contains(task.text, `state="running"`) {
		k.t.Errorf("the executor is not running: %s", task.text)
	}
}

// orphans is how many orphans checkReapsOrphans makes in nodeinit's pid
// namespace, and how long they live.
const (
	orphans     = 10
	orphanSleep = "1.618"
)

// checkReapsOrphans starts a shell in nodeinit's pid namespace that leaves
// orphans behind and exits: nodeinit adopts them, as PID 1, and reaps them
// when they end, leaving no zombie.
func (k *kubeNode) checkReapsOrphans() {
	k.t.Helper()
	pid := k.pid()
	script := fmt.Sprintf("for i in $(seq %d); do sleep %s </dev/null >/dev/null 2>&1 & done", orphans, orphanSleep)
	started := time.Now()
	if _, err := run(10*time.Second, "nsenter", "--target", strconv.Itoa(pid), "--pid", "--", "/bin/sh", "-c", script); err != nil {
		k.t.Fatal(err)
	}
	var adopted []int
	for _, p := range testenv.ProcessesWithArg(orphanSleep) {
		if st, err := testenv.ReadStat(p); err == nil && st.Comm == "sleep" && st.Ppid == pid {
			adopted = append(adopted, p)
		}
	}
	if len(adopted) != orphans {
		k.t.Errorf("nodeinit (pid %d) adopted %d of the %d orphans: %v", pid, len(adopted), orphans, adopted)
	}
	testenv.WaitFor(k.t, 10*time.Second, "the orphans reaped", func() bool {
		for _, p := range adopted {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", p)); err == nil {
				return false
			}
		}
		return len(testenv.Zombies(pid)) == 0
	})
	k.t.Logf("nodeinit adopted %d orphans and had reaped them %v after they were made (they sleep %ss)", len(adopted), time.Since(started).Round(time.Millisecond), orphanSleep)
}

// checkLossLines checks nodeinit's lines about lost output from the fill
// to now: for each task, no two of a kind within lossReportEvery; for the
// kubelet one line when the loss began and one once the disk was freed
// (not when a write fitted in the last page of the full disk), with many
// writes of whole lines counted; it logs them.
func (k *kubeNode) checkLossLines(filled, freed time.Time) {
	k.t.Helper()
	last, kinds := map[string]logLine{}, map[string]int{}
	var lines []string
	var dropped, writes int64
	count := regexp.MustCompile(`droppedLines=(\d+) droppedBytes=(\d+) droppedWrites=(\d+)`)
	for _, l := range nodeinitLines(k.log()) {
		if l.at < timeOfDay(filled) {
			continue
		}
		kind := ""
		for _, msg := range []string{lossStarts, lossEnds} {
			if strings.Contains(l.text, `"`+msg+`"`) {
				kind = msg
			}
		}
		if kind == "" {
			continue
		}
		task := regexp.MustCompile(`task="([^"]*)"`).FindStringSubmatch(l.text)
		if task == nil {
			k.t.Errorf("no task in %s", l.text)
			continue
		}
		key := task[1] + " " + kind
		if was, ok := last[key]; ok && l.at-was.at < lossReportEvery {
			k.t.Errorf("two lines of a kind %v apart, within %v:\n%s\n%s", l.at-was.at, lossReportEvery, was.text, l.text)
		}
		last[key] = l
		kinds[key]++
		when := "while full"
		if l.at >= timeOfDay(freed) {
			when = "once freed"
		}
		lines = append(lines, fmt.Sprintf("  +%v (%s) %s", clock(l.at).Sub(filled).Round(time.Millisecond), when, l.text))
		if m := count.FindStringSubmatch(l.text); m != nil && task[1] == "executor" {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			w, _ := strconv.ParseInt(m[3], 10, 64)
			dropped, writes = dropped+n, writes+w
		}
	}
	k.t.Logf("nodeinit's lines about lost output from the fill on, %d in all:\n%s", len(lines), strings.Join(lines, "\n"))
	if starts, ends := kinds["executor "+lossStarts], kinds["executor "+lossEnds]; starts != 1 || ends != 1 || last["executor "+lossEnds].at < timeOfDay(freed) {
		k.t.Errorf("nodeinit logged the kubelet's loss %d times and its end %d times, the last %v before the disk was freed; want once each, the end after",
			starts, ends, timeOfDay(freed)-last["executor "+lossEnds].at)
	}
	k.t.Logf("the kubelet's output dropped as reported: %d lines in %d writes", dropped, writes)
	if writes < 10 || dropped < writes {
		k.t.Errorf("%d lines in %d writes of the kubelet's reported dropped; want many writes, each of whole lines", dropped, writes)
	}
}
