package testenv

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Zombies lists the zombie children of pid.
func Zombies(pid int) []int {
	var zs []int
	eachProcess(func(p int, state string, ppid int) {
		if state == "Z" && ppid == pid {
			zs = append(zs, p)
		}
	})
	return zs
}

// ProcessesWithArg lists the live (not zombie) processes whose command line
// holds arg.
func ProcessesWithArg(arg string) []int {
	var ps []int
	eachProcess(func(p int, state string, _ int) {
		if state == "Z" {
			return
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		if err == nil && bytes.Contains(cmdline, []byte(arg)) {
			ps = append(ps, p)
		}
	})
	return ps
}

// eachProcess calls f with the state and the parent's pid of every process
// in /proc; one that ends meanwhile is left out.
func eachProcess(f func(pid int, state string, ppid int)) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := ReadStat(p); err == nil {
			f(p, st.State, st.Ppid)
		}
	}
}

// Tail returns the last n lines of s, for a failure message.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// ReadStarts reads the task helper's --starts file: one start time per line.
func ReadStarts(tb testing.TB, path string) []time.Time {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var at []time.Time
	for _, l := range strings.Fields(string(data)) {
		ns, err := strconv.ParseInt(l, 10, 64)
		if err != nil {
			tb.Fatalf("bad start line %q in %s", l, path)
		}
		at = append(at, time.Unix(0, ns))
	}
	return at
}

// Received is one signal that the task helper recorded.
type Received struct {
	Signal string // without SIG: TERM, HUP ...
	At     time.Time
}

// Record is what the task helper's --record file holds, in order.
type Record []Received

// ReadRecord reads the task helper's --record file.
func ReadRecord(tb testing.TB, path string) Record {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("read record: %v", err)
	}
	var r Record
	for sc := bufio.NewScanner(bytes.NewReader(data)); sc.Scan(); {
		l := sc.Text()
		f := strings.Fields(l)
		if len(f) != 2 {
			tb.Fatalf("bad record line %q in %s", l, path)
		}
		ns, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			tb.Fatalf("bad record line %q in %s", l, path)
		}
		r = append(r, Received{f[0], time.Unix(0, ns)})
	}
	return r
}

// Signals returns the names of the signals received, joined by commas.
func (r Record) Signals() string {
	s := make([]string, len(r))
	for k, rec := range r {
		s[k] = rec.Signal
	}
	return strings.Join(s, ",")
}

// Report is what the task helper writes with --report: where it runs.
type Report struct {
	Pid     int    `json:"pid"`
	Ppid    int    `json:"ppid"`
	Pgid    int    `json:"pgid"`
	MountNS string `json:"mountns"`
	Cgroup  string `json:"cgroup"` // the text of /proc/self/cgroup
	// Stdin is what its fd 0 is ("/dev/null"); Foreground is the
	// foreground process group of the terminal on its stdout, 0 when that
	// is not a terminal of its session.
	Stdin      string   `json:"stdin"`
	Foreground int      `json:"foreground"`
	Args       []string `json:"args"`
	Env        []string `json:"env"`
	// OOMScoreAdj is the OOM score adjustment it started with.
	OOMScoreAdj int `json:"oomScoreAdj"`
	// THPEnabled is its THP_enabled in /proc/self/status: "1" when
	// transparent huge pages may back its memory, "0" when they are off
	// for it, "" on a kernel that does not show it.
	THPEnabled string `json:"thpEnabled"`
}

// ReadReport reads the task helper's --report file.
func ReadReport(tb testing.TB, path string) Report {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("read task report: %v", err)
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		tb.Fatalf("task report %s: %v", path, err)
	}
	return r
}
