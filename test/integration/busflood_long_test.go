//go:build long

package integration

import (
	"testing"
	"time"
)

// The connect flood of the fast suite's
// TestAConnectFloodFromOutsideCostsTheExecutorNoCall at the length first
// reported: ten calls over an eight-second flood of four threads, whose
// connects wait for room in a full backlog, then fail at once and try
// again.
func TestLongAConnectFloodFromOutsideCostsTheExecutorNoCall(t *testing.T) {
	for _, nonblock := range []bool{false, true} {
		name := "waiting connects"
		if nonblock {
			name = "non-blocking connects"
		}
		t.Run(name, func(t *testing.T) { connectFlood(t, 8*time.Second, 10, nonblock) })
	}
}
