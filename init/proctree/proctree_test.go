package proctree

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
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

func TestDescendantsWalksTheWholeSubtree(t *testing.T) {
	root := t.TempDir()
	// 10 -> 11 -> 12 -> 13; 10 -> 14; 20 is unrelated.
	for pid, ppid := range map[int]int{10: 1, 11: 10, 12: 11, 13: 12, 14: 10, 20: 1} {
		dir := filepath.Join(root, strconv.Itoa(pid))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		stat := strconv.Itoa(pid) + " (p) S " + strconv.Itoa(ppid) + " 0 0"
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(root, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := Descendants(root, 10)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := []int{11, 12, 13, 14}; !slices.Equal(got, want) {
		t.Errorf("Descendants = %v, want %v", got, want)
	}
}
