package bus

import (
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/nodeinit/nodeinit/bus/internal/wire"
	"github.com/nodeinit/nodeinit/bus/service"
)

func TestParseMatchRuleUnquotesAsTheSpecificationSays(t *testing.T) {
	// The specification's own example: both rules give the same four
	// arguments.
	for _, s := range []string{
		`arg0=''\''',arg1='\',arg2=',',arg3='\\'`,
		`arg0=\',arg1=\,arg2=',',arg3=\\`,
	} {
		r, err := parseMatchRule(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		want := matchRule{"arg0": "'", "arg1": `\`, "arg2": ",", "arg3": `\\`}
		if !r.equal(want) {
			t.Errorf("%s parsed as %q, want %q", s, r, want)
		}
	}
}

func TestParseMatchRuleOfTheKubelet(t *testing.T) {
	// What godbus's AddMatchSignal sends for the kubelet's options.
	r, err := parseMatchRule("type='signal',interface='org.freedesktop.login1.Manager',member='PrepareForShutdown',path='/org/freedesktop/login1'")
	if err != nil {
		t.Fatal(err)
	}
	want := matchRule{"type": "signal", "interface": managerIface, "member": "PrepareForShutdown", "path": string(logindPath)}
	if !r.equal(want) {
		t.Errorf("parsed %q, want %q", r, want)
	}
}

// go-systemd writes its rules with a space after each comma, and
// dbus-daemon skips white space (space, tab, newline, carriage return)
// before a key and between a key and its '='; the value begins right
// after the '='.
func TestParseMatchRuleSkipsWhiteSpaceAroundKeysAsDbusDaemonDoes(t *testing.T) {
	for s, want := range map[string]matchRule{
		"type='signal', interface='org.freedesktop.systemd1.Manager', member='JobRemoved'": {
			"type": "signal", "interface": "org.freedesktop.systemd1.Manager", "member": "JobRemoved"},
		" \t\r\ntype\t='signal',\n member ='X'": {"type": "signal", "member": "X"},
		"member=' x'":                           {"member": " x"},
		"   ":                                   {},
		"type='signal', ":                       {"type": "signal"},
	} {
		r, err := parseMatchRule(s)
		if err != nil || !r.equal(want) {
			t.Errorf("%q parsed as %q, %v; want %q", s, r, err, want)
		}
	}
	// White space after '=' or before ',' is the value's: an unknown
	// type here.
	for _, s := range []string{"type= 'signal'", "type='signal' ,member='X'"} {
		if _, err := parseMatchRule(s); err == nil {
			t.Errorf("%q parsed; dbus-daemon refuses the type", s)
		}
	}
	if _, err := parseMatchRule("type 'signal'"); err == nil {
		t.Error("a key without '=' parsed")
	}
}

func TestParseMatchRuleRefusesWhatDbusDaemonRefuses(t *testing.T) {
	for _, s := range []string{
		"type='bogus'",
		"type='signal',type='signal'",
		"colour='red'",
		"arg64='x'",
		"arg01='x'",
		"argpath='x'",
		"path='not/a/path'",
		"path='/a',path_namespace='/a'",
		"eavesdrop='maybe'",
		"member='unterminated",
		"member",
	} {
		if _, err := parseMatchRule(s); err == nil {
			t.Errorf("%q parsed; want an error", s)
		}
	}
	if r, err := parseMatchRule(""); err != nil || len(r) != 0 {
		t.Errorf("the empty rule (match everything): %q, %v", r, err)
	}
}

func TestMatchRuleMatchesPrepareForShutdown(t *testing.T) {
	sig := wire.NewSignal(logindName, logindPath, managerIface, "PrepareForShutdown", true)
	for _, tc := range []struct {
		rule string
		want bool
	}{
		{"", true},
		{"type='signal',interface='org.freedesktop.login1.Manager',member='PrepareForShutdown',path='/org/freedesktop/login1'", true},
		{"sender='org.freedesktop.login1',member='PrepareForShutdown'", true},
		{"path_namespace='/org/freedesktop'", true},
		{"path_namespace='/'", true},
		{"eavesdrop='true'", true},
		{"type='method_call'", false},
		{"member='PrepareForSleep'", false},
		{"interface='org.freedesktop.DBus'", false},
		{"path='/org/freedesktop'", false},
		{"path_namespace='/org/free'", false},
		{"sender=':1.1'", false},
		{"destination=':1.1'", false},
		{"arg0='true'", false}, // arg matches take strings; the argument is a boolean
		{"arg0namespace='true'", false},
	} {
		r, err := parseMatchRule(tc.rule)
		if err != nil {
			t.Fatalf("%q: %v", tc.rule, err)
		}
		if got := r.matches(sig, []string{logindOwner, logindName}); got != tc.want {
			t.Errorf("%q matches PrepareForShutdown: %v, want %v", tc.rule, got, tc.want)
		}
	}
}

func TestMatchRuleArguments(t *testing.T) {
	sig := wire.NewSignal(service.BusName, service.BusPath, service.BusName, "NameOwnerChanged", "com.example.backend1.foo", dbus.ObjectPath("/aa/bb/cc"), "")
	for _, tc := range []struct {
		rule string
		want bool
	}{
		{"arg0='com.example.backend1.foo'", true},
		{"arg0='com.example'", false},
		{"arg0namespace='com.example.backend1'", true},
		{"arg0namespace='com.example.backend'", false},
		{"arg1path='/aa/bb/'", true},
		{"arg1path='/aa/bb'", false},
		{"arg1='/aa/bb/cc'", false}, // argN takes strings only, not object paths
		{"arg2=''", true},
		{"arg3=''", false},
	} {
		r, err := parseMatchRule(tc.rule)
		if err != nil {
			t.Fatalf("%q: %v", tc.rule, err)
		}
		if got := r.matches(sig, []string{service.BusName}); got != tc.want {
			t.Errorf("%q: %v, want %v", tc.rule, got, tc.want)
		}
	}
}
