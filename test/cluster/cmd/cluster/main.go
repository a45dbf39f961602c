// Command cluster brings up a cluster of nodeinit nodes on this machine,
// and takes it down (docs/cluster.md):
//
//	cluster create [--name=nodeinit] [--nodes=3] [--flavor=nodeinit|systemd] [--subnet=172.30.40.0/24] [--dir=DIR] --k8s-bin=DIR --net-bin=DIR --nodeinit=FILE --pause=FILE
//	cluster delete [--name=nodeinit] [--dir=DIR]
//	cluster load [--name=nodeinit] [--dir=DIR] ARCHIVE...
//
// --flavor=systemd makes kind's model instead: systemd as each node's PID 1,
// supervising containerd, the kubelet and kube-proxy as units. make
// cluster and make cluster-down run it with the builds' directories;
// load imports image archives (podman save, docker save) into every
// node's containerd, as make cluster-load does.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nodeinit/nodeinit/test/cluster"
)

// clustersDir holds the clusters' directories by default.
const clustersDir = "/var/lib/nodeinit-cluster"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 || (args[0] != "create" && args[0] != "delete" && args[0] != "load") {
		return fmt.Errorf("usage: cluster create|delete|load [flags]")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	name := fs.String("name", "nodeinit", "the cluster's name: its network, containers and kubeconfig context")
	dir := fs.String("dir", "", "the cluster's directory (default /var/lib/nodeinit-cluster/NAME)")
	var cfg cluster.Config
	fs.IntVar(&cfg.Nodes, "nodes", 3, "how many nodes")
	fs.StringVar(&cfg.Subnet, "subnet", cluster.DefaultSubnet, "the podman network's IPv4 subnet")
	fs.StringVar(&cfg.Flavor, "flavor", cluster.FlavorNodeinit, "the nodes' PID 1: nodeinit, or systemd (kind's model)")
	fs.StringVar(&cfg.K8sBin, "k8s-bin", "", "the Kubernetes binaries (test/k8s/build/build.sh)")
	fs.StringVar(&cfg.NetBin, "net-bin", "", "flanneld, the flannel CNI plugin and coredns (test/cluster/build/build.sh)")
	fs.StringVar(&cfg.NodeInit, "nodeinit", "bin/nodeinit", "a static nodeinit")
	fs.StringVar(&cfg.Pause, "pause", "bin/pause", "the pods' sandbox program, static")
	fs.StringVar(&cfg.Repo, "repo", ".", "the repository's root")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	defaultDir := *dir == ""
	if defaultDir {
		*dir = filepath.Join(clustersDir, *name)
	}
	logf := func(format string, a ...any) {
		fmt.Printf("%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
	}
	if args[0] == "load" {
		if fs.NArg() == 0 {
			return fmt.Errorf("load: no image archive named")
		}
		c, err := cluster.Open(*dir, logf)
		if err != nil {
			return err
		}
		start := time.Now()
		if err := c.LoadArchives(fs.Args()...); err != nil {
			return err
		}
		logf("image archives loaded into %d nodes in %v: %s", len(c.NodeNames), time.Since(start).Round(100*time.Millisecond), strings.Join(fs.Args(), " "))
		return nil
	}
	if args[0] == "delete" {
		c, err := cluster.Open(*dir, logf)
		if err != nil {
			return err
		}
		if errs := c.Delete(); len(errs) > 0 {
			for _, err := range errs {
				fmt.Fprintln(os.Stderr, "cluster:", err)
			}
			return fmt.Errorf("cluster %s deleted with %d errors", c.Name, len(errs))
		}
		// The clusters' directory goes with the last of them.
		if defaultDir {
			_ = os.Remove(clustersDir)
		}
		logf("cluster %s deleted", c.Name)
		return nil
	}
	cfg.Name, cfg.Dir = *name, *dir
	for _, p := range []*string{&cfg.K8sBin, &cfg.NetBin, &cfg.NodeInit, &cfg.Pause, &cfg.Repo} {
		if *p != "" {
			abs, err := filepath.Abs(*p)
			if err != nil {
				return err
			}
			*p = abs
		}
	}
	cfg.BaseCache = filepath.Dir(cfg.NetBin)
	c, err := cluster.Create(cfg, logf)
	if err != nil {
		if c != nil {
			return fmt.Errorf("%w\n(what was made is left for its logs: make cluster-down NAME=%s removes it)", err, cfg.Name)
		}
		return err
	}
	fmt.Printf(`
Cluster %s is up: %d %s nodes Ready (%s), the first %v and all %v after the start.
  export KUBECONFIG=%s
  %s get nodes -o wide
The nodes are podman containers in the cluster's own store:
  CONTAINERS_CONF=%s/podman/containers.conf CONTAINERS_STORAGE_CONF=%s/podman/storage.conf podman ps
Take it down: make cluster-down NAME=%s
`, c.Name, len(c.NodeNames), c.Flavor, strings.Join(c.NodeNames, ", "), c.Times.FirstReady.Round(100*time.Millisecond),
		c.Times.AllReady.Round(100*time.Millisecond), c.Kubeconfig(), filepath.Join(c.K8sBin, "kubectl"), c.Dir, c.Dir, c.Name)
	return nil
}
