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
)

// The subreaper-at-scale workload (issue 15): nodeinit as an ordinary
// process of the harness's pid namespace, not PID 1, so that it registers
// as child subreaper and must find its own descendants at shutdown among
// every process of the host. Each level runs with that many other
// processes on the host (test/helpers/task's hold mode), none of them
// nodeinit's; the ratios are to the level with none, in the same run.
const (
	wScaleStart    = "start-to-exit"
	wScaleShutdown = "shutdown (executor exit → init exit)"
	// scaleLimit is how much slower a level may be than the one with no
	// other processes.
	scaleLimit = 1.2
	// holdLimit bounds the start of the held processes: 10,000 forks take
	// about 8 s on the project's VM.
	holdLimit = 5 * time.Minute
)

// subreaper is nodeinit as the scale workload runs it.
func subreaper(nodeinit string) *contender {
	return &contender{name: "nodeinit (subreaper)", binary: nodeinit, subreaper: true,
		argv: func(_ *helpers, _ []string, child []string) []string {
			return append([]string{nodeinit, "--run-proxy=false", "--"}, child...)
		}}
}

// scaleResults are the workload's samples by number of other processes.
type scaleResults struct {
	levels   []int
	rounds   int
	start    map[int][]float64
	shutdown map[int][]float64
}

// scale runs every level once, starting with a different one each round.
func (b *bench) scale(round int) error {
	if b.scaleRes == nil {
		// The held processes are the harness's to reap once their parent
		// is killed: nothing else on the host has to.
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("become a child subreaper: %w", err)
		}
		b.scaleRes = &scaleResults{levels: b.cfg.scaleLevels, start: map[int][]float64{}, shutdown: map[int][]float64{}}
	}
	c := subreaper(b.nodeinit)
	for _, n := range rotate(b.cfg.scaleLevels, round) {
		if err := b.scaleLevel(c, n); err != nil {
			return fmt.Errorf("with %d other processes: %w", n, err)
		}
	}
	b.scaleRes.rounds++
	return nil
}

func (b *bench) scaleLevel(c *contender, n int) error {
	if n > 0 {
		h, err := b.h.hold(n)
		if err != nil {
			return err
		}
		defer h.stop()
	}
	// One run first, not counted: the first level of a round would
	// otherwise pay for the caches the previous workload left cold.
	if _, err := b.startOnce(c); err != nil {
		return err
	}
	res := b.scaleRes
	for range b.cfg.starts {
		ns, err := b.startOnce(c)
		if err != nil {
			return err
		}
		res.start[n] = append(res.start[n], ns)
	}
	for range b.cfg.shutdowns {
		ns, _, err := b.shutdownOnce(c)
		if err != nil {
			return err
		}
		res.shutdown[n] = append(res.shutdown[n], ns)
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
	fmt.Fprintf(w, "\nSubreaper at scale: nodeinit not PID 1 (a child subreaper), with other processes on the host that are not its own; %d rounds, %d start-to-exit runs and %d shutdowns per level and round.\n\n",
		s.rounds, r.cfg.starts, r.cfg.shutdowns)
	fmt.Fprintln(w, "| other processes on the host | start-to-exit | spread (p25–p75) | × none | shutdown | spread (p25–p75) | × none |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|")
	start0, shut0 := median(s.start[0]), median(s.shutdown[0])
	var out []verdict
	for _, n := range s.levels {
		st, sh := s.start[n], s.shutdown[n]
		fmt.Fprintf(w, "| %s | %s | %s–%s | %s | %s | %s–%s | %s |\n", thousands(n),
			format(wScaleStart, median(st)), format(wScaleStart, percentile(st, 25)), format(wScaleStart, percentile(st, 75)), ratio(median(st), start0),
			format(wScaleShutdown, median(sh)), format(wScaleShutdown, percentile(sh, 25)), format(wScaleShutdown, percentile(sh, 75)), ratio(median(sh), shut0))
		if n == 0 || start0 == 0 || shut0 == 0 {
			continue
		}
		for _, m := range []struct {
			what string
			v    float64
		}{{wScaleStart, median(st) / start0}, {wScaleShutdown, median(sh) / shut0}} {
			out = append(out, verdict{15, fmt.Sprintf("subreaper %s with %s other processes ≤ %.1f × with none", m.what, thousands(n), scaleLimit),
				fmt.Sprintf("%.2f ×", m.v), m.v <= scaleLimit})
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
