package cmdline

import (
	"maps"
	"slices"
	"testing"
)

// A flag is found in every form a Go program's flag parser takes, the last
// one wins, and nothing after "--" counts.
func TestValueReadsEveryFormAndStopsAtTheEndOfFlags(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		value string
		set   bool
		all   []string
	}{
		{"absent", []string{"--config=/k.yaml", "root-dir"}, "", false, nil},
		{"two dashes, =", []string{"--root-dir=/data"}, "/data", true, []string{"/data"}},
		{"one dash, =", []string{"-root-dir=/data"}, "/data", true, []string{"/data"}},
		{"two dashes, next argument", []string{"--root-dir", "/data", "--v=2"}, "/data", true, []string{"/data"}},
		{"one dash, next argument", []string{"-root-dir", "/data"}, "/data", true, []string{"/data"}},
		{"the last wins", []string{"--root-dir=/a", "--root-dir", "/b"}, "/b", true, []string{"/a", "/b"}},
		{"empty value", []string{"--root-dir="}, "", true, []string{""}},
		{"bare at the end", []string{"--v=2", "--root-dir"}, "", true, []string{""}},
		{"after --", []string{"--root-dir=/a", "--", "--root-dir=/b"}, "/a", true, []string{"/a"}},
		{"only after --", []string{"--", "--root-dir=/b"}, "", false, nil},
		{"a longer flag with the same start", []string{"--root-dir-extra=/x", "--root-dirs=/y"}, "", false, nil},
		{"a value that looks like the flag", []string{"--other", "root-dir=/x"}, "", false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, set := Value(tc.args, "root-dir")
			if v != tc.value || set != tc.set {
				t.Errorf("Value(%q) = %q, %t; want %q, %t", tc.args, v, set, tc.value, tc.set)
			}
			if all := Values(tc.args, "root-dir"); !slices.Equal(all, tc.all) {
				t.Errorf("Values(%q) = %q; want %q", tc.args, all, tc.all)
			}
		})
	}
}

// A boolean flag is read as pflag reads it: bare is true and never takes
// the next argument, =VALUE is any form strconv.ParseBool takes, and a
// value pflag refuses is an error.
func TestBoolReadsAsPflag(t *testing.T) {
	for _, tc := range []struct {
		name       string
		args       []string
		value, set bool
		err        bool
	}{
		{"absent", []string{"--v=2"}, false, false, false},
		{"bare", []string{"--fail-swap-on"}, true, true, false},
		{"bare does not take the next argument", []string{"--fail-swap-on", "false"}, true, true, false},
		{"=false", []string{"-fail-swap-on=false"}, false, true, false},
		{"=0", []string{"--fail-swap-on=0"}, false, true, false},
		{"=T", []string{"--fail-swap-on=T"}, true, true, false},
		{"the last wins", []string{"--fail-swap-on=false", "--fail-swap-on"}, true, true, false},
		{"after --", []string{"--fail-swap-on=false", "--", "--fail-swap-on"}, false, true, false},
		{"refused", []string{"--fail-swap-on=maybe"}, false, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, set, err := Bool(tc.args, "fail-swap-on")
			if v != tc.value || set != tc.set || (err != nil) != tc.err {
				t.Errorf("Bool(%q) = %t, %t, %v; want %t, %t, error %t", tc.args, v, set, err, tc.value, tc.set, tc.err)
			}
		})
	}
}

// A map flag accumulates over its repeats, the later key winning, with the
// spaces component-base trims left out.
func TestMapAccumulatesAsComponentBase(t *testing.T) {
	args := []string{"--feature-gates=A=true, B = false", "--v=2", "-feature-gates", "A=false,,C=true", "--", "--feature-gates=D=true"}
	m, set := Map(args, "feature-gates", "=")
	want := map[string]string{"A": "false", "B": "false", "C": "true"}
	if !set || !maps.Equal(m, want) {
		t.Errorf("Map = %v, %t; want %v, true", m, set, want)
	}
	if m, set := Map([]string{"--eviction-hard=memory.available<100Mi,nodefs.available<10%"}, "eviction-hard", "<"); !set ||
		!maps.Equal(m, map[string]string{"memory.available": "100Mi", "nodefs.available": "10%"}) {
		t.Errorf("Map with < = %v, %t", m, set)
	}
	if m, set := Map([]string{"--system-reserved="}, "system-reserved", "="); !set || len(m) != 0 {
		t.Errorf("an empty --system-reserved = %v, %t; want an empty map, set", m, set)
	}
	if m, set := Map([]string{"--v=2"}, "system-reserved", "="); set || m != nil {
		t.Errorf("no --system-reserved = %v, %t; want nil, false", m, set)
	}
}
