package main

import (
	"debug/elf"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// results are the samples of one measurement, ready to print.
type results struct {
	cfg     config
	inits   []*contender
	samples map[string]map[string][]float64
	notes   map[string]string
	logs    *logResults
	took    time.Duration
	load    string
}

// get returns the samples of one init in one workload.
func (r *results) get(workload, init string) []float64 { return r.samples[workload][init] }

// write prints the machine, the table and nodeinit's standing against the
// targets of issue 6, in Markdown.
func (r *results) write(w io.Writer) {
	var u unix.Utsname
	unix.Uname(&u)
	fmt.Fprintf(w, "%s, %d CPUs, Linux %s; %d rounds (%d start-to-exit runs, %d signals, %d shutdowns per init and round; %d orphans per reaping run), %d idle windows of %s; took %s; load average %s.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), unix.ByteSliceToString(u.Release[:]),
		r.cfg.rounds, r.cfg.starts, r.cfg.signals, r.cfg.shutdowns, r.cfg.orphans, r.cfg.idleRounds, r.cfg.idle, r.took.Round(time.Second), r.load)
	fmt.Fprintln(w, "| workload | init | median | spread (p25–p75) | p99 | n | × tini |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|")
	for _, wl := range workloads {
		base := median(r.get(wl, baseline))
		shown := map[string]bool{}
		for _, c := range r.inits {
			s := r.get(wl, c.name)
			// nodeinit's three rows share one binary: its size once.
			file := c.binary + c.reference
			if len(s) == 0 || (wl == wSize && shown[file]) {
				continue
			}
			shown[file] = true
			m := median(s)
			ratio := "–"
			if base > 0 {
				ratio = fmt.Sprintf("%.2f", m/base)
			}
			p99 := ""
			if wl == wSignal {
				p99 = format(wl, percentile(s, 99))
			}
			name := c.name
			if wl == wSize && r.notes[c.name] != "" {
				name += " (" + r.notes[c.name] + ")"
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s–%s | %s | %d | %s |\n", wl, name, format(wl, m),
				format(wl, percentile(s, 25)), format(wl, percentile(s, 75)), p99, len(s), ratio)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| target (issue 6) | nodeinit | met |")
	fmt.Fprintln(w, "|---|---:|---|")
	for _, t := range targets {
		s := r.get(t.workload, t.init)
		if len(s) == 0 {
			continue
		}
		v := t.stat(s)
		shown := format(t.workload, v)
		if t.ratio {
			base := median(r.get(t.workload, baseline))
			if base == 0 {
				continue
			}
			v /= base
			shown = fmt.Sprintf("%.2f × tini", v)
		}
		met := "yes"
		if v > t.limit {
			met = "**no**"
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", t.what, shown, met)
	}
	r.writeCalibration(w)
	r.writeLogs(w)
}

// writeCalibration sets the start-to-exit target beside its calibration:
// the issue puts "a bare Go program that forks /bin/true" at about 1.28 ×
// tini, so the target leaves nodeinit about 2 % over that program. The line
// gives go-bare's ratio in this run, and nodeinit's to go-bare.
func (r *results) writeCalibration(w io.Writer) {
	tini, bare, ni := median(r.get(wStart, baseline)), median(r.get(wStart, "go-bare")), median(r.get(wStart, "nodeinit"))
	if tini == 0 || bare == 0 || ni == 0 {
		return
	}
	fmt.Fprintf(w, "\nstart-to-exit calibration: go-bare (the issue's bare Go program, \"about 1.28 ×\" there) %.2f × tini in this run; nodeinit %.2f × go-bare.\n", bare/tini, ni/bare)
}

// A target is one line of issue 6's table, checked on one init's samples.
type target struct {
	what     string
	workload string
	init     string
	stat     func([]float64) float64
	ratio    bool // limit is a ratio to tini's median
	limit    float64
}

var targets = []target{
	{"start-to-exit ≤ 1.3 × tini", wStart, "nodeinit", median, true, 1.3},
	{"reaping ≤ 1.05 × tini", wReap, "nodeinit", median, true, 1.05},
	{"signal latency median ≤ 1 ms", wSignal, "nodeinit", median, false, 1e6},
	{"signal latency p99 ≤ 5 ms", wSignal, "nodeinit", func(s []float64) float64 { return percentile(s, 99) }, false, 5e6},
	{"shutdown ≤ 5 ms after the proxy exits", wShutdownLast, "nodeinit+proxy", median, false, 5e6},
	{"shutdown ≤ 5 ms after the executor exits (no proxy)", wShutdown, "nodeinit", median, false, 5e6},
	{"idle CPU ≤ 20 ms per minute", wIdleCPU, "nodeinit", median, false, 20e6},
	{"idle CPU ≤ 20 ms per minute, with proxy", wIdleCPU, "nodeinit+proxy", median, false, 20e6},
	{"VmHWM ≤ 4 MiB", wHWM, "nodeinit", median, false, 4 << 20},
	{"VmHWM ≤ 4 MiB, with proxy", wHWM, "nodeinit+proxy", median, false, 4 << 20},
	{"binary ≤ 5 MiB", wSize, "nodeinit", median, false, 5 << 20},
}

// format prints a value in the unit of its workload.
func format(workload string, v float64) string {
	switch workload {
	case wSize, wRSS, wHWM, wAnon:
		if v >= 1<<20 {
			return fmt.Sprintf("%.2f MiB", v/(1<<20))
		}
		return fmt.Sprintf("%.0f KiB", v/(1<<10))
	case wIdleCPU:
		return fmt.Sprintf("%.2f ms/min", v/1e6)
	}
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%.3f s", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.2f ms", v/1e6)
	default:
		return fmt.Sprintf("%.0f µs", v/1e3)
	}
}

func median(s []float64) float64 { return percentile(s, 50) }

// percentile interpolates linearly between the closest ranks.
func percentile(s []float64, p float64) float64 {
	if len(s) == 0 {
		return 0
	}
	s = slices.Sorted(slices.Values(s))
	pos := p / 100 * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}

// binaryKind says whether an executable is static and stripped, since only
// a stripped static binary compares fairly.
func binaryKind(path string) string {
	f, err := elf.Open(path)
	if err != nil {
		return "not ELF"
	}
	defer f.Close()
	var kind []string
	static := true
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			static = false
		}
	}
	if static {
		kind = append(kind, "static")
	} else {
		kind = append(kind, "dynamic")
	}
	if f.Section(".symtab") == nil {
		kind = append(kind, "stripped")
	} else {
		kind = append(kind, "not stripped")
	}
	return strings.Join(kind, ", ")
}
