//go:build tools

// Package build pins the oldest Kubernetes release still supported upstream
// whose node binaries the real-node tests also run, against the control
// plane of the release test/k8s/build pins (the version-skew policy allows
// a kubelet and kube-proxy up to three minors older than the apiserver).
// Only the node part is built; build.sh --release v1.35 builds it.
package build

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy/app"
	_ "k8s.io/kubernetes/cmd/kubelet/app"
)
