// Command failures shows a `go test -json` run as `go test -v` shows it,
// and ends it, when a test failed, with the last log entries of each failed
// test that has no failed subtest: a long run's failure is then in its last
// lines, where a CI log's tail shows it. It exits 1 unless every package
// passed, so that it can end a pipe whose first command's status is lost.
//
// Usage: go test -json ... | go run ./test/failures
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// lastEntries is how many log entries of each failed test the summary
// shows, each by its first line and at most maxWidth bytes of it.
const (
	lastEntries = 12
	maxWidth    = 240
)

// event is the part of a test2json event used here.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// run is what one test printed and how it ended.
type run struct {
	entries []string // the first line of each log entry, the last lastEntries
	failed  bool
}

func main() {
	ok, summary := follow(os.Stdin, os.Stdout)
	fmt.Print(summary)
	if !ok {
		os.Exit(1)
	}
}

// follow copies each event's output from r to w, and returns whether
// every package passed and the summary of the failed tests.
func follow(r io.Reader, w io.Writer) (bool, string) {
	tests := map[string]*run{}
	var order []string
	passed, failed := 0, 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(w, sc.Text()) // not an event: the go command's own words
			continue
		}
		if e.Output != "" {
			fmt.Fprint(w, e.Output)
		}
		if e.Test == "" {
			switch e.Action {
			case "pass":
				passed++
			case "fail":
				failed++
			}
			continue
		}
		key := e.Package + " " + e.Test
		t, seen := tests[key]
		if !seen {
			t = &run{}
			tests[key] = t
			order = append(order, key)
		}
		switch e.Action {
		case "fail":
			t.failed = true
		case "output":
			t.add(e.Output)
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(w, "failures: reading the events: %v\n", err)
		failed++
	}
	return failed == 0 && passed > 0, summarize(tests, order)
}

// add keeps the first line of a log entry: a line indented by four
// spaces, "file_test.go:NN: ...". Continuation lines and the test's
// headers ("=== RUN", "--- FAIL") are not entries.
func (t *run) add(line string) {
	s := strings.TrimRight(line, "\n")
	body := strings.TrimLeft(s, " ")
	if len(s)-len(body) < 4 || strings.HasPrefix(body, "--- ") || strings.HasPrefix(body, "=== ") {
		return
	}
	if f, _, ok := strings.Cut(body, ": "); !ok || !strings.Contains(f, ".go:") || strings.Contains(f, " ") {
		return
	}
	if len(body) > maxWidth {
		body = body[:maxWidth] + " …"
	}
	if len(t.entries) == lastEntries {
		t.entries = slices.Delete(t.entries, 0, 1)
	}
	t.entries = append(t.entries, body)
}

// summarize lists the failed tests without a failed subtest, each with its
// last log entries; nothing when none failed.
func summarize(tests map[string]*run, order []string) string {
	var b strings.Builder
	for _, key := range order {
		t := tests[key]
		if !t.failed || slices.ContainsFunc(order, func(k string) bool { return strings.HasPrefix(k, key+"/") && tests[k].failed }) {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("--- the failed tests, each with its last log entries:\n")
		}
		fmt.Fprintf(&b, "%s\n", key)
		for _, e := range t.entries {
			fmt.Fprintf(&b, "    %s\n", e)
		}
	}
	return b.String()
}
