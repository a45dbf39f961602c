// Package node assembles the command lines and environments of the node's
// programs, the executor (the kubelet or a kubelet-executor), the proxy
// (kube-proxy) and the container runtime nodeinit runs, from a
// config.Config; and reads what they depend on of the kubelet: its
// configuration file and its release (ReadKubeletConfig,
// ReadKubeletVersion), the machine it takes its capacity from
// (ReadMachine), and the --system-reserved that sizes the node to its
// container (SizeToContainer). The command lines are pure functions of
// their inputs.
package node

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/nodeinit/nodeinit/config"
	"github.com/nodeinit/nodeinit/internal/cmdline"
)

// containerIDEnv names the executor's environment variable that carries the
// Mesos container id. Only the kubernetes-mesos minion's own
// kubelet-executor read it (to tag pod containers for the agent's garbage
// collection); a kubelet ignores it.
const containerIDEnv = "MESOS_EXECUTOR_CONTAINER_UUID"

// Container is what cgroup discovery found out about the container nodeinit
// runs in; the zero value means nothing was found.
type Container struct {
	// Cgroup is the container's cgroup as the kubelet's --cgroup-root
	// takes it, set only where the kubelet can use it
	// (cgroups.Result.KubeletRoot); "/" is the kubelet's own default.
	Cgroup string
	// ID is the Mesos container id.
	ID string
	// Sizing is how the Node is sized to the container's limits
	// (SizeToContainer); the zero value adds nothing.
	Sizing Sizing
}

// Command is a program to start: Path as configured (see Getenv), its
// arguments without argv[0], and its whole environment.
type Command struct {
	Path string
	Args []string
	Env  []string
}

// Line is the command line: Path followed by Args (argv for exec).
func (c Command) Line() []string { return append([]string{c.Path}, c.Args...) }

// Environ is the children's environment: environ (nodeinit's own) with PATH
// replaced by pathOverride when that is set, and dir/bin appended to PATH
// either way; dir is nodeinit's working directory (a Mesos task's sandbox,
// whose bin holds the programs shipped with the task).
func Environ(environ []string, pathOverride, dir string) []string {
	path := pathOverride
	if path == "" {
		path = getenv(environ, "PATH")
	}
	bin := filepath.Join(dir, "bin")
	if path == "" {
		path = bin
	} else {
		path += string(filepath.ListSeparator) + bin
	}
	return Setenv(environ, "PATH", path)
}

// Executor is the executor's command: the configured program and arguments
// and env, plus the container id in its environment and, with
// executor.containPodResources, --cgroup-root=<the container's cgroup>
// unless the executor sets a cgroup root itself, in its arguments or in
// its kubelet configuration kc (see OwnCgroupRoot), or the cgroup is "/",
// the kubelet's default.
//
// A flag, because it is the one way that reaches every executor, a
// kubelet-executor as well as the kubelet (which warns that the flag is
// deprecated in favour of its configuration file: setting cgroupRoot there,
// or in a --config-dir drop-in, avoids both the flag and the warning).
//
// With executor.sizeNodeToContainer, ct.Sizing's --system-reserved is
// added too, after the executor's own flags, which it includes; with a
// runtime nodeinit runs, its socket as RuntimeEndpoint says. added are
// flags for what the container restricts (restrict.Plan's KubeletArgs),
// put after the executor's own.
func Executor(c *config.Config, env []string, ct Container, kc KubeletConfig, added ...string) Command {
	cmd := Command{Path: c.Executor.Path, Args: append([]string(nil), c.Executor.Args...), Env: slices.Clone(env)}
	if ct.ID != "" {
		cmd.Env = Setenv(env, containerIDEnv, ct.ID)
	}
	if c.Executor.ContainPodResources && ct.Cgroup != "" && ct.Cgroup != "/" {
		if _, own := OwnCgroupRoot(cmd.Args, kc); own == "" {
			cmd.Args = insertFlag(cmd.Args, "--cgroup-root="+ct.Cgroup)
		}
	}
	if c.Executor.SizeNodeToContainer && ct.Sizing.SystemReserved != "" {
		cmd.Args = insertFlag(cmd.Args, "--system-reserved="+ct.Sizing.SystemReserved)
	}
	if flag, _ := RuntimeEndpoint(c, c.Executor.Args, kc); flag != "" {
		cmd.Args = insertFlag(cmd.Args, flag)
	}
	for _, a := range added {
		cmd.Args = insertFlag(cmd.Args, a)
	}
	return cmd
}

