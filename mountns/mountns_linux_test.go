package mountns

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// helperEnv selects what the test binary does when a test starts it again as
// a helper process instead of running tests.
const helperEnv = "NODEINIT_MOUNTNS_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "enter":
		os.Exit(enterHelper(os.Stdin, os.Stdout))
	case "rshared":
		os.Exit(rsharedHelper(os.Stdout))
	case "own":
		ns, _ := Current()
		fmt.Printf("own=%v ns=%s\n", Own(), ns)
		os.Exit(0)
	default:
		fmt.Fprintf(os.Stderr, "unknown helper %q\n", os.Getenv(helperEnv))
		os.Exit(3)
	}
}

// enterHelper reports its pid and mount namespace, calls Enter (which
// re-executes this same helper), reports again, and then answers commands
// from the test one line at a time:
//
//	mounted PATH  -> "yes" or "no": is PATH a mount point here?
//	mount PATH    -> "ok": mount a tmpfs at PATH
//	child-env     -> the environment of a child process, ";"-separated
func enterHelper(in io.Reader, out io.Writer) int {
	ns, _ := Current()
	if _, again := os.LookupEnv(MarkerEnv); !again {
		fmt.Fprintf(out, "pre %d %s\n", os.Getpid(), ns)
	}
	if err := Enter(nil); err != nil {
		fmt.Fprintf(out, "error %v\n", err)
		return 1
	}
	ns, _ = Current()
	_, marked := os.LookupEnv(MarkerEnv)
	fmt.Fprintf(out, "post %d %s private=%v marker=%v\n", os.Getpid(), ns, InPrivate(), marked)
	s := bufio.NewScanner(in)
	for s.Scan() {
		cmd, arg, _ := strings.Cut(s.Text(), " ")
		switch cmd {
		case "mounted":
			ok, err := isMountpoint(arg)
			if err != nil {
				fmt.Fprintf(out, "error %v\n", err)
				continue
			}
			fmt.Fprintln(out, map[bool]string{true: "yes", false: "no"}[ok])
		case "mount":
			if err := os.MkdirAll(arg, 0o755); err != nil {
				fmt.Fprintf(out, "error %v\n", err)
				continue
			}
			if err := unix.Mount("inside", arg, "tmpfs", 0, "size=64k"); err != nil {
				fmt.Fprintf(out, "error mount %s: %v\n", arg, err)
				continue
			}
			fmt.Fprintln(out, "ok")
		case "child-env":
			env, err := exec.Command("/usr/bin/env").Output()
			if err != nil {
				fmt.Fprintf(out, "error %v\n", err)
				continue
			}
			fmt.Fprintln(out, strings.ReplaceAll(strings.TrimSpace(string(env)), "\n", ";"))
		default:
			fmt.Fprintf(out, "error unknown command %q\n", cmd)
		}
	}
	return 0
}

// rsharedHelper runs inside "unshare -m" (which makes every mount private)
// and reports the propagation of / before and after MakeRShared.
func rsharedHelper(out io.Writer) int {
	before, err := rootPropagation()
	if err != nil {
		fmt.Fprintf(out, "error %v\n", err)
		return 1
	}
	if err := MakeRShared(); err != nil {
		fmt.Fprintf(out, "error %v\n", err)
		return 1
	}
	after, err := rootPropagation()
	if err != nil {
		fmt.Fprintf(out, "error %v\n", err)
		return 1
	}
	fmt.Fprintf(out, "before=%s after=%s\n", before, after)
	return 0
}

func rootPropagation() (string, error) {
	// Every mount on /, not SingleEntryFilter's first: a later one hides
	// the earlier ones.
	mounts, err := mountinfo.GetMounts(func(m *mountinfo.Info) (bool, bool) { return m.Mountpoint != "/", false })
	if err != nil {
		return "", err
	}
	if len(mounts) == 0 {
		return "", fmt.Errorf("no mount on / in /proc/self/mountinfo")
	}
	// The last mount on / is the visible one.
	return strings.ReplaceAll(mounts[len(mounts)-1].Optional, " ", ",") + ";", nil
}

