package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/nodeinit/nodeinit/test/bench/host"
)

// The proxy crash loop (issue 15): nodeinit as PID 1 with a proxy that
// exits at once (/bin/true) and a backoff of 1 ms, restarted over and over
// while the executor sleeps. The harness samples nodeinit's memory and open
// files as it goes, with the number of restarts its log has reported, and
// checks that from a tenth of the restarts to the last they stay flat.
const (
	// crashFlat is how far (±) a window may stray from the first.
	crashFlat = 0.10
	// crashEvery is the time between two samples.
	crashEvery = 20 * time.Millisecond
	// crashLimit bounds the whole loop: 10,000 restarts take about half a
	// minute on the project's VM.
	crashLimit = 10 * time.Minute
	// crashWindows is how many windows the restarts are cut into; the
	// first is left out (the Go heap grows to its size), the second is
	// the reference.
	crashWindows = 10
)

// A crashSample is one look at nodeinit during the loop.
type crashSample struct {
	restarts  int
	rss, anon int64 // VmRSS, RssAnon
	fds       int
	cpu       int64 // nodeinit's CPU time so far
}

// crashResults are the samples of the crash loop.
type crashResults struct {
	restarts int // how many the loop ran to
	samples  []crashSample
	took     time.Duration
	load     string // load average before and after
}

// crashLoop runs the loop until nodeinit has restarted the proxy
// b.cfg.restarts times.
func (b *bench) crashLoop() error {
	proxy, err := exec.LookPath("true")
	if err != nil {
		return fmt.Errorf("a proxy that exits at once: %w", err)
	}
	fifo := b.h.fifoPath()
	c := &contender{name: "nodeinit (proxy crash loop)", binary: b.nodeinit,
		argv: func(_ *helpers, _ []string, child []string) []string {
			return append([]string{b.nodeinit, "--run-proxy=true", "--proxy-path=" + proxy,
				"--proxy-restart-backoff=1ms", "--proxy-restart-backoff-max=1ms", "--"}, child...)
		}}
	r, err := b.h.start(c, fifo, []string{b.h.sleeper, "-stamp=" + fifo, "-tag=executor"}, nil, crashLimit)
	if err != nil {
		return err
	}
	defer r.close()
	if _, err := r.expect("executor-ready", 30*time.Second); err != nil {
		r.kill()
		return err
	}
	res := &crashResults{restarts: b.cfg.restarts, load: host.LoadAverage()}
	pid := r.cmd.Process.Pid
	began := time.Now()
	tick := time.NewTicker(crashEvery)
	defer tick.Stop()
	for n := 0; n < b.cfg.restarts; {
		<-tick.C
		if time.Since(began) > crashLimit {
			r.kill()
			return fmt.Errorf("only %d restarts after %v", n, crashLimit)
		}
		s, err := sampleCrashLoop(pid, r.log)
		if err != nil {
			r.kill()
			return fmt.Errorf("after %d restarts: %w: %s", n, err, r.logText())
		}
		n = s.restarts
		res.samples = append(res.samples, s)
	}
	res.took = time.Since(began)
	res.load += " before, " + host.LoadAverage() + " after"
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return err
	}
	if err := r.waitOK(); err != nil {
		return err
	}
	b.crash = res
	return nil
}

// sampleCrashLoop reads nodeinit's memory, open files and CPU time, and the
// last restart count in its log.
func sampleCrashLoop(pid int, log *os.File) (crashSample, error) {
	var s crashSample
	mem, err := memory(pid)
	if err != nil {
		return s, err
	}
	s.rss, s.anon = mem["VmRSS"], mem["RssAnon"]
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return s, fmt.Errorf("open files of pid %d: %w", pid, err)
	}
	s.fds = len(fds)
	if s.cpu, err = cpuTime(pid); err != nil {
		return s, err
	}
	s.restarts, err = lastRestart(log)
	return s, err
}

