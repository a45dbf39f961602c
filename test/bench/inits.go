package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// A contender is one PID-1 program under comparison, with the options it runs
// with. argv builds its command line around the child's.
type contender struct {
	name string
	// binary is the executable whose size is measured and that must exist.
	binary string
	// pkg names the Debian package that brings binary, for the message when
	// it is missing.
	pkg string
	// proxy is set when the init also runs a proxy; the harness then hands it
	// a sleeping proxy and leaves one fewer sleeping child to the executor.
	proxy bool
	// reference names the harness's own Go program this row runs (gominimal,
	// gobare), measured to show what any Go PID 1 costs; it is built with the
	// helpers.
	reference string
	// noSignals leaves the row out of the signal workload: it forwards none.
	noSignals bool
	// notPID1 runs the init in the harness's own pid namespace, not as
	// PID 1 of a new one: nodeinit then registers as child subreaper.
	notPID1 bool
	argv    func(h *helpers, proxyArgs []string, child []string) []string
}

// baseline is the C init that the ratios of issue 6 are taken against.
const baseline = "tini-static"

// initsFor lists the inits in table order: nodeinit as users would compare it,
// its two costed options, the two Go programs for reference, then the C
// inits.
func initsFor(nodeinit string) []*contender {
	plain := func(extra ...string) func(*helpers, []string, []string) []string {
		return func(_ *helpers, _ []string, child []string) []string {
			return append(append(append([]string{nodeinit, "--run-proxy=false"}, extra...), "--"), child...)
		}
	}
	return []*contender{
		{name: "nodeinit", binary: nodeinit, pkg: "make build", argv: plain()},
		{name: "nodeinit+proxy", binary: nodeinit, pkg: "make build", proxy: true,
			argv: func(h *helpers, proxyArgs []string, child []string) []string {
				a := []string{nodeinit, "--run-proxy=true", "--proxy-path=" + h.sleeper}
				for _, p := range proxyArgs {
					a = append(a, "--proxy-arg="+p)
				}
				return append(append(a, "--"), child...)
			}},
		{name: "nodeinit+mountns", binary: nodeinit, pkg: "make build", argv: plain("--private-mountns")},
		{name: "go-minimal", reference: "gominimal", argv: reference("gominimal")},
		{name: "go-bare", reference: "gobare", noSignals: true, argv: reference("gobare")},
		{name: "tini-static", binary: "tini-static", pkg: "tini",
			argv: func(h *helpers, _ []string, child []string) []string {
				return append([]string{h.bin["tini-static"], "--"}, child...)
			}},
		{name: "dumb-init", binary: "dumb-init", pkg: "dumb-init",
			argv: func(h *helpers, _ []string, child []string) []string {
				return append([]string{h.bin["dumb-init"]}, child...)
			}},
		{name: "catatonit", binary: "catatonit", pkg: "catatonit",
			argv: func(h *helpers, _ []string, child []string) []string {
				return append([]string{h.bin["catatonit"], "--"}, child...)
			}},
	}
}

// resolve finds every init's binary, or names each missing one and what
// brings it. The harness installs nothing itself.
func resolve(inits []*contender) (map[string]string, error) {
	bin := map[string]string{}
	var missing []string
	for _, in := range inits {
		if in.reference != "" {
			continue
		}
		if _, ok := bin[in.binary]; ok {
			continue
		}
		p, err := exec.LookPath(in.binary)
		if err != nil {
			missing = append(missing, fmt.Sprintf("%s (%s)", in.binary, bringer(in.pkg)))
			bin[in.binary] = ""
			continue
		}
		bin[in.binary] = p
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("missing: %v", missing)
	}
	return bin, nil
}

func bringer(pkg string) string {
	if pkg == "make build" {
		return "build it with make build, or pass -nodeinit"
	}
	return "apt-get install " + pkg
}

func requireRoot() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root: every init runs as PID 1 of a new pid namespace")
	}
	return nil
}

// reference runs the harness's own program name (built with the helpers)
// with the child as its command.
func reference(name string) func(*helpers, []string, []string) []string {
	return func(h *helpers, _ []string, child []string) []string {
		return append([]string{filepath.Join(h.dir, name)}, child...)
	}
}
