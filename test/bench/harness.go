package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/nodeinit/nodeinit/test/bench/host"
)

// bench holds one measurement: the helpers, the inits and their samples.
type bench struct {
	cfg   config
	h     *helpers
	inits []*contender
	// samples[workload][init name]
	samples map[string]map[string][]float64
	notes   map[string]string
	started time.Time
	load    string // load average when the measurement began
	// nodeinit is the binary measured; logs, scaleRes and crash are what
	// the workloads that run nodeinit alone found.
	nodeinit string
	logs     *logResults
	scaleRes *scaleResults
	crash    *crashResults
}

func (b *bench) add(workload string, c *contender, v float64) {
	m := b.samples[workload]
	if m == nil {
		m = map[string][]float64{}
		b.samples[workload] = m
	}
	m[c.name] = append(m[c.name], v)
}

// measure runs every workload for every init and returns the samples.
// Progress goes to progress.
func measure(cfg config, progress io.Writer) (*results, error) {
	cfg = cfg.withDefaults()
	if err := requireRoot(); err != nil {
		return nil, err
	}
	nodeinit, err := filepath.Abs(cfg.nodeinit)
	if err != nil {
		return nil, fmt.Errorf("nodeinit path: %w", err)
	}
	plat, err := platform(nodeinit)
	if err != nil {
		return nil, err
	}
	inits := initsFor(nodeinit)
	if len(cfg.only) > 0 {
		inits = slices.DeleteFunc(inits, func(c *contender) bool { return !slices.Contains(cfg.only, c.name) })
		if len(inits) == 0 {
			return nil, fmt.Errorf("-only %v names no init", cfg.only)
		}
	}
	bin, err := resolve(inits)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "nodeinit-bench-")
	if err != nil {
		return nil, fmt.Errorf("make work directory: %w", err)
	}
	defer os.RemoveAll(dir)
	h, err := buildHelpers(dir)
	if err != nil {
		return nil, err
	}
	h.bin = bin
	b := &bench{cfg: cfg, h: h, inits: inits, samples: map[string]map[string][]float64{}, notes: map[string]string{}, started: time.Now(), load: host.LoadAverage(),
		nodeinit: nodeinit, logs: &logResults{bytes: cfg.logBytes, batch: cfg.logBatch}}

	type step struct {
		name string
		run  func(*contender) error
	}
	steps := []step{{"start-to-exit", b.startToExit}, {"reaping", b.reaping}, {"signal", b.signalLatency}, {"shutdown", b.shutdown}}
	for _, s := range cfg.steps {
		if !slices.Contains(knownWorkloads, s) {
			return nil, fmt.Errorf("unknown workload %q: want one of %v", s, knownWorkloads)
		}
	}
	want := func(name string) bool { return len(cfg.steps) == 0 || slices.Contains(cfg.steps, name) }
	steps = slices.DeleteFunc(steps, func(s step) bool { return !want(s.name) })
	for round := range cfg.rounds {
		// Each round starts with the next init, so none is always first
		// after a pause or always last when the machine is warm.
		order := rotate(inits, round)
		for _, s := range steps {
			fmt.Fprintf(progress, "round %d/%d: %s\n", round+1, cfg.rounds, s.name)
			for _, c := range order {
				if err := s.run(c); err != nil {
					return nil, fmt.Errorf("round %d, %s: %w", round+1, s.name, err)
				}
			}
		}
	}
	if !want("idle") {
		cfg.idleRounds = 0
	}
	for round := range cfg.idleRounds {
		fmt.Fprintf(progress, "idle %d/%d: %s\n", round+1, cfg.idleRounds, cfg.idle)
		if err := b.idle(rotate(inits, round)); err != nil {
			return nil, fmt.Errorf("idle round %d: %w", round+1, err)
		}
	}
	if want("crashloop") {
		fmt.Fprintf(progress, "crash loop: %d proxy restarts\n", cfg.restarts)
		if err := b.crashLoop(); err != nil {
			return nil, fmt.Errorf("proxy crash loop: %w", err)
		}
	}
	for round := range cfg.logRuns {
		if !want("logs") {
			break
		}
		fmt.Fprintf(progress, "logs %d/%d: %d MiB through each of %d rows\n", round+1, cfg.logRuns, cfg.logBytes>>20, len(logModes))
		if err := b.logThroughput(round); err != nil {
			return nil, fmt.Errorf("log round %d: %w", round+1, err)
		}
	}
	for round := range cfg.scaleRounds {
		if !want("scale") {
			break
		}
		fmt.Fprintf(progress, "scale %d/%d: nodeinit as a subreaper with %v other processes on the host\n", round+1, cfg.scaleRounds, cfg.scaleLevels)
		if err := b.scale(round); err != nil {
			return nil, fmt.Errorf("scale round %d: %w", round+1, err)
		}
	}
	for _, c := range inits {
		if !want("size") {
			break
		}
		if err := b.size(c); err != nil {
			return nil, err
		}
	}
	return &results{cfg: cfg, inits: inits, samples: b.samples, notes: b.notes, logs: b.logs, scale: b.scaleRes, crash: b.crash,
		started: b.started, took: time.Since(b.started), platform: plat,
		load: b.load + " at the start, " + host.LoadAverage() + " at the end"}, nil
}

// knownWorkloads are the names -workloads takes.
var knownWorkloads = []string{"start-to-exit", "reaping", "signal", "shutdown", "idle", "size", "scale", "crashloop", "logs"}

func rotate[T any](s []T, n int) []T {
	n %= len(s)
	return append(slices.Clone(s[n:]), s[:n]...)
}
