package main

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// The outcomes an entry of the list can give a test.
const (
	// fails: the test runs and fails; its output holds the entry's
	// evidence, when it names one.
	fails = "fails"
	// skips: the test runs and skips itself.
	skips = "skips"
	// notRun: the test is not started (go test -skip), or with the test
	// "*" the package is not built: it hangs until the timeout, takes
	// minutes under the emulator, or what it does there depends on the
	// machine's load.
	notRun = "not-run"
)

// entry is one line of the list: a test (or with notRun, "*": a whole
// package) that does not pass under the emulator for the architectures
// named, and why.
type entry struct {
	line     int
	arches   []string
	outcome  string
	pkg      string   // as the go command names it relative to the module: ./test/integration
	test     []string // the name's parts, split at "/"; "*" matches any one part
	evidence string   // with fails: a string the failed test's output holds
	why      string
}

// parseList reads the list. Each entry is one line,
//
//	ARCH[,ARCH...] OUTCOME PACKAGE TEST ["EVIDENCE"]
//
// TEST is a test's full name, its parts split at "/", where "*" matches
// any one part; "**" (with fails and EVIDENCE) is every test of the
// package whose own output holds the evidence: a cause, not a name.
// and the lines indented by a tab that follow a run of entries are their
// reason, which every entry must have. '#' starts a comment line.
func parseList(r io.Reader) ([]entry, error) {
	var all []entry
	var group []int // the entries the next reason line is for
	inReason := false
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#"):
			continue
		case strings.HasPrefix(line, "\t"):
			if len(group) == 0 {
				return nil, fmt.Errorf("line %d: a reason before any entry", n)
			}
			for _, i := range group {
				all[i].why = strings.TrimSpace(all[i].why + " " + strings.TrimSpace(line))
			}
			inReason = true
			continue
		}
		if inReason {
			group, inReason = nil, false
		}
		e, err := parseEntry(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		e.line = n
		group = append(group, len(all))
		all = append(all, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(group) > 0 && !inReason {
		return nil, fmt.Errorf("line %d: the last entries have no reason", all[len(all)-1].line)
	}
	return all, nil
}

func parseEntry(line string) (entry, error) {
	head, evidence, quoted := strings.Cut(line, `"`)
	f := strings.Fields(head)
	if len(f) != 4 {
		return entry{}, fmt.Errorf("want ARCH OUTCOME PACKAGE TEST [\"EVIDENCE\"], got %q", line)
	}
	e := entry{arches: strings.Split(f[0], ","), outcome: f[1], pkg: f[2], test: strings.Split(f[3], "/")}
	if quoted {
		s, err := strconv.Unquote(`"` + evidence)
		if err != nil {
			return entry{}, fmt.Errorf("the evidence %q: %v", `"`+evidence, err)
		}
		e.evidence = s
	}
	switch {
	case e.outcome != fails && e.outcome != skips && e.outcome != notRun:
		return entry{}, fmt.Errorf("outcome %q: want %s, %s or %s", e.outcome, fails, skips, notRun)
	case !strings.HasPrefix(e.pkg, "./"):
		return entry{}, fmt.Errorf("package %q: want a path relative to the module, ./dir", e.pkg)
	case e.outcome == notRun && len(e.test) > 1:
		return entry{}, fmt.Errorf("%s: a top-level test or \"*\", not a subtest (go test -skip cannot leave out one subtest of several tests)", notRun)
	case e.outcome != notRun && e.test[0] == "*" && len(e.test) == 1:
		return entry{}, fmt.Errorf("\"*\" alone is a whole package: only %s", notRun)
	case e.evidence != "" && e.outcome != fails:
		return entry{}, fmt.Errorf("evidence is for %s", fails)
	case e.anyTest() && (e.outcome != fails || e.evidence == ""):
		return entry{}, fmt.Errorf("\"**\", any test, is for %s with evidence", fails)
	}
	return e, nil
}

// forArch is the entries that name arch.
func forArch(all []entry, arch string) []entry {
	var out []entry
	for _, e := range all {
		if slices.Contains(e.arches, arch) {
			out = append(out, e)
		}
	}
	return out
}

// matches reports whether the entry names test (a full name, such as
// TestX/pid1) of package pkg.
func (e entry) matches(pkg, test string) bool {
	if e.pkg != pkg {
		return false
	}
	if len(e.test) == 1 && e.test[0] == "*" || e.anyTest() {
		return true
	}
	parts := strings.Split(test, "/")
	if len(parts) != len(e.test) {
		return false
	}
	for i, p := range e.test {
		if p != "*" && p != parts[i] {
			return false
		}
	}
	return true
}

// anyTest reports whether the entry is for any test of its package (at any
// depth) whose output holds its evidence.
func (e entry) anyTest() bool { return len(e.test) == 1 && e.test[0] == "**" }

// wholePackage reports whether the entry leaves out its whole package.
func (e entry) wholePackage() bool { return e.outcome == notRun && e.test[0] == "*" }

// String names the entry as the list does, with its line.
func (e entry) String() string {
	return fmt.Sprintf("line %d: %s %s", e.line, e.outcome, strings.Join(e.test, "/"))
}
