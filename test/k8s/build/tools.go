//go:build tools

// Package build pins the Kubernetes release whose node and control-plane
// binaries the real-node tests run. It is a module of its own, so none of
// Kubernetes enters nodeinit's go.mod; this file only lets `go mod tidy`
// record every module the commands below need. mk/k8s.mk builds them.
package build

import (
	_ "k8s.io/kubectl/pkg/cmd"
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	_ "k8s.io/kubernetes/cmd/kube-proxy/app"
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
	_ "k8s.io/kubernetes/cmd/kubelet/app"
)
