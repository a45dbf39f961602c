package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/test/bench/host"
)

// The subreaper-at-scale workload (issue 15): nodeinit as an ordinary
// process of the harness's pid namespace, not PID 1, so that it registers
// as child subreaper and must find its own descendants at shutdown among
// every process of the host. Each level runs with that many other
// processes on the host (test/helpers/task's hold mode), none of them
// nodeinit's; the ratios are to the level with none, in the same run.
// go-minimal runs beside it, in the same place, as a reference.
const (
	wScaleStart    = "start-to-exit"
	wScaleShutdown = "shutdown (executor exit → init exit)"
	// scaleLimit is how much slower a level may be than the one with no
	// other processes.
	scaleLimit = 1.2
	// holdLimit bounds the start of the held processes: 10,000 forks take
	// about 8 s on the project's VM.
	holdLimit = 5 * time.Minute
	// A level starts once the CPUs are this idle (on 2 CPUs: at most half
	// of one busy), or after quietLimit on a machine that stays busy.
	quietIdle  = 0.75
	quietLimit = 15 * time.Second
)

// scaleInits are the inits of the workload: nodeinit, and go-minimal in the
// same place for reference, to tell what a busy host costs any process from
// what it costs nodeinit.
func scaleInits(nodeinit string) []*contender {
	return []*contender{
		{name: "nodeinit", binary: nodeinit, notPID1: true,
			argv: func(_ *helpers, _ []string, child []string) []string {
				return append([]string{nodeinit, "--run-proxy=false", "--"}, child...)
			}},
		{name: goMinimal, reference: "gominimal", notPID1: true, argv: reference("gominimal")},
	}
}

// scaleResults are the workload's samples by init and number of other
// processes.
type scaleResults struct {
	levels   []int
	rounds   int
	start    map[string]map[int][]float64
	shutdown map[string]map[int][]float64
	unquiet  []string // levels that began on a machine that did not become quiet
	load     string   // load average before the first level
	last     string   // and after the last
}

func (s *scaleResults) add(m map[string]map[int][]float64, who string, n int, v float64) {
	if m[who] == nil {
		m[who] = map[int][]float64{}
	}
	m[who][n] = append(m[who][n], v)
}

// scale runs every level once, starting with a different one each round.
func (b *bench) scale(round int) error {
	if b.scaleRes == nil {
		// The held processes are the harness's to reap once their parent
		// is killed: nothing else on the host has to.
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("become a child subreaper: %w", err)
		}
		b.scaleRes = &scaleResults{levels: b.cfg.scaleLevels, start: map[string]map[int][]float64{},
			shutdown: map[string]map[int][]float64{}, load: host.LoadAverage()}
	}
	defer func() { b.scaleRes.last = host.LoadAverage() }()
	for _, n := range rotate(b.cfg.scaleLevels, round) {
		if err := b.scaleLevel(scaleInits(b.nodeinit), n); err != nil {
			return fmt.Errorf("with %d other processes: %w", n, err)
		}
	}
	b.scaleRes.rounds++
	return nil
}

// scaleLevel measures the inits, alternately, with n other processes.
func (b *bench) scaleLevel(inits []*contender, n int) error {
	if n > 0 {
		h, err := b.h.hold(n)
		if err != nil {
			return err
		}
		defer h.stop()
	}
	// The level before may have ended 10,000 processes: wait for the
	// kernel to be done with them (at most half a CPU busy for 200 ms).
	if waited, ok := host.Quiet(200*time.Millisecond, quietIdle, quietLimit); !ok {
		b.scaleRes.unquiet = append(b.scaleRes.unquiet, fmt.Sprintf("%s (after %v)", thousands(n), waited.Round(time.Second)))
	}
	res := b.scaleRes
	for _, c := range inits {
		// One run first, not counted: the first of a level would
		// otherwise pay for the caches the previous one left cold.
		if _, err := b.startOnce(c); err != nil {
			return err
		}
	}
	for range b.cfg.starts {
		for _, c := range inits {
			ns, err := b.startOnce(c)
			if err != nil {
				return err
			}
			res.add(res.start, c.name, n, ns)
		}
	}
	for range b.cfg.shutdowns {
		for _, c := range inits {
			ns, _, err := b.shutdownOnce(c)
			if err != nil {
				return err
			}
			res.add(res.shutdown, c.name, n, ns)
		}
	}
	return nil
}

