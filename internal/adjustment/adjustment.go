// Package adjustment is the one record of what nodeinit changes for the
// node, leaves alone or cannot change, and why (docs/design.md, rule 9):
// a line of nodeinit's log, its message and key/value pairs as klog's
// structured calls take them. identity, restrict and node's sizing each
// return such lines; the start logs each once, and --write-flags prints
// the same lines to stderr.
package adjustment

import (
	"fmt"
	"strings"

	"k8s.io/klog/v2"
)

// Line is one adjustment, or one warning about what could not be adjusted.
type Line struct {
	// Warning makes it a warning: something nodeinit cannot do.
	Warning bool
	Msg     string
	// KV are the line's key/value pairs, each key a string.
	KV []any
}

// String is the message followed by key="value" for each pair, the value
// quoted as klog quotes a string: what --write-flags prints, and what a
// warning shows (klog has no structured warning).
func (l Line) String() string {
	var b strings.Builder
	b.WriteString(l.Msg)
	for i := 0; i+1 < len(l.KV); i += 2 {
		fmt.Fprintf(&b, " %v=%q", l.KV[i], fmt.Sprint(l.KV[i+1]))
	}
	return b.String()
}

// Log writes the line to nodeinit's log, as an info line with its pairs or
// as a warning, attributed to Log's caller.
func (l Line) Log() {
	if l.Warning {
		klog.WarningDepth(1, l.String())
		return
	}
	klog.InfoSDepth(1, l.Msg, l.KV...)
}

// Value is the value of key among the pairs, nil when the line has none.
func (l Line) Value(key string) any {
	for i := 0; i+1 < len(l.KV); i += 2 {
		if l.KV[i] == key {
			return l.KV[i+1]
		}
	}
	return nil
}

// With is the line with key's value set to value: replaced where the line
// has the key, added after the other pairs where it has not. l itself is
// not changed.
func (l Line) With(key string, value any) Line {
	kv := append([]any(nil), l.KV...)
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == key {
			kv[i+1] = value
			l.KV = kv
			return l
		}
	}
	l.KV = append(kv, key, value)
	return l
}
