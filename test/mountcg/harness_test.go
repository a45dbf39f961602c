// Package mountcg tests the mount namespace and cgroup preparation of the
// built nodeinit binary, and the cgroup faults a node meets in the field (a
// read-only cgroupfs, a cgroup removed before nodeinit joins it, a v2 cgroup
// that hands controllers to its children, a private cgroup namespace with
// the host's tree or its own mounted): nodeinit runs as PID 1 of new
// pid and mount namespaces (unshare --pid --fork --mount-proc) with the
// project's task helper as executor and proxy, and the tests read where each
// of the three ended up and what nodeinit said.
package mountcg

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeinit/nodeinit/cgroups"
	"github.com/nodeinit/nodeinit/test/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// requireLayout skips the test, saying what it needs, when the host's
// cgroup layout lacks it: a v1 hierarchy on a cgroup v2 host, a controller
// in the unified hierarchy on a host that binds them all to v1. Unlike a
// missing tool or root, no package adds that: the kernel's boot options
// choose where the controllers are, so CI skips too.
func requireLayout(t *testing.T, l cgroups.Layout, ok bool, what string) {
	t.Helper()
	if !ok {
		t.Skipf("skipped: needs %s, and this host has %s", what, l.Mode())
	}
}

// node is one nodeinit running as PID 1 of new pid and mount namespaces,
// with the task helper as executor and proxy.
type node struct {
	*testenv.Node
	t *testing.T
}

// startNode runs nodeinit with flags, the task helper as proxy and as
// executor, and env added to the test's environment.
func startNode(t *testing.T, env []string, flags ...string) *node {
	t.Helper()
	return startNodeWith(t, nodeOptions{}, env, flags...)
}

// nodeOptions are the less common ways to start nodeinit.
type nodeOptions struct {
	propagation string   // unshare's --propagation for the new mount namespace
	readOnly    []string // mount points remounted read-only in nodeinit's mount namespace first
	// executorArgs go after the executor's own (as positional arguments
	// of the task helper, which records them).
	executorArgs []string
	// cgroups are cgroup directories nodeinit starts in, as a container
	// runtime starts a container's first process in the container's
	// cgroups: a shell moves itself into each, then execs nodeinit.
	cgroups []string
	// prefix runs first, inside the new namespaces, and execs the rest
	// of its arguments (nodeinit and its own), keeping the pid.
	prefix []string
}

// startInCgroups is the shell that moves itself into the cgroup directories
// before "--" and execs the command after it.
const startInCgroups = `while [ "$1" != -- ]; do echo 0 > "$1/cgroup.procs" || exit 99; shift; done; shift; exec "$@"`

// startNodeWith is startNode with options.
func startNodeWith(t *testing.T, o nodeOptions, env []string, flags ...string) *node {
	t.Helper()
	task := testenv.Build(t, "./test/helpers/task")
	dir := t.TempDir()
	path := func(name string) string { return filepath.Join(dir, name) }
	args := append([]string{"--proxy-path=" + task,
		"--proxy-arg=--report=" + path("proxy.json"),
		"--proxy-arg=--ready=" + path("proxy.ready")}, flags...)
	// The trailing "node" ends the task's own flags, so that what nodeinit
	// appends for the executor (--cgroup-root) lands in its arguments.
	args = append(append(args, "--", task, "--report="+path("executor.json"), "--ready="+path("executor.ready"), "node"), o.executorArgs...)
	bin := testenv.Build(t, "./cmd/nodeinit")
	if len(o.cgroups) > 0 {
		args = append(append(append([]string{"-c", startInCgroups, "sh"}, o.cgroups...), "--", bin), args...)
		bin = "/bin/sh"
	}
	return &node{t: t, Node: testenv.Launch(t, testenv.Options{
		MountNS: true, Propagation: o.propagation, ReadOnly: o.readOnly, Env: env, Dir: dir, Prefix: o.prefix,
		// unshare --mount-proc makes a mount namespace of private mounts,
		// so a read-only remount cannot reach the host.
		Binary: bin,
	}, args...)}
}

// waitReady waits until the executor and the proxy have written their
// reports, and returns them.
func (n *node) waitReady() (executor, proxy testenv.Report) {
	n.t.Helper()
	return n.Report("executor.json"), n.Report("proxy.json")
}

// stop sends TERM to nodeinit and returns its exit code.
func (n *node) stop() int {
	n.t.Helper()
	return n.Stop(20 * time.Second)
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

// cgroupWarnings are nodeinit's warnings but the one that it cannot lower
// its OOM score, which every run on a machine without CAP_SYS_RESOURCE
// has: these tests count the warnings about cgroups.
func (n *node) cgroupWarnings() []string {
	var out []string
	for _, w := range n.Lines('W') {
		if !strings.Contains(w, "nodeinit's OOM score adjustment stays at") {
			out = append(out, w)
		}
	}
	return out
}
