package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nodeinit/nodeinit/test/bench/host"
)

// The log-throughput workload (issue 15): test/bench/logwriter writes
// numbered lines of logLine bytes, each with its own write(2) as klog does,
// and the rows differ only in where they go. The rate is the bytes over the
// time from the exec of PID 1 to its exit, so with --log-dir it includes
// draining the pipe into the files.
const (
	wLogRate = "log throughput"
	wLogCPU  = "nodeinit CPU per GiB"
	logLine  = 200
	// logRunLimit bounds one run of 1 GiB, written at 100 MiB/s or so.
	logRunLimit = 10 * time.Minute
)

// A logMode is one way the writer's output reaches a file.
type logMode struct {
	name     string
	nodeinit bool // nodeinit is PID 1 and the writer its executor; else the writer is PID 1
	logDir   bool // with --log-dir: through nodeinit's pipe into rotated files
	ownFile  bool // the writer opens a file itself (-o); else it writes to its stdout, a file
}

// logBase is the row the others are compared with.
const logBase = "writer → its own file"

var logModes = []logMode{
	{name: logBase, nodeinit: true, ownFile: true},
	{name: "writer → nodeinit --log-dir", nodeinit: true, logDir: true},
	{name: "writer → stdout, a file (no init)"},
	{name: "writer → stdout, a file (nodeinit, no --log-dir)", nodeinit: true},
}

// logResults is what the workload found beyond its samples: the check of
// every line of every --log-dir run.
type logResults struct {
	bytes int64 // as asked for; each row writes the whole lines that fit
	batch int
	runs  int
	files []int    // files of each --log-dir run whose lines were all there
	wrong []string // what was wrong in the others
	// before and after are the load averages before the first run and
	// after the last.
	before, after string
}

// logThroughput runs every mode once, starting with a different one each
// round.
func (b *bench) logThroughput(round int) error {
	if round == 0 {
		b.logs.before = host.LoadAverage()
	}
	defer func() { b.logs.after = host.LoadAverage() }()
	for _, m := range rotate(logModes, round) {
		if err := b.logRun(m); err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
	}
	b.logs.runs++
	return nil
}

// logRun runs the writer once in mode m and records its rate and, under
// nodeinit, nodeinit's own CPU time per GiB: the rusage of PID 1, which
// holds the writer's (reaped) too, less what the writer stamped as its own.
func (b *bench) logRun(m logMode) error {
	work, err := os.MkdirTemp(b.h.dir, "logs-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	lines := b.cfg.logBytes / logLine
	total := lines * logLine
	fifo := b.h.fifoPath()
	child := []string{b.h.logwriter, fmt.Sprintf("-bytes=%d", total), fmt.Sprintf("-line=%d", logLine),
		fmt.Sprintf("-batch=%d", b.cfg.logBatch), "-stamp=" + fifo}
	own := filepath.Join(work, "own.log")
	if m.ownFile {
		child = append(child, "-o="+own)
	}
	logDir := filepath.Join(work, "logs")
	c := &contender{name: m.name, argv: func(_ *helpers, _ []string, child []string) []string {
		if !m.nodeinit {
			return child
		}
		a := []string{b.nodeinit, "--run-proxy=false"}
		if m.logDir {
			// Every rotated file is kept, to be checked.
			a = append(a, "--log-dir="+logDir, "--max-log-backups=0", "--max-log-age=0")
		}
		return append(append(a, "--"), child...)
	}}
	r, err := b.h.start(c, fifo, child, nil, logRunLimit)
	if err != nil {
		return err
	}
	defer r.close()
	if err := r.waitOK(); err != nil {
		return err
	}
	writerCPU, err := r.expect("writer-cpu", 10*time.Second)
	if err != nil {
		return err
	}
	b.add(wLogRate, c, float64(total)/(float64(r.end-r.start)/1e9))
	if m.nodeinit {
		ru := r.cmd.ProcessState.SysUsage().(*syscall.Rusage)
		initCPU := ru.Utime.Nano() + ru.Stime.Nano() - writerCPU
		b.add(wLogCPU, c, float64(initCPU)*float64(1<<30)/float64(total))
	}
	switch {
	case m.logDir:
		if files, err := checkLines(logDir, "executor", lines); err != nil {
			b.logs.wrong = append(b.logs.wrong, err.Error())
		} else {
			b.logs.files = append(b.logs.files, files)
		}
	case m.ownFile:
		return sizeAtLeast(own, total)
	default:
		return sizeAtLeast(r.log.Name(), total)
	}
	return nil
}

// sizeAtLeast checks that a row without --log-dir did write everything.
func sizeAtLeast(path string, size int64) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.Size() < size {
		return fmt.Errorf("%s holds %d bytes, want %d", path, fi.Size(), size)
	}
	return nil
}

