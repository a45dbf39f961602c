package main

import (
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
)

// The list the emulated runs read parses, and every entry has a reason.
func TestTheListParses(t *testing.T) {
	f, err := os.Open("known.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	all, err := parseList(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) == 0 {
		t.Fatal("known.txt has no entry")
	}
	for _, e := range all {
		if e.why == "" {
			t.Errorf("%s has no reason", e)
		}
	}
}

func TestListEntriesShareTheReasonAfterThem(t *testing.T) {
	all, err := parseList(strings.NewReader(`# a comment
arm64 fails ./p TestA "EINVAL"
arm64,s390x fails ./p */sub
	first line
	second line

s390x not-run ./q *
	hangs
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 {
		t.Fatalf("%d entries, want 3", len(all))
	}
	if all[0].why != "first line second line" || all[1].why != all[0].why || all[2].why != "hangs" {
		t.Errorf("reasons %q, %q, %q", all[0].why, all[1].why, all[2].why)
	}
	if all[0].evidence != "EINVAL" || !all[1].matches("./p", "TestB/sub") || all[1].matches("./p", "TestB") || !all[2].wholePackage() {
		t.Errorf("entries parsed as %+v", all)
	}
	if got := forArch(all, "s390x"); len(got) != 2 {
		t.Errorf("s390x has %d entries, want 2", len(got))
	}
}

func TestBadListsAreRefused(t *testing.T) {
	for name, text := range map[string]string{
		"no reason":           "arm64 fails ./p TestA\n",
		"no reason between":   "arm64 fails ./p TestA\n\tok\narm64 fails ./p TestB\n",
		"reason first":        "\twhy\narm64 fails ./p TestA\n\tok\n",
		"unknown outcome":     "arm64 flakes ./p TestA\n\twhy\n",
		"subtest not run":     "arm64 not-run ./p TestA/sub\n\twhy\n",
		"package that fails":  "arm64 fails ./p *\n\twhy\n",
		"absolute package":    "arm64 fails github.com/x/p TestA\n\twhy\n",
		"evidence on a skip":  "arm64 skips ./p TestA \"x\"\n\twhy\n",
		"missing test column": "arm64 fails ./p\n\twhy\n",
		"any test by name":    "arm64 fails ./p **\n\twhy\n",
	} {
		if _, err := parseList(strings.NewReader(text)); err == nil {
			t.Errorf("%s: parsed %q", name, text)
		}
	}
}

// run feeds the report a run's events: pkg's listed tests, then each
// test's output and outcome as "name action output".
func judgeRun(t *testing.T, list string, listed []string, outcomes [][3]string, pkgAction string) []string {
	t.Helper()
	entries, err := parseList(strings.NewReader(list))
	if err != nil {
		t.Fatal(err)
	}
	r := newReport(forArch(entries, "arm64"), "m")
	r.selected["./p"] = true
	r.pkgs["./p"] = &pkgRun{}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	for _, name := range listed {
		must(t, enc.Encode(event{Action: "output", Package: "m/p", Output: name + "\n"}))
	}
	must(t, r.read(strings.NewReader(b.String()), io.Discard, false))
	r.notRun(io.Discard)
	b.Reset()
	for _, o := range outcomes {
		must(t, enc.Encode(event{Action: "run", Package: "m/p", Test: o[0]}))
		must(t, enc.Encode(event{Action: "output", Package: "m/p", Test: o[0], Output: o[2] + "\n"}))
		if o[1] != "" {
			must(t, enc.Encode(event{Action: o[1], Package: "m/p", Test: o[0]}))
		}
	}
	must(t, enc.Encode(event{Action: pkgAction, Package: "m/p"}))
	must(t, r.read(strings.NewReader(b.String()), io.Discard, true))
	r.judge(io.Discard, []string{"./p"})
	return r.problems
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestOutcomesAreHeldToTheList(t *testing.T) {
	const list = "arm64 fails ./p TestA/sub \"EINVAL\"\n\twhy\narm64 not-run ./p TestC\n\thangs\n"
	const cause = list + "arm64 fails ./p ** \"prctl(PR_SET_CHILD_SUBREAPER): invalid argument\"\n\tqemu\n"
	for _, c := range []struct {
		name     string
		list     string // default: list
		listed   []string
		outcomes [][3]string
		pkg      string
		problems []string // a word of each problem, in order
	}{
		{"as listed", "", []string{"TestA", "TestB", "TestC"},
			[][3]string{{"TestA", "fail", ""}, {"TestA/sub", "fail", "prctl: EINVAL"}, {"TestA/other", "pass", ""}, {"TestB", "pass", ""}}, "fail", nil},
		{"a listed failure passes", "", []string{"TestA", "TestB", "TestC"},
			[][3]string{{"TestA", "pass", ""}, {"TestA/sub", "pass", ""}, {"TestB", "pass", ""}}, "pass", []string{"take it off"}},
		{"fails without its evidence", "", []string{"TestA", "TestB", "TestC"},
			[][3]string{{"TestA", "fail", ""}, {"TestA/sub", "fail", "timed out"}, {"TestB", "pass", ""}}, "fail", []string{"lacks"}},
		{"an unlisted failure", "", []string{"TestA", "TestB", "TestC"},
			[][3]string{{"TestA", "fail", ""}, {"TestA/sub", "fail", "EINVAL"}, {"TestA/other", "fail", "x"}, {"TestB", "pass", ""}}, "fail",
			[]string{"TestA: failed", "TestA/other: failed"}},
		{"an unlisted skip", "", []string{"TestA", "TestB", "TestC"},
			[][3]string{{"TestA", "fail", ""}, {"TestA/sub", "fail", "EINVAL"}, {"TestB", "skip", "needs x"}}, "fail", []string{"TestB: skipped"}},
		{"a test that never ran", "", []string{"TestA", "TestB", "TestC", "TestD"},
			[][3]string{{"TestA", "fail", ""}, {"TestA/sub", "fail", "EINVAL"}, {"TestB", "", "panic"}}, "fail",
			[]string{"TestB: started and never ended", "TestD: did not run"}},
		{"a stale entry", "", []string{"TestB"},
			[][3]string{{"TestB", "pass", ""}}, "pass", []string{"TestC: names no test", "TestA/sub: names no test"}},
		{"a cause", cause, []string{"TestA", "TestB", "TestC", "TestE"},
			[][3]string{{"TestA", "fail", ""}, {"TestA/sub", "fail", "EINVAL"}, {"TestB", "pass", ""}, {"TestE", "fail", "prctl(PR_SET_CHILD_SUBREAPER): invalid argument"}}, "fail", nil},
		{"a cause and another failure", cause, []string{"TestA", "TestB", "TestC", "TestE"},
			[][3]string{{"TestA", "fail", ""}, {"TestA/sub", "fail", "EINVAL"}, {"TestB", "fail", "timed out"}, {"TestE", "pass", ""}}, "fail",
			[]string{"TestB: failed", "no test of this run failed with"}},
		{"subtests of a listed test, and names with a slash", "arm64 fails ./p TestA\n\twhy\narm64 fails ./p TestB/x/y/z\n\twhy\n", []string{"TestA", "TestB"},
			[][3]string{{"TestA", "fail", ""}, {"TestA/sub", "fail", "x"}, {"TestA/sub/deeper", "fail", "x"}, {"TestA/ok", "pass", ""},
				{"TestB", "fail", ""}, {"TestB/x", "fail", ""}, {"TestB/x/y/z", "fail", ""}, {"TestB/x/y/w", "pass", ""}}, "fail", nil},
		{"a package without tests", "", nil, nil, "skip", []string{"TestC: names no test", "TestA/sub: names no test"}},
		{"a package that fails on its own", "", []string{"TestB", "TestC"},
			[][3]string{{"TestB", "pass", ""}}, "fail", []string{"without a failed test", "TestA/sub: names no test"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.list == "" {
				c.list = list
			}
			got := judgeRun(t, c.list, c.listed, c.outcomes, c.pkg)
			if len(got) != len(c.problems) {
				t.Fatalf("problems %q, want %d with %q", got, len(c.problems), c.problems)
			}
			for i, want := range c.problems {
				if !strings.Contains(got[i], want) {
					t.Errorf("problem %d is %q, want it to say %q", i, got[i], want)
				}
			}
		})
	}
}
