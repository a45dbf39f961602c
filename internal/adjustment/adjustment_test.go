package adjustment

import (
	"bytes"
	"flag"
	"os"
	"strings"
	"testing"

	"k8s.io/klog/v2"
)

// The line --write-flags prints is the log's info line, pair for pair: a
// string value quoted as klog quotes it.
func TestStringIsTheLogLine(t *testing.T) {
	l := Line{Msg: "Mounting a machine-id of the node's own over /etc/machine-id",
		KV: []any{"machineID", "0123456789abcdef0123456789abcdef", "reason", `/etc/machine-id is "uninitialized"`}}
	want := `Mounting a machine-id of the node's own over /etc/machine-id machineID="0123456789abcdef0123456789abcdef" reason="/etc/machine-id is \"uninitialized\""`
	if got := l.String(); got != want {
		t.Errorf("String =\n%s\nwant\n%s", got, want)
	}
	out := logged(t, l)
	if !strings.HasPrefix(out, "I") || !strings.HasSuffix(strings.TrimSpace(out), `] "`+l.Msg+`"`+strings.TrimPrefix(want, l.Msg)) {
		t.Errorf("logged %q; want an info line ending in %q", out, want)
	}
}

// A warning is a W line with its pairs as String writes them, and the
// line names Log's caller, not this package.
func TestWarningLogsItsPairs(t *testing.T) {
	l := Line{Warning: true, Msg: "Cannot read the machine's capacity", KV: []any{"err", "no CPUs"}}
	out := logged(t, l)
	if !strings.HasPrefix(out, "W") || !strings.Contains(out, `] Cannot read the machine's capacity err="no CPUs"`) {
		t.Errorf("logged %q; want a warning with its pairs", out)
	}
	if !strings.Contains(out, "adjustment_test.go:") {
		t.Errorf("logged %q; want it attributed to the caller of Log", out)
	}
}

// Value finds a pair; With replaces or adds one, leaving the line it was
// called on as it was.
func TestValueAndWith(t *testing.T) {
	l := Line{Msg: "Adjusted the node to its container", KV: []any{"check", "kmsg", "change", "bind"}}
	m := l.With("change", "bind; detached").With("reason", "shared")
	if l.Value("change") != "bind" || l.Value("reason") != nil {
		t.Errorf("the original changed: %v", l.KV)
	}
	if m.Value("check") != "kmsg" || m.Value("change") != "bind; detached" || m.Value("reason") != "shared" || len(m.KV) != 6 {
		t.Errorf("With gave %v", m.KV)
	}
}

// logged is what l.Log writes to klog.
func logged(t *testing.T, l Line) string {
	t.Helper()
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	if err := fs.Parse([]string{"-logtostderr=false", "-alsologtostderr=false", "-stderrthreshold=FATAL"}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	klog.SetOutput(&buf)
	defer klog.SetOutput(os.Stderr)
	l.Log()
	klog.Flush()
	return buf.String()
}
