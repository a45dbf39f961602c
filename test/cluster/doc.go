// Package cluster brings up a Kubernetes cluster on one machine whose nodes
// are containers of the self-contained node image (images/node-runtime):
// nodeinit as PID 1 of each, running the node's own containerd, then the
// kubelet and kube-proxy. One control plane (etcd, kube-apiserver,
// kube-controller-manager with node CIDRs, kube-scheduler, each a container
// of its own sharing one address) and the nodes sit on a podman network of
// the cluster's own; flannel (vxlan) is the pod network, deployed as a
// DaemonSet, and CoreDNS the cluster's DNS, as a Deployment behind the
// kube-dns Service. Every image is built on the machine (nothing is pulled)
// and loaded into each node's containerd. The systemd flavor
// (Config.Flavor) is kind's model, the baseline: the same nodes with
// systemd as PID 1 supervising containerd, the kubelet and kube-proxy as
// units (images/systemd-node-runtime).
//
// Everything the cluster makes lives in its directory (a podman store, the
// certificates and kubeconfigs, the images' archives) or is named after it
// (the podman network, the nodes' cgroups), so that Delete removes it all
// and leaves the machine as it was. make cluster and make cluster-down
// (mk/cluster.mk) run the command in ./cmd/cluster; the tests
// (build tag cluster) use the same code. docs/cluster.md is the operator's
// guide.
package cluster
