// Package host tells how busy the machine was, for the benchmarks of
// test/bench and test/k8s: a measurement on a shared machine is only worth
// what its load was.
package host

import (
	"os"
	"strings"
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
