// Package faults runs the built nodeinit against cgroup faults a node meets
// in the field — a read-only cgroupfs, a cgroup removed before nodeinit joins
// it, a v2 cgroup that hands controllers to its children — and checks the
// documented choice: a warning naming the cgroup and nodeinit carrying on,
// or with --require-cgroup exit 1 and one line saying why. nodeinit runs as
// PID 1 of a new pid and mount namespace (unshare), so a read-only remount
// of a cgroup hierarchy stays inside the test.
package faults

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	occgroups "github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/cgroups"
	"github.com/nodeinit/nodeinit/test/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}

// taskReport is the part of the task helper's --report the tests read.
type taskReport struct {
	Cgroup string `json:"cgroup"`
}

// node is one nodeinit running as PID 1 of new pid and mount namespaces.
type node struct {
	t       *testing.T
	dir     string // reports, ready files and nodeinit's log
	unshare *exec.Cmd
	done    chan struct{}
	err     error
}

// readOnlyThenExec remounts each argument before "--" read-only (a bind
// remount: it changes only this namespace's mount, not the hierarchy), then
// runs the command after "--".
const readOnlyThenExec = `while [ "$1" != -- ]; do mount -o remount,bind,ro "$1" || exit 99; shift; done; shift; exec "$@"`

// startNode runs nodeinit with flags and env as PID 1 of new pid and mount
// namespaces, after remounting the mount points readOnly read-only there,
// with the task helper as executor and proxy.
func startNode(t *testing.T, readOnly, env []string, flags ...string) *node {
	t.Helper()
	testenv.RequireRoot(t)
	unshare := testenv.RequireTool(t, "unshare")
	nodeinit := testenv.Build(t, "./cmd/nodeinit")
	task := testenv.Build(t, "./test/helpers/task")
	n := &node{t: t, dir: t.TempDir(), done: make(chan struct{})}

	// unshare --mount-proc makes a mount namespace of private mounts, so
	// the remount cannot reach the host.
	args := []string{"--pid", "--fork", "--mount-proc", "--", "/bin/sh", "-c", readOnlyThenExec, "sh"}
	args = append(args, readOnly...)
	args = append(args, "--", nodeinit,
		"--proxy-path="+task,
		"--proxy-arg=--report="+n.path("proxy.json"),
		"--proxy-arg=--ready="+n.path("proxy.ready"))
	args = append(args, flags...)
	// "node" ends the task's own flags: what nodeinit appends for the
	// kubelet (--cgroup-root) lands in its arguments.
	args = append(args, "--", task, "--report="+n.path("executor.json"), "--ready="+n.path("executor.ready"), "node")
	n.unshare = exec.Command(unshare, args...)
	n.unshare.Env = append(os.Environ(), env...)
	log, err := os.Create(n.path("nodeinit.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	n.unshare.Stdout, n.unshare.Stderr = log, log
	if err := n.unshare.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		n.err = n.unshare.Wait()
		close(n.done)
	}()
	t.Cleanup(func() {
		select {
		case <-n.done:
			return
		default:
		}
		if pid, ok := n.nodeinitPid(); ok {
			_ = syscall.Kill(pid, syscall.SIGTERM)
		}
		select {
		case <-n.done:
		case <-time.After(15 * time.Second):
			_ = n.unshare.Process.Kill()
			<-n.done
		}
		t.Logf("nodeinit log:\n%s", n.log())
	})
	return n
}

func (n *node) path(name string) string { return filepath.Join(n.dir, name) }

func (n *node) log() string {
	b, _ := os.ReadFile(n.path("nodeinit.log"))
	return string(b)
}

// nodeinitPid is nodeinit's pid as the test sees it: unshare's child (the
// shell execs nodeinit).
func (n *node) nodeinitPid() (int, bool) {
	p := n.unshare.Process.Pid
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", p, p))
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 1 {
		return 0, false
	}
	pid, err := strconv.Atoi(f[0])
	return pid, err == nil
}

// waitReady waits until the executor and the proxy are ready and returns
// the executor's report.
func (n *node) waitReady() taskReport {
	n.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !exists(n.path("executor.ready")) || !exists(n.path("proxy.ready")) {
		select {
		case <-n.done:
			n.t.Fatalf("nodeinit ended (%v) before the executor and the proxy were ready; log:\n%s", n.err, n.log())
		default:
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("executor and proxy not ready after 20s; log:\n%s", n.log())
		}
		time.Sleep(10 * time.Millisecond)
	}
	b, err := os.ReadFile(n.path("executor.json"))
	if err != nil {
		n.t.Fatal(err)
	}
	var r taskReport
	if err := json.Unmarshal(b, &r); err != nil {
		n.t.Fatalf("executor report: %v", err)
	}
	return r
}

// stop sends TERM to nodeinit and returns its exit code.
func (n *node) stop() int {
	n.t.Helper()
	pid, ok := n.nodeinitPid()
	if !ok {
		n.t.Fatal("nodeinit's pid not found")
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		n.t.Fatal(err)
	}
	return n.wait()
}

// wait waits for nodeinit (and so unshare) to exit and returns the code.
func (n *node) wait() int {
	n.t.Helper()
	select {
	case <-n.done:
	case <-time.After(20 * time.Second):
		n.t.Fatalf("nodeinit still running after 20s; log:\n%s", n.log())
	}
	var ee *exec.ExitError
	if errors.As(n.err, &ee) {
		return ee.ExitCode()
	}
	if n.err != nil {
		n.t.Fatal(n.err)
	}
	return 0
}

// lines returns the lines of nodeinit's log at klog severity sev (I, W, E)
// that contain every one of words.
func (n *node) lines(sev byte, words ...string) []string {
	var out []string
	for l := range strings.SplitSeq(n.log(), "\n") {
		if len(l) == 0 || l[0] != sev {
			continue
		}
		if !slices.ContainsFunc(words, func(w string) bool { return !strings.Contains(l, w) }) {
			out = append(out, l)
		}
	}
	return out
}

// expectRunning checks that nodeinit carried on: executor and proxy run,
// the executor in no hierarchy's target, and TERM ends nodeinit with the
// executor's 0.
func (n *node) expectRunning(target string) {
	n.t.Helper()
	r := n.waitReady()
	for ctrl, cg := range cgroupLines(r.Cgroup) {
		if cg == target {
			n.t.Errorf("executor in %s in hierarchy %q, although joining it failed", cg, ctrl)
		}
	}
	if code := n.stop(); code != 0 {
		n.t.Errorf("nodeinit exited %d after TERM, want the executor's 0; log:\n%s", code, n.log())
	}
}

// expectFatal checks that nodeinit exited 1 before starting anything, with
// exactly one error line, which holds every one of words.
func (n *node) expectFatal(words ...string) {
	n.t.Helper()
	if code := n.wait(); code != 1 {
		n.t.Errorf("nodeinit exited %d, want 1; log:\n%s", code, n.log())
	}
	if exists(n.path("executor.json")) || exists(n.path("proxy.json")) {
		n.t.Error("a task started although the cgroup is required")
	}
	all, named := n.lines('E'), n.lines('E', words...)
	if len(all) != 1 || len(named) != 1 {
		n.t.Errorf("want one error line naming %q, got %d error lines; log:\n%s", words, len(all), n.log())
	}
}

// layout reads the host's cgroup hierarchies; it needs at least one.
func layout(t *testing.T) cgroups.Layout {
	t.Helper()
	l, err := cgroups.ReadLayout("/")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Require(t, l.Mode() != cgroups.NoCgroups, "a mounted cgroup filesystem")
	return l
}

// container is the cgroup of a Mesos container made for one test,
// /<prefix>/<id>, under a prefix of its own (nodeinit gets it as
// --mesos-cgroup-prefix): tests that run at the same time, in this package
// or another, never share a parent that one of them removes.
type container struct {
	prefix, id string
	cgroup     string            // /<prefix>/<id>
	dirs       map[string]string // its directory in each hierarchy, by name
}

// prefixFlag is nodeinit's flag for the container's prefix.
func (c container) prefixFlag() string { return "--mesos-cgroup-prefix=" + c.prefix }

// newContainer creates a container's cgroup in every hierarchy of l, as the
// Mesos agent would, and removes it when the test ends (after nodeinit,
// whose cleanup the test registers later and so runs first), with the v2
// leaf nodeinit may have made in it.
func newContainer(t *testing.T, l cgroups.Layout) container {
	t.Helper()
	id := randomID(t)
	c := container{prefix: "mesos-" + id, id: id, dirs: map[string]string{}}
	c.cgroup = "/" + c.prefix + "/" + id
	for _, h := range l.Hierarchies {
		var created []string
		for _, cg := range []string{"/" + c.prefix, c.cgroup} {
			dir, ok := h.Dir("/", cg)
			if !ok {
				t.Fatalf("the %s hierarchy does not reach %s", h.Name(), cg)
			}
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			created = append(created, dir)
			c.dirs[h.Name()] = dir
			if slices.Contains(h.Controllers, "cpuset") { // no process may join a cpuset without cpus and mems
				for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
					v, err := os.ReadFile(filepath.Join(filepath.Dir(dir), f))
					if err == nil {
						err = os.WriteFile(filepath.Join(dir, f), v, 0o644)
					}
					if err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		t.Cleanup(func() {
			for i := len(created) - 1; i >= 0; i-- {
				removeCgroup(t, created[i])
			}
		})
	}
	return c
}

// removeCgroup removes a cgroup directory the test made, with its children
// (the v2 leaf). The processes that were in it may take a moment to be gone
// after their nodeinit exited: EBUSY is retried for a while.
func removeCgroup(t *testing.T, dir string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			removeCgroup(t, filepath.Join(dir, e.Name()))
		}
	}
	var err error
	for range 100 {
		err = unix.Rmdir(dir)
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil && !errors.Is(err, unix.ENOENT) {
		t.Errorf("remove cgroup %s: %v", dir, err)
	}
}

// enableController makes ctrl available to the children of the v2 cgroup
// at dir, and takes it back at the end when it was off (the kernel refuses
// while another user's children still use it, which is fine).
func enableController(t *testing.T, dir, ctrl string) {
	t.Helper()
	before, err := occgroups.ReadFile(dir, "cgroup.subtree_control")
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(strings.Fields(before), ctrl) {
		return
	}
	if err := occgroups.WriteFile(dir, "cgroup.subtree_control", "+"+ctrl); err != nil {
		t.Fatalf("enable %s below %s: %v", ctrl, dir, err)
	}
	t.Cleanup(func() { _ = occgroups.WriteFile(dir, "cgroup.subtree_control", "-"+ctrl) })
}

// cgroupLines maps each hierarchy's controller list ("" for unified) to the
// cgroup in a /proc/<pid>/cgroup text.
func cgroupLines(text string) map[string]string {
	out := map[string]string{}
	for l := range strings.SplitSeq(strings.TrimSpace(text), "\n") {
		if parts := strings.SplitN(l, ":", 3); len(parts) == 3 {
			out[parts[1]] = parts[2]
		}
	}
	return out
}

// inHierarchy returns the cgroup of hierarchy h in a /proc/<pid>/cgroup text.
func inHierarchy(text string, h cgroups.Hierarchy) string {
	for ctrls, cg := range cgroupLines(text) {
		if h.Unified && ctrls == "" || !h.Unified && slices.Contains(strings.Split(ctrls, ","), h.Controllers[0]) {
			return cg
		}
	}
	return ""
}

func randomID(t *testing.T) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "faults-" + hex.EncodeToString(b)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
