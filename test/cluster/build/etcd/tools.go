//go:build tools

// Package etcd pins the cluster's store: etcd of the version the
// Kubernetes release's own go.mod pins for its client (v3.7.0 for v1.37),
// the etcd its control plane is tested with. Debian 12's etcd-server is
// 3.4.23, which answers no watch progress request: on it the API
// server's watch cache lags behind etcd, and a watch or a consistent list
// may end with "Too large resource version". build.sh builds it.
package etcd

import (
	_ "go.etcd.io/etcd/server/v3"
)
