// Package mountcg tests the mount namespace and cgroup preparation of the
// built nodeinit binary, and the cgroup faults a node meets in the field (a
// read-only cgroupfs, a cgroup removed before nodeinit joins it, a v2 cgroup
// that hands controllers to its children): nodeinit runs as PID 1 of new
// pid and mount namespaces (unshare --pid --fork --mount-proc) with the
// project's task helper as executor and proxy, and the tests read where each
// of the three ended up and what nodeinit said.
package mountcg

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

	"github.com/nodeinit/nodeinit/test/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// taskReport is what the task helper writes with --report.
type taskReport struct {
	Pid     int      `json:"pid"`
	Ppid    int      `json:"ppid"`
	MountNS string   `json:"mountns"`
	Cgroup  string   `json:"cgroup"`
	Args    []string `json:"args"`
	Env     []string `json:"env"`
}

// node is one nodeinit running as PID 1 of a new pid namespace.
type node struct {
	t       *testing.T
	dir     string // reports, ready files and nodeinit's log
	unshare *exec.Cmd
	done    chan struct{}
	err     error
}

// startNode runs nodeinit with flags, the task helper as proxy and as
// executor, and env added to the test's environment.
func startNode(t *testing.T, env []string, flags ...string) *node {
	t.Helper()
	return startNodeWith(t, nodeOptions{}, env, flags...)
}

// nodeOptions are the less common ways to start nodeinit.
type nodeOptions struct {
	unshare  []string // more options for unshare
	readOnly []string // mount points remounted read-only in nodeinit's mount namespace first
}

// readOnlyThenExec remounts each argument before "--" read-only (a bind
// remount: it changes only this namespace's mount, not the hierarchy), then
// runs the command after "--".
const readOnlyThenExec = `while [ "$1" != -- ]; do mount -o remount,bind,ro "$1" || exit 99; shift; done; shift; exec "$@"`

// startNodeWith is startNode with options.
func startNodeWith(t *testing.T, o nodeOptions, env []string, flags ...string) *node {
	t.Helper()
	testenv.RequireRoot(t)
	unshare := testenv.RequireTool(t, "unshare")
	nodeinit := testenv.Build(t, "./cmd/nodeinit")
	task := testenv.Build(t, "./test/helpers/task")
	n := &node{t: t, dir: t.TempDir(), done: make(chan struct{})}

	// unshare --mount-proc makes a mount namespace of private mounts, so a
	// read-only remount cannot reach the host.
	args := append([]string{"--pid", "--fork", "--mount-proc"}, o.unshare...)
	args = append(args, "--")
	if len(o.readOnly) > 0 {
		args = append(append(append(args, "/bin/sh", "-c", readOnlyThenExec, "sh"), o.readOnly...), "--")
	}
	args = append(args, nodeinit,
		"--proxy-path="+task,
		"--proxy-arg=--report="+n.path("proxy.json"),
		"--proxy-arg=--ready="+n.path("proxy.ready"))
	args = append(args, flags...)
	// The trailing "node" ends the task's own flags, so that what nodeinit
	// appends for the executor (--cgroup-root) lands in its arguments.
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

// nodeinitPid is nodeinit's pid as the test sees it: unshare's child (a
// shell that remounts first execs nodeinit).
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

// waitReady waits until the executor and the proxy have written their
// reports, and returns them.
func (n *node) waitReady() (executor, proxy taskReport) {
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
	return n.report("executor.json"), n.report("proxy.json")
}

func (n *node) report(name string) taskReport {
	n.t.Helper()
	b, err := os.ReadFile(n.path(name))
	if err != nil {
		n.t.Fatal(err)
	}
	var r taskReport
	if err := json.Unmarshal(b, &r); err != nil {
		n.t.Fatalf("%s: %v", name, err)
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

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func readProc(t *testing.T, pid int, file string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
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

func randomID(t *testing.T) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "mountcg-" + hex.EncodeToString(b)
}

func itoa(i int) string { return strconv.Itoa(i) }
