package main

import (
	"strings"
	"testing"
)

// A run as `go test -json` writes it: a parent whose one subtest failed
// after more log entries than the summary keeps, a subtest that passed,
// and the package's failure.
const failedRun = `{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"run","Package":"p","Test":"TestA/ok"}
{"Action":"output","Package":"p","Test":"TestA/ok","Output":"    a_test.go:5: fine\n"}
{"Action":"pass","Package":"p","Test":"TestA/ok"}
{"Action":"run","Package":"p","Test":"TestA/bad"}
{"Action":"output","Package":"p","Test":"TestA/bad","Output":"    a_test.go:9: entry 1\n"}
{"Action":"output","Package":"p","Test":"TestA/bad","Output":"    a_test.go:9: entry 2\n"}
{"Action":"output","Package":"p","Test":"TestA/bad","Output":"    a_test.go:10: the failure: want 0\n"}
{"Action":"output","Package":"p","Test":"TestA/bad","Output":"        a continuation line\n"}
{"Action":"output","Package":"p","Test":"TestA/bad","Output":"    a_test.go:11: a log after it\n"}
{"Action":"output","Package":"p","Test":"TestA/bad","Output":"    a_test.go:12: 3\n"}
{"Action":"output","Package":"p","Test":"TestA/bad","Output":"    a_test.go:12: 4\n"}
{"Action":"output","Package":"p","Test":"TestA/bad","Output":"    a_test.go:12: 5\n"}
{"Action":"output","Package":"p","Test":"TestA/bad","Output":"    a_test.go:12: 6\n"}
{"Action":"output","Package":"p","Test":"TestA/bad","Output":"    a_test.go:12: 7\n"}
{"Action":"output","Package":"p","Test":"TestA/bad","Output":"    a_test.go:12: 8\n"}
{"Action":"output","Package":"p","Test":"TestA/bad","Output":"    a_test.go:12: 9\n"}
{"Action":"output","Package":"p","Test":"TestA/bad","Output":"    a_test.go:12: 10\n"}
{"Action":"output","Package":"p","Test":"TestA/bad","Output":"    a_test.go:12: 11\n"}
{"Action":"output","Package":"p","Test":"TestA/bad","Output":"    --- FAIL: TestA/bad (0.00s)\n"}
{"Action":"fail","Package":"p","Test":"TestA/bad"}
{"Action":"output","Package":"p","Test":"TestA","Output":"--- FAIL: TestA (0.00s)\n"}
{"Action":"fail","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Output":"FAIL\n"}
{"Action":"fail","Package":"p"}
`

func TestAFailedRunEndsWithTheFailedLeafsLastEntries(t *testing.T) {
	var out strings.Builder
	ok, summary := follow(strings.NewReader(failedRun), &out)
	if ok {
		t.Errorf("a run whose package failed passed")
	}
	for _, want := range []string{"=== RUN   TestA\n", "        a continuation line\n", "--- FAIL: TestA (0.00s)\nFAIL\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output has no %q, as go test -v writes it:\n%s", want, out.String())
		}
	}
	want := "--- the failed tests, each with its last log entries:\np TestA/bad\n" +
		"    a_test.go:9: entry 2\n    a_test.go:10: the failure: want 0\n    a_test.go:11: a log after it\n" +
		"    a_test.go:12: 3\n    a_test.go:12: 4\n    a_test.go:12: 5\n    a_test.go:12: 6\n    a_test.go:12: 7\n" +
		"    a_test.go:12: 8\n    a_test.go:12: 9\n    a_test.go:12: 10\n    a_test.go:12: 11\n"
	if summary != want {
		t.Errorf("the summary is\n%s\nwant\n%s", summary, want)
	}
}

func TestAPassedRunHasNoSummary(t *testing.T) {
	run := `{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"pass","Package":"p","Test":"TestA"}
not an event: the go command's own line
{"Action":"pass","Package":"p"}
`
	var out strings.Builder
	ok, summary := follow(strings.NewReader(run), &out)
	if !ok || summary != "" {
		t.Errorf("a passed run: ok %v, summary %q", ok, summary)
	}
	if !strings.Contains(out.String(), "not an event: the go command's own line\n") {
		t.Errorf("a line that is no event was not passed on: %q", out.String())
	}
}

func TestARunWithNoPackageResultFails(t *testing.T) {
	if ok, _ := follow(strings.NewReader("go: cannot find main module\n"), &strings.Builder{}); ok {
		t.Errorf("a run that tested no package passed")
	}
}
