// Package e2e runs nodeinit where it is used: as the ENTRYPOINT of the
// images/e2e image in podman (a node container, a Mesos Docker-containerizer
// task) and in runc directly on an OCI bundle, with the project's helper
// programs as executor and proxy. The tests need root, podman and runc; they
// build the binaries and the image themselves, in a private podman store.
package e2e

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/test/testenv"
)

var (
	setupOnce sync.Once
	shared    *engine
	setupErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.teardown()
	}
	testenv.Cleanup()
	os.Exit(code)
}

// start returns the podman environment with the e2e image built, making it
// on first use (the image build is the slow part and all tests share it).
func start(t *testing.T) *engine {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "podman")
	testenv.RequireTool(t, "runc")
	setupOnce.Do(func() {
		// Stays the error if setup ends the first test with t.Fatal.
		setupErr = fmt.Errorf("setting up podman and the e2e image failed in an earlier test")
		shared = &engine{}
		setupErr = shared.setup(t)
	})
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	return shared
}

// The helper programs and the shared record directory, as the container sees them.
const (
	taskPath = "/usr/local/bin/task"
	recDir   = "/rec"
)

// taskNode is the command line (after the image's ENTRYPOINT) of a node whose
// executor and proxy are both the task helper, each reporting and recording
// into /rec. extra goes before "--" (nodeinit flags); execArgs are appended
// to the executor's.
func taskNode(extra []string, execArgs ...string) []string {
	args := append([]string{
		"--shutdown-grace-period=5s",
		"--proxy-path=" + taskPath,
		"--proxy-arg=--record=" + recDir + "/proxy.rec",
		"--proxy-arg=--report=" + recDir + "/proxy.json",
		"--proxy-arg=--ready=" + recDir + "/proxy.ready",
	}, extra...)
	args = append(args, "--", taskPath,
		"--record="+recDir+"/executor.rec",
		"--report="+recDir+"/executor.json",
		"--ready="+recDir+"/executor.ready")
	return append(args, execArgs...)
}

// container is one container of a test, removed when the test ends.
type container struct {
	e    *engine
	name string
	rec  string // host directory mounted at /rec
}

// runDetached starts a container from the e2e image in the background, with
// no network and a fresh /rec. podmanArgs go before the image, cmd after it.
func (e *engine) runDetached(t *testing.T, podmanArgs []string, cmd ...string) *container {
	t.Helper()
	c := &container{e: e, name: "nodeinit-e2e-" + randomID(), rec: t.TempDir()}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("podman logs %s:\n%s", c.name, c.logs(t))
		}
		_, _ = e.podman("rm", "--force", "--time", "0", c.name)
	})
	args := append([]string{"run", "--detach", "--name", c.name, "--network=none", "-v", c.rec + ":" + recDir}, podmanArgs...)
	args = append(append(args, e.image), cmd...)
	e.must(t, args...)
	return c
}

// path is a file of the container's /rec on the host.
func (c *container) path(name string) string { return filepath.Join(c.rec, name) }

// waitFile waits until the container has made /rec/name, and fails at once
// if the container ends first.
func (c *container) waitFile(t *testing.T, name string) {
	t.Helper()
	// `podman wait` prints the exit code when the container ends: its output
	// pipe becoming readable is the event that ends the wait early.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := c.e.command("wait", c.name)
	cmd.Stdout = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	exited := waitFor(t, c.rec, 30*time.Second, "/rec/"+name, int(r.Fd()), func() bool {
		_, err := os.Stat(c.path(name))
		return err == nil
	})
	if exited {
		code, _ := io.ReadAll(r)
		t.Fatalf("the container ended with status %s before it made /rec/%s", strings.TrimSpace(string(code)), name)
	}
}

// logs is `podman logs`: the container's stdout and stderr.
func (c *container) logs(t *testing.T) string {
	t.Helper()
	out, err := c.e.command("logs", c.name).CombinedOutput()
	if err != nil {
		t.Fatalf("podman logs %s: %v\n%s", c.name, err, out)
	}
	return string(out)
}

// hostPID is the container's main process as the host sees it.
func (c *container) hostPID(t *testing.T) int {
	t.Helper()
	pid, err := strconv.Atoi(c.e.inspect(t, c.name, "{{.State.Pid}}"))
	if err != nil || pid <= 0 {
		t.Fatalf("podman inspect %s: no main process pid (%q)", c.name, c.e.inspect(t, c.name, "{{.State.Pid}}"))
	}
	return pid
}

// waitFor waits, woken by inotify events in dir, until done reports true,
// and returns false; or returns true as soon as the file descriptor stop (if
// not -1) becomes readable. The files the containers write are the events the
// tests wait on, so nothing here polls on a timer.
func waitFor(t *testing.T, dir string, timeout time.Duration, what string, stop int, done func() bool) bool {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatalf("inotify: %v", err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_MODIFY|unix.IN_CLOSE_WRITE); err != nil {
		t.Fatalf("inotify watch %s: %v", dir, err)
	}
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 64<<10)
	for !done() {
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if stop >= 0 {
			fds = append(fds, unix.PollFd{Fd: int32(stop), Events: unix.POLLIN})
		}
		if _, err := unix.Poll(fds, int(left/time.Millisecond)+1); err != nil && err != unix.EINTR {
			t.Fatalf("poll inotify: %v", err)
		}
		if len(fds) > 1 && fds[1].Revents != 0 && !done() {
			return true
		}
		_, _ = unix.Read(fd, buf) // drain; done() looks at the files themselves
	}
	return false
}

// signalTimes returns when each signal named sig was recorded in a task's
// --record file, in order.
func signalTimes(t *testing.T, path, sig string) []int64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read signal record: %v", err)
	}
	var times []int64
	for line := range strings.Lines(string(data)) {
		name, at, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || name != sig {
			continue
		}
		n, err := strconv.ParseInt(at, 10, 64)
		if err != nil {
			t.Fatalf("%s: bad line %q", path, line)
		}
		times = append(times, n)
	}
	return times
}

// recorded reports whether the task's --record file holds sig.
func recorded(path, sig string) bool {
	data, _ := os.ReadFile(path)
	for line := range strings.Lines(string(data)) {
		if strings.HasPrefix(line, sig+" ") {
			return true
		}
	}
	return false
}

// pidNamespaceMembers lists the host pids of every process in the pid
// namespace of hostPID, with the state letter of each (R, S, Z, ...).
func pidNamespaceMembers(t *testing.T, hostPID int) map[int]string {
	t.Helper()
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", hostPID))
	if err != nil {
		t.Fatalf("pid namespace of %d: %v", hostPID, err)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	members := map[int]string{}
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		if link, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err != nil || link != ns {
			continue // gone, a kernel thread, or another namespace
		}
		if state := procState(pid); state != "" {
			members[pid] = state
		}
	}
	return members
}

// procState is the state letter of /proc/PID/stat, or "" if the process is gone.
func procState(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The command name is in parentheses and may hold spaces: the state follows the last ")".
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 || i+2 >= len(data) {
		return ""
	}
	return string(data[i+2])
}

// nsPID is the pid of a host process inside its own (innermost) pid namespace.
func nsPID(t *testing.T, hostPID int) int {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", hostPID))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(rest)
			n, _ := strconv.Atoi(f[len(f)-1])
			return n
		}
	}
	t.Fatalf("no NSpid in /proc/%d/status", hostPID)
	return 0
}