func isMountpoint(path string) (bool, error) {
	mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(path))
	return len(mounts) > 0, err
}

// helper is a running enterHelper the test talks to.
type helper struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	lines  *bufio.Scanner
	exited bool
}

// finish closes the helper's input, which ends it, and waits for it.
func (h *helper) finish() error {
	if h.exited {
		return nil
	}
	h.exited = true
	h.in.Close()
	return h.cmd.Wait()
}

func startHelper(t *testing.T, mode string, wrap ...string) *helper {
	t.Helper()
	argv := append(wrap, os.Args[0], "-test.run=^$")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{cmd: cmd, in: in, lines: bufio.NewScanner(out)}
	t.Cleanup(func() {
		if err := h.finish(); err != nil {
			t.Errorf("helper %s: %v", mode, err)
		}
	})
	return h
}

func (h *helper) line(t *testing.T) string {
	t.Helper()
	if !h.lines.Scan() {
		t.Fatalf("helper ended early: %v", h.lines.Err())
	}
	l := h.lines.Text()
	if strings.HasPrefix(l, "error ") {
		t.Fatalf("helper: %s", l)
	}
	return l
}

func (h *helper) ask(t *testing.T, cmd string) string {
	t.Helper()
	if _, err := fmt.Fprintln(h.in, cmd); err != nil {
		t.Fatal(err)
	}
	return h.line(t)
}

// sharedTmpfs mounts a tmpfs at a new temporary directory and makes it
// rshared, so that mounts below it propagate to its slaves.
func sharedTmpfs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("nodeinit-test", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatalf("mount tmpfs at %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	if err := unix.Mount("", dir, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		t.Fatalf("make %s rshared: %v", dir, err)
	}
	return dir
}

