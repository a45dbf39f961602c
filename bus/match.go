package bus

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/godbus/dbus/v5"

	"github.com/nodeinit/nodeinit/bus/internal/wire"
	"github.com/nodeinit/nodeinit/internal/clientlog"
)

// A match rule (AddMatch, RemoveMatch): the keys and values of the rule
// string, unquoted. A connection gets a signal a service emits when one of
// its rules matches.
type matchRule map[string]string

// maxRules bounds the rules of one connection; the kubelet adds one.
const maxRules = 64

// parseMatchRule parses a rule string as dbus-daemon does (bus/signals.c):
// comma-separated key=value pairs, white space (space, tab, newline,
// carriage return) skipped before a key and between a key and its '='
// (go-systemd writes "type='signal', interface=..."), the value beginning
// right after the '='; inside single quotes every byte stands for itself,
// outside them \' is an apostrophe and a comma ends the value. White space
// at the end of the rule, or alone after a comma, is nothing. Unknown
// keys, repeated keys (eavesdrop aside) and impossible values are errors,
// as dbus-daemon makes them.
func parseMatchRule(s string) (matchRule, error) {
	rule := matchRule{}
	isWhite := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
	for i := 0; i < len(s); {
		for i < len(s) && isWhite(s[i]) {
			i++
		}
		start := i
		for i < len(s) && s[i] != '=' && !isWhite(s[i]) {
			i++
		}
		key := s[start:i]
		for i < len(s) && isWhite(s[i]) {
			i++
		}
		if key == "" && i == len(s) {
			break
		}
		if key == "" || i == len(s) || s[i] != '=' {
			return nil, fmt.Errorf("the key %q has no '=' after it", clientlog.Clip(key))
		}
		i++
		var val strings.Builder
		quoted := false
	value:
		for ; i < len(s); i++ {
			c := s[i]
			switch {
			case quoted && c == '\'':
				quoted = false
			case quoted:
				val.WriteByte(c)
			case c == '\'':
				quoted = true
			case c == '\\' && i+1 < len(s) && s[i+1] == '\'':
				val.WriteByte('\'')
				i++
			case c == ',':
				i++
				break value
			default:
				val.WriteByte(c)
			}
		}
		if quoted {
			return nil, fmt.Errorf("unterminated quote in the value of %q", key)
		}
		if _, dup := rule[key]; dup && key != "eavesdrop" {
			return nil, fmt.Errorf("key %q given twice", key)
		}
		if err := checkMatchKey(key, val.String()); err != nil {
			return nil, err
		}
		rule[key] = val.String()
	}
	if _, ok := rule["path"]; ok {
		if _, ok := rule["path_namespace"]; ok {
			return nil, fmt.Errorf("path and path_namespace together")
		}
	}
	return rule, nil
}

// checkMatchKey accepts the keys of the specification with a value each
// can have.
func checkMatchKey(key, val string) error {
	switch key {
	case "type":
		switch val {
		case "signal", "method_call", "method_return", "error":
			return nil
		}
		return fmt.Errorf("unknown message type %q", val)
	case "sender", "interface", "member", "destination", "arg0namespace":
		return nil
	case "path", "path_namespace":
		if !dbus.ObjectPath(val).IsValid() {
			return fmt.Errorf("%s %q is not an object path", key, val)
		}
		return nil
	case "eavesdrop":
		if val != "true" && val != "false" {
			return fmt.Errorf("eavesdrop must be 'true' or 'false', not %q", val)
		}
		return nil
	}
	if _, err := argIndex(key); err != nil {
		return fmt.Errorf("unknown key %q", key)
	}
	return nil
}

// argIndex reads the N of argN and argNpath (0 to 63).
func argIndex(key string) (int, error) {
	digits, ok := strings.CutPrefix(key, "arg")
	if !ok {
		return 0, fmt.Errorf("not an arg key")
	}
	digits = strings.TrimSuffix(digits, "path")
	n, err := strconv.Atoi(digits)
	if err != nil || n < 0 || n > 63 || strconv.Itoa(n) != digits {
		return 0, fmt.Errorf("not an arg key")
	}
	return n, nil
}

// equal reports whether two rules are the same rule: RemoveMatch removes
// the first rule equal to the one it is given.
func (r matchRule) equal(o matchRule) bool { return maps.Equal(r, o) }

// matches reports whether a broadcast message m matches the rule; senders
// are the names of its sender (its unique name and the well-known names
// it owns), any of which a rule's sender may name.
func (r matchRule) matches(m *dbus.Message, senders []string) bool {
	for key, want := range r {
		var ok bool
		switch key {
		case "type":
			ok = want == typeName(m.Type)
		case "sender":
			ok = slices.Contains(senders, want)
		case "interface":
			ok = want == wire.Header(m, dbus.FieldInterface)
		case "member":
			ok = want == wire.Header(m, dbus.FieldMember)
		case "path":
			ok = want == wire.Header(m, dbus.FieldPath)
		case "path_namespace":
			ok = inPathNamespace(wire.Header(m, dbus.FieldPath), want)
		case "destination":
			ok = want == wire.Header(m, dbus.FieldDestination)
		case "eavesdrop":
			ok = true
		case "arg0namespace":
			var s string
			if len(m.Body) > 0 {
				s, ok = m.Body[0].(string)
			}
			ok = ok && (s == want || strings.HasPrefix(s, want+"."))
		default:
			ok = argMatches(m, key, want)
		}
		if !ok {
			return false
		}
	}
	return true
}

func argMatches(m *dbus.Message, key, want string) bool {
	n, err := argIndex(key)
	if err != nil || n >= len(m.Body) {
		return false
	}
	if !strings.HasSuffix(key, "path") {
		s, ok := m.Body[n].(string)
		return ok && s == want
	}
	// argNpath takes a string or an object path, and matches when the two
	// are equal or one ends with '/' and is a prefix of the other.
	var s string
	switch v := m.Body[n].(type) {
	case string:
		s = v
	case dbus.ObjectPath:
		s = string(v)
	default:
		return false
	}
	return s == want ||
		strings.HasSuffix(want, "/") && strings.HasPrefix(s, want) ||
		strings.HasSuffix(s, "/") && strings.HasPrefix(want, s)
}

func inPathNamespace(path, ns string) bool {
	return path == ns || ns == "/" || strings.HasPrefix(path, ns+"/")
}

func typeName(t dbus.Type) string {
	switch t {
	case dbus.TypeSignal:
		return "signal"
	case dbus.TypeMethodCall:
		return "method_call"
	case dbus.TypeMethodReply:
		return "method_return"
	case dbus.TypeError:
		return "error"
	}
	return ""
}
