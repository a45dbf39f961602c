// Command bench compares nodeinit, as PID 1, with the Go floor (go-minimal,
// the smallest correct Go init, and go-bare) and with tini (static),
// dumb-init and catatonit from the distribution's packages: start-to-exit,
// reaping of orphans, signal latency, shutdown latency, idle CPU and memory,
// and binary size. Every init runs as PID 1 of a fresh pid namespace with
// the same helpers around it; rounds alternate the inits, and the table
// gives the median, the spread and each init's ratios to go-minimal and to
// tini, since absolute times on a shared machine mean little. Then it
// measures how nodeinit's costs grow with its work: as a subreaper on a host
// full of processes, in a proxy crash loop, and with its children's logs.
// Every target of issues 6 and 15 is printed with met or not met.
//
//	go run ./test/bench -nodeinit bin/nodeinit [-short]
//
// It needs root and installs nothing: it names what is missing.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

func main() {
	cfg := fullConfig()
	flag.StringVar(&cfg.nodeinit, "nodeinit", "bin/nodeinit", "the nodeinit binary to measure")
	short := flag.Bool("short", false, "a few rounds and a short idle window: checks that everything runs, not the targets")
	only := flag.String("only", "", "comma-separated inits to measure (default: all)")
	steps := flag.String("workloads", "", "comma-separated workloads to run: "+strings.Join(knownWorkloads, ", ")+" (default: all)")
	flag.IntVar(&cfg.rounds, "rounds", 0, "rounds (default: 10, or 2 with -short)")
	flag.DurationVar(&cfg.idle, "idle", 0, "idle window per idle round (default: 60s, or 2s with -short)")
	flag.Int64Var(&cfg.logBytes, "log-bytes", 0, "bytes each row of the log workload writes (default: 1 GiB, or 64 MiB with -short)")
	flag.IntVar(&cfg.logBatch, "log-batch", 1, "lines per write(2) of the log workload's writer")
	flag.IntVar(&cfg.logRuns, "log-runs", 0, "runs of each row of the log workload (default: 3, or 1 with -short)")
	flag.IntVar(&cfg.scaleRounds, "scale-rounds", 0, "rounds of the subreaper-at-scale workload (default: 3, or 1 with -short)")
	flag.IntVar(&cfg.restarts, "restarts", 0, "proxy restarts of the crash loop (default: 10000, or 1000 with -short)")
	flag.Parse()
	if *short {
		cfg = shortConfig(cfg)
	}
	if *only != "" {
		cfg.only = strings.Split(*only, ",")
	}
	if *steps != "" {
		cfg.steps = strings.Split(*steps, ",")
	}
	res, err := measure(cfg, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	res.write(os.Stdout)
}

// config says how much to measure.
type config struct {
	nodeinit   string
	only       []string
	steps      []string      // workloads to run; all when empty
	rounds     int           // rounds of the per-init workloads
	starts     int           // start-to-exit runs per init and round
	orphans    int           // orphans per reaping run
	signals    int           // signals per init and round
	shutdowns  int           // shutdown runs per init and round
	idleRounds int           // idle windows
	idle       time.Duration // length of one idle window
	settle     time.Duration // wait after start-up before an idle window
	logRuns    int           // runs of each row of the log workload
	logBytes   int64         // bytes each of them writes
	logBatch   int           // lines per write(2) of the log writer
	// scaleLevels are the numbers of other processes on the host of the
	// subreaper-at-scale workload; the first, 0, is the reference.
	scaleLevels []int
	scaleRounds int
	restarts    int  // proxy restarts of the crash loop
	short       bool // a run that shows the harness works, not the targets
}

// fullConfig is what make bench runs: enough samples for a stable median
// and p99, and the 60 s idle window of the targets.
func fullConfig() config {
	return config{starts: 30, orphans: 5000, signals: 50, shutdowns: 5, idleRounds: 2, settle: 2 * time.Second,
		scaleLevels: []int{0, 100, 10000}}
}

// shortConfig keeps every workload and every init but only a few samples,
// for CI: a run that proves the harness works, not one that holds targets.
func shortConfig(c config) config {
	if c.rounds == 0 {
		c.rounds = 2
	}
	if c.idle == 0 {
		c.idle = 2 * time.Second
	}
	c.starts, c.orphans, c.signals, c.shutdowns, c.idleRounds, c.settle = 5, 200, 10, 2, 1, 200*time.Millisecond
	if c.logBytes == 0 {
		c.logBytes = 64 << 20
	}
	if c.logRuns == 0 {
		c.logRuns = 1
	}
	// 10,000 processes take some 15 s to fork and to end: short mode
	// stops at a thousand.
	c.scaleLevels = []int{0, 100, 1000}
	c.short = true
	if c.scaleRounds == 0 {
		c.scaleRounds = 1
	}
	if c.restarts == 0 {
		c.restarts = 1000
	}
	return c
}

func (c config) withDefaults() config {
	if c.rounds == 0 {
		c.rounds = 10
	}
	if c.idle == 0 {
		c.idle = 60 * time.Second
	}
	if c.logBytes == 0 {
		c.logBytes = 1 << 30
	}
	if c.logRuns == 0 {
		c.logRuns = 3
	}
	if c.logBatch == 0 {
		c.logBatch = 1
	}
	if c.scaleRounds == 0 {
		c.scaleRounds = 3
	}
	if c.restarts == 0 {
		c.restarts = 10000
	}
	return c
}
