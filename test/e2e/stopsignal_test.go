package e2e

import (
	"strings"
	"testing"
	"time"
)

// A container whose runtime stops it with another signal than TERM — PWR,
// as LXC and Incus halt a container, or SIGRTMIN+3, the STOPSIGNAL of
// systemd-style images — gets the same ordered stop: the node drains, the
// executor gets TERM (which a Go kubelet handles, where it would ignore
// either of the others) and then the proxy, and podman stop returns well
// before its timeout with the executor's status.
func TestOtherRuntimesStopSignalsStopTheNodeInOrder(t *testing.T) {
	e := start(t)
	for _, sig := range []string{"PWR", "RTMIN+3"} {
		t.Run(sig, func(t *testing.T) {
			c := e.runDetached(t, []string{"--stop-signal=" + sig},
				taskNode([]string{"--graceful-node-shutdown", "--graceful-node-shutdown-delay=20s"}, "--inhibit=300ms")...)
			c.waitFile(t, "executor.ready")
			c.waitFile(t, "proxy.ready")
			waitFor(t, c.rec, 20*time.Second, "the executor's delay lock", -1, func() bool {
				return recorded(c.path("executor.rec"), "INHIBIT")
			})

			const stopTimeout = 30 * time.Second
			began := time.Now()
			e.must(t, "stop", "--time", "30", c.name)
			took := time.Since(began)
			if took > stopTimeout/3 {
				t.Errorf("podman stop took %v, want well inside its %v timeout", took, stopTimeout)
			}
			t.Logf("podman stop with %s took %v", sig, took)
			if got := strings.TrimSpace(e.must(t, "wait", c.name)); got != "0" {
				t.Errorf("podman wait: %s, want the executor's 0", got)
			}
			prepared := signalTimes(t, c.path("executor.rec"), "PREPARE")
			released := signalTimes(t, c.path("executor.rec"), "RELEASED")
			execTerm := signalTimes(t, c.path("executor.rec"), "TERM")
			proxyTerm := signalTimes(t, c.path("proxy.rec"), "TERM")
			if len(prepared) != 1 || len(released) != 1 || len(execTerm) == 0 || len(proxyTerm) == 0 {
				t.Fatalf("executor: %d PREPARE, %d RELEASED, %d TERM; proxy: %d TERM; want the drain, then TERM to both",
					len(prepared), len(released), len(execTerm), len(proxyTerm))
			}
			if !(prepared[0] <= released[0] && released[0] <= execTerm[0] && execTerm[0] <= proxyTerm[0]) {
				t.Errorf("order: PREPARE %d, RELEASED %d, executor TERM %d, proxy TERM %d; want them in that order",
					prepared[0], released[0], execTerm[0], proxyTerm[0])
			}
		})
	}
}
