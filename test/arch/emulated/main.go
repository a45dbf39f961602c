// Command emulated runs packages' tests built for another architecture, which
// the kernel runs under qemu-user (binfmt_misc), and holds their outcome to
// a list of what does not pass there, each with its reason (known.txt,
// beside this file). Nothing is left out silently: the run fails when a
// test not on the list fails or skips, when a test the list says fails
// passes (take it off the list), when a failing test's output lacks the
// evidence its entry names, when an entry names no test, and when a test
// does not run at all (its package's test binary ended before it).
//
// Usage (from the module's root, as make test-arm64 runs it):
//
//	go run ./test/arch/emulated -goarch arm64 [-list FILE] [-timeout 10m] PACKAGES...
//
// The tests run with CI=true, so a missing prerequisite fails rather than
// skips. It prints each package's outcome and time, and every failure's
// output in full unless the list expects it.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"time"
)

func main() {
	goarch := flag.String("goarch", "", "the architecture to build the tests for (arm64, s390x...)")
	list := flag.String("list", "test/arch/emulated/known.txt", "the list of what does not pass under the emulator")
	timeout := flag.String("timeout", "10m", "go test's -timeout for each package")
	runOnly := flag.String("run", "", "go test's -run: only the top-level tests it matches")
	flag.Parse()
	if *goarch == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: emulated -goarch ARCH [-list FILE] [-timeout D] [-run REGEXP] PACKAGES...")
		os.Exit(2)
	}
	if err := run(*goarch, *list, *timeout, *runOnly, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "emulated:", err)
		os.Exit(1)
	}
}

func run(goarch, listFile, timeout, runOnly string, patterns []string) error {
	f, err := os.Open(listFile)
	if err != nil {
		return err
	}
	all, err := parseList(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", listFile, err)
	}
	entries := forArch(all, goarch)
	env := append(os.Environ(), "GOARCH="+goarch, "CI=true")

	mod, err := output(nil, "go", "list", "-m")
	if err != nil {
		return err
	}
	paths, err := output(env, "go", append([]string{"list"}, patterns...)...)
	if err != nil {
		return err
	}
	r := newReport(entries, strings.TrimSpace(mod))
	if runOnly != "" {
		top, _, _ := strings.Cut(runOnly, "/")
		if r.runOnly, err = regexp.Compile(top); err != nil {
			return fmt.Errorf("-run: %w", err)
		}
	}
	var pkgs []string
	for _, ip := range strings.Fields(paths) {
		pkg := r.rel(ip)
		r.selected[pkg] = true
		if i := slices.IndexFunc(entries, func(e entry) bool { return e.wholePackage() && e.pkg == pkg }); i >= 0 {
			fmt.Printf("%-32s not run: %s (%s)\n", pkg, entries[i].why, entries[i])
			r.used(i)
			continue
		}
		pkgs = append(pkgs, pkg)
		r.pkgs[pkg] = &pkgRun{}
	}
	if len(pkgs) == 0 {
		return fmt.Errorf("no package to run")
	}

	start := time.Now()
	// The tests each package has, to find those that never ran.
	listArgs := []string{"test", "-json", "-list", "."}
	if runOnly != "" {
		listArgs[3] = runOnly
	}
	if err := r.events(env, false, append(listArgs, pkgs...)); err != nil {
		return err
	}
	skip := r.notRun(os.Stdout)
	args := []string{"test", "-json", "-count=1", "-timeout", timeout}
	if runOnly != "" {
		args = append(args, "-run", runOnly)
	}
	if len(skip) > 0 {
		args = append(args, "-skip", "^("+strings.Join(skip, "|")+")$")
	}
	if err := r.events(env, true, append(args, pkgs...)); err != nil {
		return err
	}
	r.judge(os.Stdout, pkgs)
	fmt.Printf("GOARCH=%s under the emulator: %d packages in %.0f s\n", goarch, len(pkgs), time.Since(start).Seconds())
	if len(r.problems) > 0 {
		fmt.Println("--- what the list does not account for:")
		for _, p := range r.problems {
			fmt.Println(p)
		}
		return fmt.Errorf("%d tests or entries differ from %s", len(r.problems), listFile)
	}
	return nil
}

// notRun checks that each entry that leaves out a test of a package run
// names one of its tests, and returns their names for go test -skip.
func (r *report) notRun(w io.Writer) []string {
	var skip []string
	for i, e := range r.entries {
		if e.outcome != notRun || e.wholePackage() || r.pkgs[e.pkg] == nil {
			continue
		}
		r.used(i)
		if r.runOnly != nil && !r.runOnly.MatchString(e.test[0]) {
			continue // not asked for
		}
		if !slices.Contains(r.pkgs[e.pkg].listed, e.test[0]) {
			r.problem("%s %s: names no test of the package", e.pkg, e)
			continue
		}
		skip = append(skip, regexp.QuoteMeta(e.test[0]))
		fmt.Fprintf(w, "%-32s %s not run: %s (%s)\n", e.pkg, e.test[0], e.why, e)
	}
	return skip
}

