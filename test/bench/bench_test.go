//go:build long

package main

import (
	"testing"

	"github.com/nodeinit/nodeinit/test/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestShortRunMeasuresEveryInitInEveryWorkload runs the harness as CI does,
// in short mode, and requires a measurement of every workload for every
// init, of every level of the subreaper-at-scale workload, of the whole
// crash loop and of every row of the log workload. It checks no targets,
// which a noisy shared machine cannot hold, except that the --log-dir run
// lost, split and doubled no line: that is no matter of speed.
func TestShortRunMeasuresEveryInitInEveryWorkload(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tool := range []string{"tini-static", "dumb-init", "catatonit"} {
		testenv.RequireTool(t, tool)
	}
	cfg := shortConfig(fullConfig())
	cfg.nodeinit = testenv.Build(t, "./cmd/nodeinit")
	res, err := measure(cfg, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.inits) != 8 {
		t.Fatalf("measured %d inits, want all 8", len(res.inits))
	}
	for _, wl := range workloads {
		for _, c := range res.inits {
			if wl == wSignal && c.noSignals {
				continue
			}
			s := res.get(wl, c.name)
			if len(s) == 0 {
				t.Errorf("%s: no measurement of %s", wl, c.name)
			}
			for _, v := range s {
				// Sizes and memory are never zero; an idle init may use no
				// CPU at all in a short window, but never a negative amount.
				if v < 0 || (v == 0 && wl != wIdleCPU) {
					t.Errorf("%s: %s measured %v", wl, c.name, v)
				}
			}
		}
	}
	for _, m := range logModes {
		if s := res.get(wLogRate, m.name); len(s) != 1 || s[0] <= 0 {
			t.Errorf("log throughput of %s: %v, want one rate", m.name, s)
		}
		if s := res.get(wLogCPU, m.name); m.nodeinit && (len(s) != 1 || s[0] <= 0) {
			t.Errorf("nodeinit's CPU with %s: %v, want one time", m.name, s)
		}
	}
	for _, c := range scaleInits("") {
		for _, n := range cfg.scaleLevels {
			if s := res.scale; s == nil || len(s.start[c.name][n]) != cfg.starts || len(s.shutdown[c.name][n]) != cfg.shutdowns {
				t.Errorf("%s at scale with %d other processes: not every run measured", c.name, n)
			}
		}
	}
	if c := res.crash; c == nil || len(c.samples) < 2 || c.samples[len(c.samples)-1].restarts < cfg.restarts {
		t.Errorf("the proxy crash loop did not run to %d restarts", cfg.restarts)
	}
	if len(res.logs.wrong) != 0 || len(res.logs.files) != 1 {
		t.Errorf("the --log-dir run's lines: %v", res.logs.wrong)
	}
	res.write(testWriter{t})
}

// testWriter sends the harness's progress and table to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