// holders are processes that pause until they are killed: a busy host.
type holders struct {
	cmd  *exec.Cmd
	pgid int
}

// hold starts n processes in a process group of their own and returns once
// every one of them has been forked.
func (h *helpers) hold(n int) (*holders, error) {
	cmd := exec.Command(h.task, "hold", strconv.Itoa(n))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %d held processes: %w", n, err)
	}
	hd := &holders{cmd: cmd, pgid: cmd.Process.Pid}
	// The helper says "holding N" once it has forked them all.
	said := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		said <- strings.TrimSpace(line)
		io.Copy(io.Discard, out)
	}()
	select {
	case line := <-said:
		if line != "holding "+strconv.Itoa(n) {
			hd.stop()
			return nil, fmt.Errorf("start %d held processes: the helper said %q", n, line)
		}
	case <-time.After(holdLimit):
		hd.stop()
		return nil, fmt.Errorf("start %d held processes: not all forked after %v", n, holdLimit)
	}
	return hd, nil
}

// stop kills the group and reaps every process of it: the helper, the
// harness's child, with Wait, and the held ones, which the harness (a
// subreaper) inherits, with wait4 on the group.
func (hd *holders) stop() error {
	_ = syscall.Kill(-hd.pgid, syscall.SIGKILL)
	_ = hd.cmd.Wait()
	for {
		_, err := unix.Wait4(-hd.pgid, nil, 0, nil)
		switch {
		case err == unix.EINTR:
		case errors.Is(err, unix.ECHILD):
			return nil
		case err != nil:
			return fmt.Errorf("reap the held processes: %w", err)
		}
	}
}

// writeScale prints the workload's table and returns the verdicts on its
// targets.
func (r *results) writeScale(w io.Writer) []verdict {
	s := r.scale
	if s == nil || s.rounds == 0 {
		return nil
	}
	fmt.Fprintf(w, "\nSubreaper at scale: nodeinit not PID 1 (a child subreaper), and go-minimal in the same place for reference, with other processes on the host that are not theirs; %d rounds, %d start-to-exit runs and %d shutdowns of each per level and round, alternated, each level once the CPUs were %.0f %% idle; load average %s before, %s after.\n\n",
		s.rounds, r.cfg.starts, r.cfg.shutdowns, quietIdle*100, s.load, s.last)
	if len(s.unquiet) > 0 {
		fmt.Fprintf(w, "The machine was still busy when these levels began: %s.\n\n", strings.Join(s.unquiet, ", "))
	}
	fmt.Fprintln(w, "| workload | init | other processes on the host | median | spread (p25–p75) | n | × none |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|")
	var out []verdict
	for _, wl := range []struct {
		name    string
		samples map[string]map[int][]float64
	}{{wScaleStart, s.start}, {wScaleShutdown, s.shutdown}} {
		for _, c := range scaleInits("") {
			none := median(wl.samples[c.name][0])
			for _, n := range s.levels {
				v := wl.samples[c.name][n]
				fmt.Fprintf(w, "| %s | %s | %s | %s | %s–%s | %d | %s |\n", wl.name, c.name, thousands(n),
					format(wl.name, median(v)), format(wl.name, percentile(v, 25)), format(wl.name, percentile(v, 75)), len(v),
					ratio(median(v), none))
				if c.name != "nodeinit" || n == 0 || none == 0 {
					continue
				}
				q := median(v) / none
				out = append(out, verdict{15, fmt.Sprintf("subreaper %s with %s other processes ≤ %.1f × with none", wl.name, thousands(n), scaleLimit),
					fmt.Sprintf("%.2f × (go-minimal %s ×)", q, ratio(median(wl.samples[goMinimal][n]), median(wl.samples[goMinimal][0]))), q <= scaleLimit})
			}
		}
	}
	return out
}

// thousands prints n with thousands separated by commas.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
