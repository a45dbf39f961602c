// Package cmdline reads flags off the command line nodeinit starts another
// program with (the kubelet's, kube-proxy's), as that program's flag
// parser would read them: what the operator set there decides what
// nodeinit adds, keeps or warns about. It only reads; node adds flags.
//
// A flag is --name=value or --name value, with one dash too (Go's flag
// package takes both; a kubelet-executor may use it), and the program's own
// flags end at "--": what follows belongs to another command.
package cmdline

import (
	"fmt"
	"strconv"
	"strings"
)

// Values is every value of flag name in args, in order. A bare --name at
// the end has the value "". A map flag of the kubelet
// (--feature-gates, --system-reserved) accumulates its values.
func Values(args []string, name string) []string {
	var out []string
	for i := 0; i < len(args) && args[i] != "--"; i++ {
		a, ok := flagName(args[i])
		if !ok {
			continue
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			out = append(out, v)
		} else if a == name {
			v := ""
			if i+1 < len(args) {
				i++
				v = args[i]
			}
			out = append(out, v)
		}
	}
	return out
}

// Value is the last value of flag name in args, which is the one a
// program takes; set is false when args do not have the flag.
func Value(args []string, name string) (value string, set bool) {
	vals := Values(args, name)
	if len(vals) == 0 {
		return "", false
	}
	return vals[len(vals)-1], true
}

// Bool is the last value of the boolean flag name in args, as pflag reads
// it: --name is true, --name=VALUE is strconv.ParseBool's VALUE, and a
// bare --name never takes the next argument. err is for a value pflag
// refuses: the program then says so itself and exits.
func Bool(args []string, name string) (value, set bool, err error) {
	for i := 0; i < len(args) && args[i] != "--"; i++ {
		a, ok := flagName(args[i])
		if !ok {
			continue
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			b, perr := strconv.ParseBool(v)
			if perr != nil {
				return false, true, fmt.Errorf("--%s=%s: not a boolean", name, v)
			}
			value, set = b, true
		} else if a == name {
			value, set = true, true
		}
	}
	return value, set, nil
}

// flagName is arg without its one or two leading dashes; ok is false for
// an argument that is no flag.
func flagName(arg string) (string, bool) {
	if !strings.HasPrefix(arg, "-") {
		return "", false
	}
	return strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-"), true
}

// Map is the map flag name in args as component-base's map flags read it
// (the kubelet's --feature-gates, --system-reserved, --eviction-hard):
// each value a comma-separated list of KEY<sep>VALUE pairs, spaces around
// them trimmed, every value of a repeated flag added to the map, a later
// key over an earlier one. set is false when args do not have the flag.
func Map(args []string, name, sep string) (m map[string]string, set bool) {
	vals := Values(args, name)
	if len(vals) == 0 {
		return nil, false
	}
	m = map[string]string{}
	for _, v := range vals {
		for pair := range strings.SplitSeq(v, ",") {
			if pair = strings.TrimSpace(pair); pair == "" {
				continue
			}
			k, val, _ := strings.Cut(pair, sep)
			m[strings.TrimSpace(k)] = strings.TrimSpace(val)
		}
	}
	return m, true
}
