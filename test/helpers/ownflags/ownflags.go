// Package ownflags lets the project's helper programs stand in for the
// kubelet and kube-proxy: nodeinit adds flags of its own to their command
// lines (--v, --proxy-mode, --cgroup-root, ...), so a helper parses the flags
// it defines and ignores every other argument, as a real executor would
// accept them.
package ownflags

import (
	"flag"
	"os"
	"strings"
)

// Parse parses the arguments that name a flag of the command line's set, in
// the -name=value (or --name=value) form, and drops the rest.
func Parse() {
	var own []string
	for _, a := range os.Args[1:] {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && flag.Lookup(name) != nil {
			own = append(own, a)
		}
	}
	// ExitOnError: a bad value of our own flag ends the program with usage.
	_ = flag.CommandLine.Parse(own)
}