// checkLines reads the task's files in dir, oldest first (the backups, whose
// names sort by time, then NAME.log), and checks that together they hold the
// writer's lines 0 to lines-1, each once, whole and in order, and that no
// file ends inside a line. It returns the number of files.
func checkLines(dir, name string, lines int64) (int, error) {
	backups, err := filepath.Glob(filepath.Join(dir, name+"-*.log"))
	if err != nil {
		return 0, err
	}
	slices.Sort(backups)
	files := append(backups, filepath.Join(dir, name+".log"))
	next := int64(0)
	for _, path := range files {
		if next, err = checkFile(path, next); err != nil {
			return 0, err
		}
	}
	if next != lines {
		return 0, fmt.Errorf("%d lines across %d files, want %d: lines lost", next, len(files), lines)
	}
	return len(files), nil
}

// checkFile checks that path holds whole lines numbered from next on, and
// returns the number after its last.
func checkFile(path string, next int64) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return next, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	line := make([]byte, logLine)
	for {
		n, err := io.ReadFull(r, line)
		switch {
		case err == io.EOF:
			return next, nil
		case err == io.ErrUnexpectedEOF:
			return next, fmt.Errorf("%s ends inside a line: %q", path, line[:n])
		case err != nil:
			return next, err
		}
		got, ok := lineNumber(line)
		if !ok {
			return next, fmt.Errorf("%s: where line %d belongs there is not a whole line: %.40q", path, next, line)
		}
		if got != next {
			return next, fmt.Errorf("%s: line %d where line %d belongs (lost, doubled or out of order)", path, got, next)
		}
		next++
	}
}

// lineNumber parses a line of logwriter's: 11 digits, a space, 'x' up to a
// newline at the end.
func lineNumber(line []byte) (int64, bool) {
	const width = 11
	if line[width] != ' ' || line[len(line)-1] != '\n' || line[len(line)-2] != 'x' {
		return 0, false
	}
	var n int64
	for _, c := range line[:width] {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// writeLogs prints the workload's rows and returns the verdicts on its
// targets.
func (r *results) writeLogs(w io.Writer) []verdict {
	l := r.logs
	if l == nil || l.runs == 0 {
		return nil
	}
	how := "one write(2) per line"
	if l.batch > 1 {
		how = fmt.Sprintf("%d lines per write(2)", l.batch)
	}
	fmt.Fprintf(w, "\nLog throughput: %s of %d-byte lines, %s, %d runs per row; the rate counts from the exec of PID 1 to its exit. Load average %s before, %s after.\n\n",
		formatBytes(float64(l.bytes)), logLine, how, l.runs, l.before, l.after)
	fmt.Fprintln(w, "| row | throughput | spread (p25–p75) | n | × own file | nodeinit CPU per GiB |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
	base := median(r.get(wLogRate, logBase))
	for _, m := range logModes {
		s := r.get(wLogRate, m.name)
		if len(s) == 0 {
			continue
		}
		cpu := "–"
		if c := r.get(wLogCPU, m.name); len(c) > 0 {
			cpu = format("", median(c))
		}
		fmt.Fprintf(w, "| %s | %s | %s–%s | %d | %.2f | %s |\n", m.name, formatRate(median(s)),
			formatRate(percentile(s, 25)), formatRate(percentile(s, 75)), len(s), median(s)/base, cpu)
	}
	rate := func(row, of string) float64 { return median(r.get(wLogRate, row)) / median(r.get(wLogRate, of)) }
	logDir := rate(logModes[1].name, logBase)
	// Without --log-dir the writer writes to the file nodeinit inherited;
	// 0.95 leaves room for the noise of a shared machine, not for a cost.
	inherit := rate(logModes[3].name, logModes[2].name)
	checked := strings.Join(l.wrong, "; ")
	if len(l.wrong) == 0 && len(l.files) > 0 {
		files := fmt.Sprint(slices.Min(l.files))
		if slices.Max(l.files) != slices.Min(l.files) {
			files += fmt.Sprintf("–%d", slices.Max(l.files))
		}
		checked = fmt.Sprintf("%d lines whole, once, in order, over %s files, in each of %d run(s)",
			l.bytes/logLine, files, len(l.files))
	}
	return []verdict{
		{15, "log throughput with --log-dir ≥ 0.8 × the writer writing its own file", fmt.Sprintf("%.2f ×", logDir), logDir >= 0.8},
		{15, "log throughput without --log-dir ≥ 0.95 × with no init (nodeinit adds nothing)", fmt.Sprintf("%.2f ×", inherit), inherit >= 0.95},
		{15, "--log-dir: no line lost, split or doubled across rotations", checked, len(l.wrong) == 0},
	}
}

func formatRate(v float64) string { return fmt.Sprintf("%.0f MiB/s", v/(1<<20)) }

func formatBytes(v float64) string {
	if v >= 1<<30 {
		return fmt.Sprintf("%.0f GiB", v/(1<<30))
	}
	return fmt.Sprintf("%.0f MiB", v/(1<<20))
}
