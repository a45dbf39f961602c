package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Delete removes the cluster: its containers (the nodes stopped as podman
// stops them, nodeinit ending each one's kubelet, kube-proxy, containerd
// and pods), its network, volumes and images, what is left of its
// cgroups and mounts, and its directory; and it puts back the kernel
// settings the nodes changed. It goes on past an error and returns them
// all.
func (c *Cluster) Delete() []error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if c.podman != nil {
		// Stopped together: each node's nodeinit takes its pods down.
		if out, err := c.podman.run(30*time.Second, "ps", "--all", "--quiet"); err == nil && strings.TrimSpace(out) != "" {
			_, err := c.podman.run(2*(stopTimeout+30)*time.Second, append([]string{"stop"}, strings.Fields(out)...)...)
			add(err)
		}
		// The control plane's containers share the first one's network
		// namespace: they go before it.
		cp := c.controlPlaneContainers()
		slices.Reverse(cp)
		for _, n := range append(slices.Clone(c.NodeNames), cp...) {
			if _, err := c.podman.run(2*time.Minute, "rm", "--force", "--ignore", "--time", "0", n); err != nil {
				add(err)
			}
		}
		for _, args := range [][]string{
			{"rm", "--all", "--force", "--time", "0"},
			{"network", "rm", "--force", c.Name},
			{"volume", "rm", "--all", "--force"},
			{"rmi", "--all", "--force"},
		} {
			if _, err := c.podman.run(5*time.Minute, args...); err != nil && !(args[0] == "network" && strings.Contains(err.Error(), "network not found")) {
				add(err)
			}
		}
	}
	errs = append(errs, c.removeCgroups()...)
	add(unmountUnder(c.Dir))
	add(os.RemoveAll(c.Dir))
	errs = append(errs, c.putBack()...)
	add(c.unregister())
	return errs
}

// unmountUnder unmounts every mount point under dir (podman's overlay
// mounts of a store whose containers went away), deepest first.
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fl := strings.Fields(sc.Text()); len(fl) > 4 && (fl[4] == dir || strings.HasPrefix(fl[4], dir+"/")) {
			points = append(points, fl[4])
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var errs []error
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}
