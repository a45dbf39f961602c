package node

import (
	"slices"
	"strings"

	"github.com/nodeinit/nodeinit/config"
	"github.com/nodeinit/nodeinit/internal/adjustment"
	"github.com/nodeinit/nodeinit/internal/cmdline"
)

// Runtime is the container runtime's command, when nodeinit runs one
// (runtime.path): its program and runtime.args, verbatim.
func Runtime(c *config.Config, env []string) (Command, bool) {
	if c.Runtime.Path == "" {
		return Command{}, false
	}
	return Command{Path: c.Runtime.Path, Args: slices.Clone(c.Runtime.Args), Env: slices.Clone(env)}, true
}

// RuntimeEndpoint is the flag that points the executor at the runtime
// nodeinit runs, --container-runtime-endpoint=unix://<runtime.socket>, when
// runtime.passEndpoint is on and neither the executor's arguments nor its
// kubelet configuration kc name an endpoint; empty otherwise. lines say
// what was decided and why, for the log and --write-flags: an endpoint of
// the executor's own that is not the runtime's socket is a warning, since
// nodeinit waits for one socket and the kubelet would use another.
func RuntimeEndpoint(c *config.Config, args []string, kc KubeletConfig) (flag string, lines []adjustment.Line) {
	r := &c.Runtime
	if r.Path == "" {
		return "", nil
	}
	want := "unix://" + r.Socket
	own, from := "", ""
	if v, ok := cmdline.Value(args, "container-runtime-endpoint"); ok {
		own, from = v, "the executor's --container-runtime-endpoint"
	} else if kc.ContainerRuntimeEndpoint != "" {
		own, from = kc.ContainerRuntimeEndpoint, "containerRuntimeEndpoint of the kubelet's configuration "+strings.Join(kc.Files, " ")
	}
	switch {
	case own != "" && strings.TrimPrefix(own, "unix://") != r.Socket:
		return "", []adjustment.Line{{Warning: true,
			Msg: "The executor names a runtime endpoint other than the socket nodeinit waits for: the kubelet may start before its runtime answers",
			KV:  []any{"endpoint", own, "from", from, "runtimeSocket", r.Socket}}}
	case own != "":
		return "", []adjustment.Line{{Msg: "The executor names the runtime's socket itself; nodeinit adds no endpoint", KV: []any{"endpoint", own, "from", from}}}
	case !r.PassEndpoint:
		return "", []adjustment.Line{{Msg: "Not passing the runtime's socket to the executor (runtime.passEndpoint off): the kubelet uses its default endpoint",
			KV: []any{"runtimeSocket", r.Socket}}}
	}
	flag = "--container-runtime-endpoint=" + want
	return flag, []adjustment.Line{{Msg: "Passing the executor the runtime's socket, which neither its flags nor its configuration name (--pass-runtime-endpoint=false turns it off)",
		KV: []any{"flag", flag}}}
}
