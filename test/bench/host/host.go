// Package host tells how busy the machine was, for the benchmarks of
// test/bench and test/k8s: a measurement on a shared machine is only worth
// what its load was.
package host

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// LoadAverage returns the 1-, 5- and 15-minute load averages, as
// /proc/loadavg gives them ("1.32 1.93 1.66"), or "unknown".
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// Quiet waits until the machine's CPUs were idle for at least the fraction
// idle of one window, from /proc/stat, or until limit has passed, and says
// how long it waited and whether they were. Ending ten thousand processes
// keeps the kernel busy for seconds after the last one is reaped, and a
// measurement right after would pay for it.
func Quiet(window time.Duration, idle float64, limit time.Duration) (time.Duration, bool) {
	start := time.Now()
	prev, err := cpuTimes()
	for err == nil && time.Since(start) < limit {
		time.Sleep(window)
		var cur [2]uint64
		if cur, err = cpuTimes(); err != nil {
			break
		}
		total, free := cur[0]-prev[0], cur[1]-prev[1]
		if total > 0 && float64(free) >= idle*float64(total) {
			return time.Since(start), true
		}
		prev = cur
	}
	return time.Since(start), false
}

// cpuTimes returns the total and the idle (idle and iowait) time of every
// CPU together, in clock ticks, from the first line of /proc/stat.
func cpuTimes() ([2]uint64, error) {
	var t [2]uint64
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return t, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return t, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	// user nice system idle iowait irq softirq steal
	for i, s := range f[1:9] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return t, fmt.Errorf("/proc/stat: %w", err)
		}
		t[0] += v
		if i == 3 || i == 4 {
			t[1] += v
		}
	}
	return t, nil
}
