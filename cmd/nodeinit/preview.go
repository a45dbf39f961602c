package main

import (
	"fmt"
	"os"

	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/cgroups"
	"github.com/nodeinit/nodeinit/config"
	"github.com/nodeinit/nodeinit/identity"
	"github.com/nodeinit/nodeinit/node"
	"github.com/nodeinit/nodeinit/restrict"
)

// The plan preview of --write-flags: the command lines a start would run,
// and what it would change, with nothing changed.

// writeFlags prints the executor's, the proxy's and the runtime's final
// command lines without touching namespaces or cgroups: cgroups.Preview
// reads where the container is and what would be joined.
func writeFlags(cfg *config.Config) int {
	env := childEnv(cfg)
	kubelet, _ := node.ReadKubeletConfig(cfg.Executor.Args)
	version := node.ReadKubeletVersion(cfg.Executor.Path, env)
	root, own := node.OwnCgroupRoot(cfg.Executor.Args, kubelet)
	cg, err := cgroups.Preview(cgroupOptions(cfg, root, own, kubelet, version))
	if err != nil {
		klog.ErrorS(err, "Cannot discover the container")
		return exitFailure
	}
	plan := restrict.Inspect(restrict.Input{Root: "/", Config: cfg, Kubelet: kubelet, KubeletVersion: version})
	for _, l := range plan.Describe() {
		fmt.Fprintln(os.Stderr, "nodeinit:", l)
	}
	env = plan.Environ(env)
	ct := node.Container{Cgroup: cg.KubeletRoot, ID: cg.ContainerID}
	if cfg.Executor.SizeNodeToContainer {
		ct.Sizing = node.SizeToContainer(cfg.Executor.Args, kubelet, cg.Limits, cg.LimitsRoot, cg.LimitsErr)
	}
	cmds := []node.Command{node.Executor(cfg, env, ct, kubelet, plan.KubeletArgs...)}
	if cfg.Proxy.Run {
		cmds = append(cmds, node.Proxy(cfg, env, plan.ProxyArgs...))
	}
	// The runtime's line comes last, so the executor's stays first.
	if rt, ok := node.Runtime(cfg, env); ok {
		cmds = append(cmds, rt)
	}
	if err := node.WriteFlags(os.Stdout, cmds...); err != nil {
		return exitFailure
	}
	if _, lines := node.RuntimeEndpoint(cfg, cfg.Executor.Args, kubelet); len(lines) > 0 {
		for _, l := range lines {
			prefix := "nodeinit: "
			if l.Warning {
				prefix += "warning: "
			}
			fmt.Fprintln(os.Stderr, prefix+l.String())
		}
	}
	// stdout holds the command lines; what nodeinit changes in the node's
	// view of the system goes to stderr.
	if cfg.Identity.MachineID || cfg.Identity.ProductUUID {
		plan, err := identity.Decide(identityOptions(cfg))
		for _, err := range each(err) {
			fmt.Fprintln(os.Stderr, "nodeinit: warning:", sentence(err))
		}
		if plan.Source == identity.Generated {
			// Only a start makes and keeps one.
			plan.MachineID = "generated at start"
		}
		// The container's own id left alone is no adjustment.
		if plan.Source == identity.Own {
			plan.Source = ""
		}
		for _, a := range plan.Adjustments() {
			fmt.Fprintln(os.Stderr, "nodeinit:", a)
		}
	}
	return 0
}
