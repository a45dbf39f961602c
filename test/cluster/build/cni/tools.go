//go:build tools

// Package cni pins the flannel CNI plugin: the plugin that reads the
// subnet flanneld leased to the node (/run/flannel/subnet.env) and hands
// the pod to the bridge and host-local plugins with it. Its own module
// (github.com/flannel-io/cni-plugin) is not served by the Go module proxy;
// this is the code it was forked from, containernetworking/plugins'
// plugins/meta/flannel, which that module carried up to v0.9.1. build.sh
// builds it.
package cni

import (
	_ "github.com/containernetworking/plugins/plugins/meta/flannel"
)