// lastRestart finds the number of the last "Restarted task" line near the
// end of nodeinit's log: restarts=N.
func lastRestart(log *os.File) (int, error) {
	fi, err := log.Stat()
	if err != nil {
		return 0, err
	}
	const tail = 8 << 10
	off := max(fi.Size()-tail, 0)
	buf := make([]byte, fi.Size()-off)
	if _, err := log.ReadAt(buf, off); err != nil && err != io.EOF {
		return 0, err
	}
	i := bytes.LastIndex(buf, []byte(`"Restarted task" task="proxy"`))
	if i < 0 {
		return 0, nil // none yet
	}
	line, _, _ := bytes.Cut(buf[i:], []byte("\n"))
	_, num, ok := bytes.Cut(line, []byte("restarts="))
	if !ok {
		return 0, fmt.Errorf("no restart count in %q", line)
	}
	end := bytes.IndexFunc(num, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(num)
	}
	return strconv.Atoi(string(num[:end]))
}

// A crashWindow is what the samples of one tenth of the restarts saw: the
// most memory, and the fewest open files (a sample may catch a start in
// progress, with the pipe that reports a failed exec open).
type crashWindow struct {
	from, to  int
	rss, anon int64
	fds       int
	n         int
}

// windows cuts the samples into crashWindows windows of restarts.
func (c *crashResults) windows() []crashWindow {
	size := c.restarts / crashWindows
	out := make([]crashWindow, crashWindows)
	for i := range out {
		out[i] = crashWindow{from: i * size, to: (i + 1) * size, fds: -1}
	}
	for _, s := range c.samples {
		i := min(s.restarts/size, crashWindows-1)
		w := &out[i]
		w.rss, w.anon = max(w.rss, s.rss), max(w.anon, s.anon)
		if w.fds < 0 || s.fds < w.fds {
			w.fds = s.fds
		}
		w.n++
	}
	return out
}

// writeCrashLoop prints the workload's table and returns the verdicts on
// its targets.
func (r *results) writeCrashLoop(w io.Writer) []verdict {
	c := r.crash
	if c == nil || len(c.samples) < 2 {
		return nil
	}
	first, last := c.samples[0], c.samples[len(c.samples)-1]
	perRestart := float64(last.cpu-first.cpu) / float64(max(last.restarts-first.restarts, 1))
	fmt.Fprintf(w, "\nProxy crash loop: a proxy that exits at once (/bin/true), --proxy-restart-backoff=1ms --proxy-restart-backoff-max=1ms, %s restarts in %s (%.0f per second); nodeinit's CPU %s per restart. A sample every %v; per window of restarts the most VmRSS and RssAnon, and the fewest open files (a sample can catch a start with its exec pipe open). Load average %s.\n\n",
		thousands(c.restarts), c.took.Round(100*time.Millisecond), float64(last.restarts)/c.took.Seconds(), format("", perRestart), crashEvery, c.load)
	fmt.Fprintln(w, "| restarts | samples | VmRSS | RssAnon | open files |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|")
	wins := c.windows()
	for _, win := range wins {
		fmt.Fprintf(w, "| %s–%s | %d | %s | %s | %d |\n", thousands(win.from), thousands(win.to), win.n,
			format(wRSS, float64(win.rss)), format(wAnon, float64(win.anon)), win.fds)
	}
	// Flat: every window from the second on within ±crashFlat of the
	// second (the first holds the heap's growth to its working size).
	ref := wins[1]
	var rss, fds []float64
	for _, win := range wins[1:] {
		if win.n == 0 {
			continue
		}
		rss = append(rss, float64(win.rss)/float64(ref.rss))
		fds = append(fds, float64(win.fds)/float64(ref.fds))
	}
	flat := func(v []float64) bool {
		return len(v) > 0 && slices.Min(v) >= 1-crashFlat && slices.Max(v) <= 1+crashFlat
	}
	span := func(v []float64) string {
		if len(v) == 0 {
			return "no samples"
		}
		return fmt.Sprintf("%.2f–%.2f × at %s", slices.Min(v), slices.Max(v), thousands(ref.from))
	}
	what := fmt.Sprintf("from restart %s to %s", thousands(wins[1].from), thousands(c.restarts))
	return []verdict{
		{15, "proxy crash loop: nodeinit's VmRSS flat (±10 %) " + what, span(rss), flat(rss)},
		{15, "proxy crash loop: nodeinit's open files flat (±10 %) " + what, span(fds), flat(fds)},
	}
}
