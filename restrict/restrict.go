// Package restrict finds what the node's container lacks or restricts —
// a network or user namespace of its own, no /dev/kmsg, swap, a read-only
// cgroupfs, low limits, the iptables backend its rules are in — and decides
// what nodeinit changes for it before the first fork: flags for the kubelet
// and kube-proxy, mounts in nodeinit's mount namespace, the iptables
// commands first in the children's PATH, or one line that says why the
// node cannot run here.
//
// Inspect only reads (files below a root directory, "/" on a live system;
// the kernel's iptables tables of this network namespace) and decides;
// Plan.Apply makes the mounts, links and writes. Every adjustment comes
// with its reason, for the log and --write-flags, and each check can be
// left out (config.ContainerChecks); a setting the operator made is never
// changed, only warned about when it cannot work here (docs/design.md,
// rule 11; every check: docs/restricted-containers.md).
package restrict

import (
	"fmt"

	"github.com/nodeinit/nodeinit/config"
	"github.com/nodeinit/nodeinit/internal/adjustment"
	"github.com/nodeinit/nodeinit/node"
)

// adjusted is the message of every adjustment's line; its pairs are the
// check it comes from (a config.Check*), the change (a flag, a mount) and
// the reason.
const adjusted = "Adjusted the node to its container"

// Plan is what Inspect decided.
type Plan struct {
	// KubeletArgs and ProxyArgs are flags added to the executor's and the
	// proxy's command lines.
	KubeletArgs, ProxyArgs []string
	// Adjustments are every change, each logged once: the check it
	// comes from, the change and its reason.
	Adjustments []adjustment.Line
	// Warnings are what nodeinit cannot or may not fix, one line each.
	Warnings []string
	// Refusal, when set, is the one line why the node cannot run in this
	// container: nodeinit exits 1 before starting anything.
	Refusal string

	mounts  []mount
	sysctls []sysctlWrite
	// iptables is the xtables-*-multi whose commands Apply links into
	// pathFirst, which goes first in the children's PATH (Environ).
	iptables, pathFirst string
}

// mount is a mount Apply makes: /dev/null over a missing /dev/kmsg, or a
// read-only cgroupfs remounted read-write.
type mount struct {
	source, target string
	flags          uintptr
	create         bool // create an empty file at target first
	// standIn: a file bound over another through descriptors of exactly
	// what was checked (bindfile): never over a link, a shared mount under
	// it detached from its peers first.
	standIn bool
}

// sysctlWrite is a sysctl Apply raises (opt-in).
type sysctlWrite struct {
	name, value string
}

// Input is what Inspect decides from besides the container itself.
type Input struct {
	// Root is where the container's files are: "/" on a live system.
	Root   string
	Config *config.Config
	// Kubelet is the executor's kubelet configuration (node.ReadKubeletConfig).
	Kubelet node.KubeletConfig
	// KubeletVersion is the release of the executor's kubelet
	// (node.ReadKubeletVersion), the zero value when unknown: the checks
	// whose answer depends on the kubelet's defaults read it.
	KubeletVersion node.KubeletVersion
}

func (p *Plan) adjust(check, what, format string, args ...any) {
	p.Adjustments = append(p.Adjustments, adjustment.Line{Msg: adjusted,
		KV: []any{"check", check, "change", what, "reason", fmt.Sprintf(format, args...)}})
}

func (p *Plan) warn(format string, args ...any) {
	p.Warnings = append(p.Warnings, fmt.Sprintf(format, args...))
}

func (p *Plan) refuse(format string, args ...any) {
	if p.Refusal == "" {
		p.Refusal = fmt.Sprintf(format, args...)
	}
}

// Inspect looks at the container below in.Root and decides what to change
// for it, check by check in config.ContainerCheckNames' order, leaving out
// the checks the configuration skips.
func Inspect(in Input) Plan {
	var p Plan
	ct := readContainer(in.Root)
	skip := in.Config.ContainerChecks.Skips
	checks := map[string]func(*Plan, *container, Input){
		config.CheckCgroupfs:      checkCgroupfs,
		config.CheckUserNamespace: checkUserNamespace,
		config.CheckNofile:        checkNofile,
		config.CheckConntrack:     checkConntrack,
		config.CheckKmsg:          checkKmsg,
		config.CheckSwap:          checkSwap,
		config.CheckRootfsDevice:  checkRootfsDevice,
		config.CheckInotify:       checkInotify,
		config.CheckResolvConf:    checkResolvConf,
		config.CheckIPTables:      checkIPTables,
	}
	for _, name := range config.ContainerCheckNames {
		// An iptables backend the operator names applies whatever is
		// skipped; auto is a check like the others.
		if !skip(name) || name == config.CheckIPTables {
			checks[name](&p, ct, in)
		}
	}
	// Not a check to skip: it changes nothing, it only says what the
	// kubelet will do.
	warnCgroupV1(&p, ct, in)
	return p
}

// Describe is the plan for --write-flags' stderr: every adjustment as a
// start logs it, every warning, and what a start would refuse, one line
// each.
func (p Plan) Describe() []string {
	var out []string
	for _, a := range p.Adjustments {
		out = append(out, a.String())
	}
	for _, w := range p.Warnings {
		out = append(out, "warning: "+w)
	}
	if p.Refusal != "" {
		out = append(out, "would refuse to start: "+p.Refusal)
	}
	return out
}
