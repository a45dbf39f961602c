package node_test

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/nodeinit/nodeinit/config"
	"github.com/nodeinit/nodeinit/node"
)

// The path of a command line through main: parse, merge with the config
// file, validate, then build the two commands (and print them for
// --write-flags).
func Example() {
	fs := pflag.NewFlagSet("nodeinit", pflag.ContinueOnError)
	flags := config.AddFlags(fs)
	argv := []string{"--proxy-mode=ipvs", "--hostname-override=Node-1", "--write-flags",
		"/usr/bin/kubelet", "--node-ip=10.0.0.5", "--node-labels=zone=a b"}
	if err := fs.Parse(argv); err != nil {
		fmt.Println("exit 2:", err)
		return
	}
	cfg, err := flags.Resolve(fs.Args())
	var usage *config.UsageError
	var invalid *config.FileError
	switch {
	case errors.As(err, &usage):
		fmt.Println("exit 2:", err)
		return
	case errors.As(err, &invalid):
		fmt.Fprintln(os.Stderr, err)
		fmt.Println("exit 255")
		return
	}

	env := node.Environ([]string{"PATH=/usr/bin:/bin"}, cfg.PathOverride, "/srv")
	executor := node.Executor(&cfg, env, node.Container{}, node.KubeletConfig{}) // no container, no kubelet configuration
	proxy := node.Proxy(&cfg, env)
	if flags.WriteFlags() {
		_ = node.WriteFlags(os.Stdout, executor, proxy)
	}
	for _, kv := range proxy.Env {
		if path, ok := strings.CutPrefix(kv, "PATH="); ok {
			fmt.Println("proxy PATH:", path)
		}
	}
	// Output:
	// /usr/bin/kubelet --node-ip=10.0.0.5 '--node-labels=zone=a b'
	// kube-proxy --bind-address=10.0.0.5 --v=0 --proxy-mode=ipvs --hostname-override=node-1
	// proxy PATH: /usr/bin:/bin:/srv/bin
}
