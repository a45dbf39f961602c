package proctree

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParentPid(t *testing.T) {
	for _, tc := range []struct {
		stat    string
		want    int
		wantErr bool
	}{
		{"42 (kubelet) S 1 42 42 0 -1", 1, false},
		{"43 (a) b) c) R 42 43 43 0 -1", 42, false},
		{"44 (sp ace) Z 7 1 1", 7, false},
		{"45 kubelet S 1", 0, true},
		{"46 (x)", 0, true},
		{"47 (x) S notanumber", 0, true},
	} {
		got, err := ParentPid([]byte(tc.stat))
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParentPid(%q) = %d, %v; want %d, error %v", tc.stat, got, err, tc.want, tc.wantErr)
		}
	}
}

// fakeProc writes a proc tree: every pid gets a stat naming its parent and,
// with lists, a task directory per thread whose children file lists the
// children that thread forked (a pid's children go to its first thread,
// except those in forkedBy, which names the forking thread).
func fakeProc(t *testing.T, parents map[int]int, threads map[int][]int, forkedBy map[int]int, lists bool) string {
	t.Helper()
	root := t.TempDir()
	write := func(path, text string) {
		must(t, os.MkdirAll(filepath.Dir(path), 0o755))
		must(t, os.WriteFile(path, []byte(text), 0o644))
	}
	children := map[int][]int{} // by thread
	for pid, ppid := range parents {
		tid := ppid
		if by, ok := forkedBy[pid]; ok {
			tid = by
		}
		children[tid] = append(children[tid], pid)
	}
	for pid, ppid := range parents {
		dir := filepath.Join(root, strconv.Itoa(pid))
		write(filepath.Join(dir, "stat"), strconv.Itoa(pid)+" (p) S "+strconv.Itoa(ppid)+" 0 0")
		if !lists {
			must(t, os.MkdirAll(filepath.Join(dir, "task", strconv.Itoa(pid)), 0o755))
			continue
		}
		for _, tid := range append([]int{pid}, threads[pid]...) {
			var list []string
			for _, c := range children[tid] {
				list = append(list, strconv.Itoa(c))
			}
			write(filepath.Join(dir, "task", strconv.Itoa(tid), "children"), strings.Join(list, " ")+" ")
		}
	}
	return root
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// 10 -> 11 -> 12 -> 13; 10 -> 14, forked by 10's second thread 15; 20 and
// 21 are unrelated.
var tree = map[int]int{10: 1, 11: 10, 12: 11, 13: 12, 14: 10, 20: 1, 21: 20}

func TestDescendantsFollowsEveryThreadsChildren(t *testing.T) {
	root := fakeProc(t, tree, map[int][]int{10: {15}}, map[int]int{14: 15}, true)
	got, err := Descendants(root, 10)
	must(t, err)
	slices.Sort(got)
	if want := []int{11, 12, 13, 14}; !slices.Equal(got, want) {
		t.Errorf("Descendants = %v, want %v", got, want)
	}
}

// The walk reads only the subtree, never the rest of the host: here 2,000
// other processes claim 10 as their parent in their stat, which a scan of
// /proc would believe, but no child list of 10 names them.
func TestDescendantsReadsOnlyTheSubtree(t *testing.T) {
	root := fakeProc(t, tree, map[int][]int{10: {15}}, map[int]int{14: 15}, true)
	for p := 1000; p < 3000; p++ {
		dir := filepath.Join(root, strconv.Itoa(p))
		must(t, os.MkdirAll(filepath.Join(dir, "task", strconv.Itoa(p)), 0o755))
		must(t, os.WriteFile(filepath.Join(dir, "stat"), []byte(strconv.Itoa(p)+" (other) S 10 0 0"), 0o644))
		must(t, os.WriteFile(filepath.Join(dir, "task", strconv.Itoa(p), "children"), nil, 0o644))
	}
	got, err := Descendants(root, 10)
	must(t, err)
	slices.Sort(got)
	if want := []int{11, 12, 13, 14}; !slices.Equal(got, want) {
		t.Errorf("Descendants = %v, want only %v", got, want)
	}
}

func TestDescendantsWithoutChildListsScansEveryParent(t *testing.T) {
	root := fakeProc(t, tree, nil, nil, false)
	got, err := Descendants(root, 10)
	must(t, err)
	slices.Sort(got)
	if want := []int{11, 12, 13, 14}; !slices.Equal(got, want) {
		t.Errorf("Descendants = %v, want %v", got, want)
	}
}

// On the real /proc: a shell that forks a grandchild is found, with the
// grandchild, below this test's process.
func TestDescendantsOfARealProcess(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "sleep 60 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	must(t, cmd.Start())
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := Descendants("/proc", os.Getpid())
		must(t, err)
		if slices.Contains(got, cmd.Process.Pid) && len(got) >= 2 {
			// The grandchild is the shell's fork until it has exec'd sleep.
			grand, _ := Children("/proc", cmd.Process.Pid)
			if len(grand) == 1 && slices.Contains(got, grand[0]) && strings.Contains(Describe("/proc", grand[0]), "(sleep)") {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the shell and its sleep not found below this process: %v", got)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestWithinWalksUpToTheRoot(t *testing.T) {
	// 1 <- 10 <- 20 <- 30, 1 <- 11, 20 <- 21; and a chain of 70 from 100.
	parents := map[int]int{10: 1, 11: 1, 20: 10, 30: 20, 21: 20, 100: 1}
	for i := 101; i < 171; i++ {
		parents[i] = i - 1
	}
	root := fakeProc(t, parents, nil, nil, false)
	must(t, os.WriteFile(filepath.Join(root, "bad"), nil, 0o644))
	must(t, os.MkdirAll(filepath.Join(root, "40"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "40", "stat"), []byte("40 kubelet S 20"), 0o644))
	for _, tc := range []struct {
		pid, root int
		want      bool
		wantErr   bool
	}{
		{30, 10, true, false},   // a grandchild
		{20, 20, true, false},   // the root itself
		{21, 30, false, false},  // a sibling's child
		{11, 10, false, false},  // outside, up to init
		{10, 20, false, false},  // an ancestor is not within its child
		{30, 1, true, false},    // everything is within init
		{99, 10, false, true},   // gone
		{40, 10, false, true},   // an unreadable stat
		{170, 100, false, true}, // 70 generations: more than a walk takes
		{163, 100, true, false}, // 63: within the bound
	} {
		got, err := Within(root, tc.pid, tc.root)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("Within(%d, %d) = %v, %v; want %v, error %v", tc.pid, tc.root, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestWithinOnThisMachine(t *testing.T) {
	child := exec.Command("sleep", "10")
	must(t, child.Start())
	defer func() {
		child.Process.Kill()
		child.Wait()
	}()
	self := os.Getpid()
	for _, tc := range []struct {
		name      string
		pid, root int
		want      bool
	}{
		{"a child within this process", child.Process.Pid, self, true},
		{"this process within its parent", self, os.Getppid(), true},
		{"this process not within its child", self, child.Process.Pid, false},
	} {
		if got, err := Within("/proc", tc.pid, tc.root); got != tc.want || err != nil {
			t.Errorf("%s: %v, %v", tc.name, got, err)
		}
	}
}
