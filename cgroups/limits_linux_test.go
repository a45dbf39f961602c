package cgroups

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/nodeinit/nodeinit/test/testenv"
)

// Limits written into real v1 cgroups are what ReadLimits finds, the
// smaller of a cgroup's and its parent's: memory.limit_in_bytes, the CFS
// quota, the cpuset and pids.max. (On these hosts the v1 hierarchies hold
// every controller, so the unified hierarchy has no memory.max to write;
// the v2 files are read from a fixture in TestReadLimits.)
func TestReadLimitsOfRealV1Cgroups(t *testing.T) {
	testenv.RequireRoot(t)
	l := liveLayout(t)
	testenv.Require(t, l.Mode() == V1 || l.Mode() == Hybrid, "cgroup v1 hierarchies")
	parent := "/" + randomID(t)
	child := parent + "/node"
	dirs := map[string]string{} // controller -> the child's directory
	for _, h := range l.Hierarchies {
		if h.Unified {
			continue
		}
		dir := makeCgroup(t, h, child)
		for _, c := range h.Controllers {
			dirs[c] = dir
		}
	}
	for _, c := range []string{"memory", "cpu", "pids", "cpuset"} {
		testenv.Require(t, dirs[c] != "", "the "+c+" v1 hierarchy")
	}
	write := func(dir, file, value string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644); err != nil {
			t.Fatalf("write %s into %s: %v", value, file, err)
		}
	}

	// Nothing written: no limit, the host's cpuset aside.
	got, err := ReadLimits(l, "/", child)
	if err != nil {
		t.Fatal(err)
	}
	if got.Memory.Found() || got.Pids.Found() {
		t.Errorf("limits of fresh cgroups: %+v", got)
	}

	write(dirs["memory"], "memory.limit_in_bytes", "3221225472")
	write(filepath.Dir(dirs["memory"]), "memory.limit_in_bytes", "2147483648")
	write(dirs["cpu"], "cpu.cfs_period_us", "100000")
	write(dirs["cpu"], "cpu.cfs_quota_us", "150000")
	write(dirs["pids"], "pids.max", "4096")
	cpus, err := os.ReadFile(filepath.Join(dirs["cpuset"], "cpuset.effective_cpus"))
	if err != nil {
		t.Fatal(err)
	}
	all, err := ParseCPUList(string(cpus[:len(cpus)-1]))
	if err != nil {
		t.Fatal(err)
	}
	got, err = ReadLimits(l, "/", child)
	if err != nil {
		t.Fatal(err)
	}
	want := Limits{
		Memory: Limit{2147483648, "memory.limit_in_bytes of cgroup " + parent},
		CPU:    Limit{1500, "cpu.cfs_quota_us of cgroup " + child},
		Pids:   Limit{4096, "pids.max of cgroup " + child},
	}
	if len(all) < 2 {
		// One CPU is narrower than the quota: the cpuset holds.
		want.CPU = Limit{1000, "cpuset.effective_cpus of cgroup " + child + " (" + string(cpus[:len(cpus)-1]) + ")"}
	}
	if got != want {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}

	// A cpuset of one CPU is narrower than 1.5 CPUs of quota.
	if len(all) >= 2 {
		one := strconv.Itoa(all[len(all)-1])
		write(dirs["cpuset"], "cpuset.cpus", one)
		got, err = ReadLimits(l, "/", child)
		if err != nil {
			t.Fatal(err)
		}
		if want := (Limit{1000, "cpuset.effective_cpus of cgroup " + child + " (" + one + ")"}); got.CPU != want {
			t.Errorf("with cpuset %s: CPU %+v, want %+v", one, got.CPU, want)
		}
	}
}