// event is the part of a test2json event used here.
type event struct {
	Action     string
	Package    string
	ImportPath string // of a build's output: "path [path.test]"
	Test       string
	Output     string
	Elapsed    float64
}

// result is one test's outcome and output.
type result struct {
	pkg, test string
	action    string
	out       bytes.Buffer
}

// pkgRun is what one package's test binary did.
type pkgRun struct {
	listed  []string // its top-level tests, from go test -list
	action  string   // pass or fail
	elapsed float64
	out     bytes.Buffer // its output outside any test
}

type report struct {
	entries  []entry
	usedOnes []bool
	module   string
	pkgs     map[string]*pkgRun // the packages run
	selected map[string]bool    // and those left out whole
	runOnly  *regexp.Regexp     // the top-level tests run, when not all
	results  map[string]*result // by package and name
	order    []*result
	problems []string
}

func newReport(entries []entry, module string) *report {
	return &report{entries: entries, usedOnes: make([]bool, len(entries)), module: module,
		results: map[string]*result{}, pkgs: map[string]*pkgRun{}, selected: map[string]bool{}}
}

func (r *report) rel(importPath string) string {
	if importPath == r.module {
		return "."
	}
	return "./" + strings.TrimPrefix(importPath, r.module+"/")
}

func (r *report) problem(format string, args ...any) {
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

func (r *report) used(i int) { r.usedOnes[i] = true }

// events runs the go command and reads its events (read).
func (r *report) events(env []string, outcomes bool, args []string) error {
	cmd := exec.Command("go", args...)
	cmd.Env = env
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	err = r.read(stdout, os.Stdout, outcomes)
	_ = cmd.Wait() // its status is not the verdict: judge is
	return err
}

// read reads go test -json's events: the test names of go test -list, or
// the outcomes of a run, writing each package's to w as it ends.
func (r *report) read(rd io.Reader, w io.Writer, outcomes bool) error {
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(w, sc.Text()) // the go command's own words
			continue
		}
		if e.Package == "" && e.ImportPath != "" {
			e.Package = strings.Fields(e.ImportPath)[0]
		}
		p := r.pkgs[r.rel(e.Package)]
		if p == nil {
			continue
		}
		if !outcomes {
			if e.Action == "output" && e.Test == "" && isTestName(e.Output) {
				p.listed = append(p.listed, strings.TrimSpace(e.Output))
			}
			continue
		}
		if e.Test == "" {
			switch e.Action {
			case "output", "build-output":
				p.out.WriteString(e.Output)
			case "pass", "fail", "skip":
				p.action, p.elapsed = e.Action, e.Elapsed
				fmt.Fprintf(w, "%-4s %-32s %6.1f s\n", e.Action, r.rel(e.Package), e.Elapsed)
			}
			continue
		}
		key := r.rel(e.Package) + " " + e.Test
		res := r.results[key]
		if res == nil {
			res = &result{pkg: r.rel(e.Package), test: e.Test}
			r.results[key] = res
			r.order = append(r.order, res)
		}
		switch e.Action {
		case "output":
			res.out.WriteString(e.Output)
		case "pass", "fail", "skip":
			res.action = e.Action
			if !strings.Contains(e.Test, "/") {
				fmt.Fprintf(w, "     %-4s %s (%.1f s)\n", e.Action, e.Test, e.Elapsed)
			}
		}
	}
	return sc.Err()
}

var testName = regexp.MustCompile(`^(Test|Example|Fuzz)[A-Za-z0-9_]*\n$`)

func isTestName(s string) bool { return testName.MatchString(s) }

// entryFor is the index of the entry of outcome that names the test, or -1.
// An entry for any test ("**") names those whose output holds its
// evidence.
func (r *report) entryFor(res *result, outcome string) int {
	return slices.IndexFunc(r.entries, func(e entry) bool {
		return e.outcome == outcome && e.matches(res.pkg, res.test) && (!e.anyTest() || strings.Contains(res.out.String(), e.evidence))
	})
}

