// Package k8s runs nodeinit with the real kubelet and kube-proxy of the
// Kubernetes release test/k8s/build pins, against a real control plane
// (etcd, kube-apiserver, kube-controller-manager, kube-scheduler on
// 127.0.0.1) and containerd, and checks what a node operator relies on: the
// Node registers and is Ready, pods run with their service-account token,
// kube-proxy programs Services in each mode and is restarted on its backoff,
// TERM stops the kubelet before kube-proxy, pods land in the cgroup nodeinit
// hands the kubelet, the node image runs in podman, and every command line
// --write-flags builds is one the real binaries accept. Everything a run
// changes on the host is put back and checked.
//
// The tests carry the build tag k8s, so that `go test ./...` leaves them
// out; `make e2e-k8s` (root) builds the binaries and runs them. The fixture
// and its timings are described in docs/real-node.md.
package k8s