// OwnCgroupRoot is the cgroup root the executor sets itself, and where: its
// --cgroup-root flag, which the kubelet takes over the cgroupRoot of its
// configuration (kc: its --config file and --config-dir drop-ins), or that
// cgroupRoot. from says which, and which one wins, for the log; it is empty
// when the executor sets none.
func OwnCgroupRoot(args []string, kc KubeletConfig) (root, from string) {
	flag, set := cmdline.Value(args, "cgroup-root")
	switch {
	case set && kc.CgroupRoot != "":
		return flag, fmt.Sprintf("the executor's --cgroup-root=%s, which overrides cgroupRoot %s of the kubelet's configuration %s",
			flag, kc.CgroupRoot, strings.Join(kc.Files, " "))
	case set:
		return flag, "the executor's --cgroup-root=" + flag
	case kc.CgroupRoot != "":
		return kc.CgroupRoot, fmt.Sprintf("cgroupRoot %s of the kubelet's configuration %s", kc.CgroupRoot, strings.Join(kc.Files, " "))
	}
	return "", ""
}

// Proxy is the proxy's command: the flags nodeinit's settings translate to,
// each a single --name=value argument, then proxy.args verbatim, so that
// where both set a flag, proxy.args wins (kube-proxy takes the last).
//
// When proxy.args give kube-proxy a --config file, only the flags it still
// honours then are passed (--v, --master, --hostname-override): it takes
// everything else from the file. config.Validate has refused the settings
// that would have been passed but ignored; what is left to drop here are
// defaults (the mode, the bind address taken from the executor's).
//
// added are flags for what the container restricts (restrict.Plan's
// ProxyArgs), put before proxy.args, which still win.
func Proxy(c *config.Config, env []string, added ...string) Command {
	p := &c.Proxy
	var args []string
	arg := func(name, value string) { args = append(args, "--"+name+"="+value) }
	ownFile := config.ProxyConfigFile(p.Args) != ""

	switch ip := executorNodeIP(c.Executor.Args); {
	case ownFile:
	case p.BindAll:
		arg("bind-address", "0.0.0.0")
	case p.BindAddress != "":
		arg("bind-address", p.BindAddress)
	case ip != "":
		arg("bind-address", ip)
	}
	arg("v", strconv.Itoa(int(p.LogV)))
	if !ownFile {
		arg("proxy-mode", p.Mode)
		if n := p.Conntrack.MaxPerCore; n != nil {
			arg("conntrack-max-per-core", strconv.Itoa(int(*n)))
		}
		if n := p.Conntrack.Min; n != nil {
			arg("conntrack-min", strconv.Itoa(int(*n)))
		}
		if d := p.Conntrack.TCPTimeoutEstablished; d != nil {
			arg("conntrack-tcp-timeout-established", d.String())
		}
		if p.Kubeconfig != "" {
			arg("kubeconfig", p.Kubeconfig)
		}
	}
	if p.Master != "" {
		arg("master", p.Master)
	}
	if p.HostnameOverride != "" {
		arg("hostname-override", strings.ToLower(p.HostnameOverride))
	}
	args = append(args, added...)
	return Command{Path: p.Path, Args: append(args, p.Args...), Env: slices.Clone(env)}
}

// executorNodeIP is the node's IP as the executor (the kubelet) is told it:
// the first address of its last --node-ip (a dual-stack node lists two;
// kube-proxy takes one). kube-proxy's --bind-address means the same since
// Kubernetes 1.26: the node's primary IP, not an address to listen on, so
// the kubelet's --address (where the kubelet listens) is no substitute.
// The kubelet takes its node IP from this flag only; its configuration file
// has no such field.
func executorNodeIP(args []string) string {
	ip, _ := cmdline.Value(args, "node-ip")
	first, _, _ := strings.Cut(ip, ",")
	return first
}

// KubeletRootDir is the kubelet's --root-dir, where it keeps the node's
// state: a flag only (the KubeletConfiguration has no such field), by
// default /var/lib/kubelet.
func KubeletRootDir(args []string) string {
	if dir, ok := cmdline.Value(args, "root-dir"); ok && dir != "" {
		return dir
	}
	return "/var/lib/kubelet"
}

// insertFlag adds a flag after the program's own flags: before a "--" that
// ends them, or at the end.
func insertFlag(args []string, flag string) []string {
	for i, a := range args {
		if a == "--" {
			return append(args[:i:i], append([]string{flag}, args[i:]...)...)
		}
	}
	return append(args, flag)
}

func getenv(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if s, ok := strings.CutPrefix(kv, key+"="); ok {
			v = s // the last one wins, as for exec
		}
	}
	return v
}

// Setenv returns a copy of env with key set to value, any earlier value
// removed; env itself is not changed.
func Setenv(env []string, key, value string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return append(out, key+"="+value)
}

// WriteFlags prints each command's line, shell-quoted, one per line: what
// --write-flags shows.
func WriteFlags(w io.Writer, cmds ...Command) error {
	for _, c := range cmds {
		line := c.Line()
		for i, s := range line {
			line[i] = Quote(s)
		}
		if _, err := io.WriteString(w, strings.Join(line, " ")+"\n"); err != nil {
			return fmt.Errorf("write command lines: %w", err)
		}
	}
	return nil
}

// Quote makes s one word for a POSIX shell: as it is when it holds only
// characters no shell treats specially, else in single quotes, where a
// single quote inside is closed, backslash-escaped and reopened.
func Quote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("%+,-./:=@_", c)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