// expectedFailure reports whether res failed as the list says: listed
// itself or through a test it is a subtest of, or failed only through
// subtests that did. (A subtest's name may hold a "/" of its own, so the
// subtests are those whose names begin with res's and a "/".)
func (r *report) expectedFailure(res *result) bool {
	if r.entryFor(res, fails) >= 0 || r.listedAncestor(res) {
		return true
	}
	failed := slices.DeleteFunc(slices.Clone(r.order), func(c *result) bool {
		return c.pkg != res.pkg || c.action != "fail" || !strings.HasPrefix(c.test, res.test+"/")
	})
	leaves := 0
	for _, c := range failed {
		if slices.ContainsFunc(failed, func(d *result) bool { return strings.HasPrefix(d.test, c.test+"/") }) {
			continue // it failed through its own subtests
		}
		if r.entryFor(c, fails) < 0 && !r.listedAncestor(c) {
			return false
		}
		leaves++
	}
	return leaves > 0
}

// listedAncestor reports whether a test that res is a subtest of is listed
// as failing.
func (r *report) listedAncestor(res *result) bool {
	for name := res.test; strings.Contains(name, "/"); {
		name = name[:strings.LastIndex(name, "/")]
		if a := r.results[res.pkg+" "+name]; a != nil && r.entryFor(a, fails) >= 0 {
			return true
		}
	}
	return false
}

// judge holds every outcome to the list.
func (r *report) judge(w io.Writer, pkgs []string) {
	counts := map[string]map[string]int{}
	for _, pkg := range pkgs {
		counts[pkg] = map[string]int{}
	}
	for _, res := range r.order {
		name := res.pkg + " " + res.test
		listedFails, listedSkips := r.entryFor(res, fails), r.entryFor(res, skips)
		for _, i := range []int{listedFails, listedSkips} {
			if i >= 0 {
				r.used(i)
			}
		}
		switch res.action {
		case "pass":
			counts[res.pkg]["passed"]++
			if listedFails >= 0 || listedSkips >= 0 {
				r.problem("%s: passed, and the list says it does not (%s): take it off the list", name, r.entries[max(listedFails, listedSkips)])
			}
		case "skip":
			if listedSkips < 0 {
				r.problem("%s: skipped, and it is not on the list:\n%s", name, tail(res.out.String(), 40))
				continue
			}
			counts[res.pkg]["skipped as listed"]++
		case "fail":
			if !r.expectedFailure(res) {
				r.problem("%s: failed, and it is not on the list:\n%s", name, tail(res.out.String(), 60))
				continue
			}
			if listedFails < 0 {
				continue // a parent or a subtest of tests that are listed
			}
			counts[res.pkg]["failed as listed"]++
			if ev := r.entries[listedFails].evidence; ev != "" && !strings.Contains(r.outputWithin(res), ev) {
				r.problem("%s: failed, but its output lacks %q, the evidence of %s:\n%s", name, ev, r.entries[listedFails], tail(res.out.String(), 40))
			}
		default:
			r.problem("%s: started and never ended (its package's test binary ended first):\n%s", name, tail(res.out.String(), 40))
		}
	}
	for _, pkg := range pkgs {
		p := r.pkgs[pkg]
		for _, t := range p.listed {
			if r.results[pkg+" "+t] == nil && !slices.ContainsFunc(r.entries, func(e entry) bool { return e.outcome == notRun && e.matches(pkg, t) }) {
				r.problem("%s %s: did not run", pkg, t)
			}
		}
		noTests := p.action == "skip" && len(p.listed) == 0
		if p.action != "pass" && !noTests && !slices.ContainsFunc(r.order, func(res *result) bool { return res.pkg == pkg && res.action == "fail" }) {
			r.problem("%s: the package's run ended %q without a failed test:\n%s", pkg, p.action, tail(p.out.String(), 40))
		}
		var parts []string
		for _, k := range []string{"passed", "failed as listed", "skipped as listed"} {
			if n := counts[pkg][k]; n > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", n, k))
			}
		}
		fmt.Fprintf(w, "     %-32s %s\n", pkg, strings.Join(parts, ", "))
	}
	for i, e := range r.entries {
		switch {
		case r.usedOnes[i] || !r.selected[e.pkg]:
		case e.anyTest():
			r.problem("%s %s: no test of this run failed with %q", e.pkg, e, e.evidence)
		case r.runOnly == nil || e.test[0] == "*" || r.runOnly.MatchString(e.test[0]):
			r.problem("%s %s: names no test of this run", e.pkg, e)
		}
	}
}

// outputWithin is the output of res and of its subtests.
func (r *report) outputWithin(res *result) string {
	var b strings.Builder
	for _, c := range r.order {
		if c.pkg == res.pkg && (c.test == res.test || strings.HasPrefix(c.test, res.test+"/")) {
			b.Write(c.out.Bytes())
		}
	}
	return b.String()
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"    [...]"}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// output runs a go command and returns its stdout.
func output(env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}