func TestEnterMovesTheProcessIntoASlaveMountNamespace(t *testing.T) {
	testenv.RequireRoot(t)
	shared := sharedTmpfs(t)
	hostNS, err := Current()
	if err != nil {
		t.Fatal(err)
	}

	h := startHelper(t, "enter")
	var prePid, postPid int
	var preNS, postNS, rest string
	if _, err := fmt.Sscanf(h.line(t), "pre %d %s", &prePid, &preNS); err != nil {
		t.Fatal(err)
	}
	post := h.line(t)
	if _, err := fmt.Sscanf(post, "post %d %s", &postPid, &postNS); err != nil {
		t.Fatalf("%q: %v", post, err)
	}
	rest = post[strings.LastIndex(post, "]")+1:]

	if preNS != hostNS {
		t.Errorf("before Enter the helper was in %s, the test in %s", preNS, hostNS)
	}
	if postNS == hostNS {
		t.Errorf("after Enter the helper is still in the test's mount namespace %s", hostNS)
	}
	if prePid != postPid || postPid != h.cmd.Process.Pid {
		t.Errorf("pid changed across the re-exec: %d before, %d after, started as %d", prePid, postPid, h.cmd.Process.Pid)
	}
	if strings.TrimSpace(rest) != "private=true marker=false" {
		t.Errorf("after Enter: %q, want private=true and no marker in the environment", rest)
	}
	if env := h.ask(t, "child-env"); strings.Contains(env, MarkerEnv) {
		t.Errorf("a child of the re-executed process sees the marker: %s", env)
	} else if !strings.Contains(env, helperEnv+"=enter") {
		t.Errorf("the child's environment lost the variables it should inherit: %s", env)
	}

	// A host mount made after the namespace exists propagates in.
	after := filepath.Join(shared, "after-start")
	if err := os.Mkdir(after, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := h.ask(t, "mounted "+after); got != "no" {
		t.Fatalf("%s is a mount point inside before it was mounted: %s", after, got)
	}
	if err := unix.Mount("host", after, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(after, unix.MNT_DETACH)
	if got := h.ask(t, "mounted "+after); got != "yes" {
		t.Errorf("a host mount at %s made after Enter did not propagate into the namespace", after)
	}

	// A mount made inside does not leak out, even below a shared host mount.
	inside := filepath.Join(shared, "inside")
	if got := h.ask(t, "mount "+inside); got != "ok" {
		t.Fatal(got)
	}
	if got := h.ask(t, "mounted "+inside); got != "yes" {
		t.Fatalf("the helper's own mount at %s is not visible to it", inside)
	}
	if leaked, err := isMountpoint(inside); err != nil || leaked {
		t.Errorf("a mount made inside the namespace appeared outside at %s (err %v)", inside, err)
	}
}

func TestEnterWithoutCapSysAdminFailsWithAClearMessage(t *testing.T) {
	testenv.RequireRoot(t)
	setpriv := testenv.RequireTool(t, "setpriv")
	h := startHelper(t, "enter", setpriv, "--bounding-set=-sys_admin", "--inh-caps=-sys_admin", "--")
	if !strings.HasPrefix(h.line(t), "pre ") {
		t.Fatal("helper did not report before Enter")
	}
	if !h.lines.Scan() {
		t.Fatal("helper ended without a word")
	}
	got := h.lines.Text()
	want := "error enter a private mount namespace: unshare: operation not permitted (needs root or CAP_SYS_ADMIN)"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if err := h.finish(); err == nil {
		t.Error("helper exited 0 after a failed Enter")
	}
}

func TestMakeRSharedMarksRootShared(t *testing.T) {
	testenv.RequireRoot(t)
	unshareTool := testenv.RequireTool(t, "unshare")
	h := startHelper(t, "rshared", unshareTool, "--mount", "--propagation=private", "--")
	got := h.line(t)
	var before, after string
	if _, err := fmt.Sscanf(got, "before=%s after=%s", &before, &after); err != nil {
		t.Fatalf("%q: %v", got, err)
	}
	if strings.Contains(before, "shared:") {
		t.Fatalf("/ was already shared before MakeRShared: %s", got)
	}
	group, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(after, "shared:"), ";"))
	if err != nil || group <= 0 {
		t.Errorf("after MakeRShared / shows %q in /proc/self/mountinfo, want shared:N", after)
	}
}

// Own on the real /proc, in a new pid namespace whose PID 1 (a shell) sits
// in a mount namespace of its own, as a host's init does: a process in
// another namespace under it is in its own; one that `nsenter -t 1 -m` put
// back into PID 1's namespace is not, though its parent (a pod's shell) is
// in another. The shells run their commands as children (`; exit`), so
// that PID 1 and the parent stay where they are.
func TestOwnComparesWithPID1sNamespaceNotTheParents(t *testing.T) {
	testenv.RequireRoot(t)
	unshareTool, nsenter := testenv.RequireTool(t, "unshare"), testenv.RequireTool(t, "nsenter")
	pid1 := []string{unshareTool, "--pid", "--fork", "--mount-proc", "--", "/bin/sh", "-c", `"$@"; exit $?`, "sh"}
	pod := []string{unshareTool, "--mount", "--"}
	for _, tc := range []struct {
		name string
		wrap []string
		want string
	}{
		{"PID 1's own namespace", nil, "own=false"},
		{"a namespace of its own under PID 1", pod, "own=true"},
		{"nsenter -t 1 -m from another namespace", append(pod, "/bin/sh", "-c", nsenter+` -t 1 -m -- "$@"; exit $?`, "sh"), "own=false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			argv := append(append(append([]string(nil), pid1...), tc.wrap...), os.Args[0], "-test.run=^$")
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Env = append(os.Environ(), helperEnv+"=own")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v: %v\n%s", argv, err, out)
			}
			if got, _, _ := strings.Cut(strings.TrimSpace(string(out)), " "); got != tc.want {
				t.Errorf("%s; want %s", out, tc.want)
			}
		})
	}
}
