//go:build k8s

package k8s

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// startControlPlane starts etcd (the cluster's build, of the release
// Kubernetes pins), kube-apiserver, kube-controller-manager and
// kube-scheduler on 127.0.0.1, with certificates made here, and waits until
// the API serves and the controllers have made what pods need: the default
// ServiceAccount and the kube-root-ca.crt ConfigMap.
func (c *cluster) startControlPlane() error {
	var err error
	if c.pki, err = newPKI(filepath.Join(c.dir, "pki")); err != nil {
		return err
	}
	p := c.pki
	if err := p.serviceAccountKeys(); err != nil {
		return err
	}
	if _, err := p.issue("apiserver", "kube-apiserver", nil, "127.0.0.1", "localhost", "10.96.0.1", "kubernetes.default.svc"); err != nil {
		return err
	}
	if c.admin, err = p.issue("admin", "nodeinit-test-admin", []string{"system:masters"}); err != nil {
		return err
	}
	for _, id := range []struct{ name, cn string }{
		{"controller-manager", "system:kube-controller-manager"},
		{"scheduler", "system:kube-scheduler"},
	} {
		cert, err := p.issue(id.name, id.cn, nil)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(c.dir, id.name+".conf"), p.kubeconfig(apiServer, cert), 0o600); err != nil {
			return err
		}
	}
	tlsc, err := p.tlsConfig(c.admin)
	if err != nil {
		return err
	}
	c.api = &api{base: apiServer, client: &http.Client{Transport: &http.Transport{TLSClientConfig: tlsc}}}
	insecure := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a health check of our own server

	etcd, err := c.start("etcd", filepath.Join(c.net, "etcd"),
		"--name=nodeinit-test", "--data-dir="+filepath.Join(c.dir, "etcd"),
		"--listen-client-urls=http://127.0.0.1:2379", "--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=nodeinit-test=http://127.0.0.1:2380")
	if err != nil {
		return err
	}
	if err := waitHTTP(insecure, "http://127.0.0.1:2379/health", etcd, 30*time.Second); err != nil {
		return err
	}

	apiserver, err := c.start("kube-apiserver", filepath.Join(c.bin, "kube-apiserver"),
		"--etcd-servers=http://127.0.0.1:2379",
		"--bind-address=127.0.0.1", "--secure-port=6443", "--advertise-address=127.0.0.1",
		// A loopback address cannot be an endpoint of the kubernetes Service.
		"--endpoint-reconciler-type=none",
		"--cert-dir="+filepath.Join(c.dir, "apiserver"),
		"--tls-cert-file="+p.path("apiserver.crt"), "--tls-private-key-file="+p.path("apiserver.key"),
		"--client-ca-file="+p.path("ca.crt"),
		"--kubelet-client-certificate="+p.path("admin.crt"), "--kubelet-client-key="+p.path("admin.key"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+p.path("sa.pub"), "--service-account-signing-key-file="+p.path("sa.key"),
		"--service-cluster-ip-range="+serviceCIDR,
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
		// The node DaemonSet's pod is privileged, as a node's kubelet is.
		"--allow-privileged=true",
		"--profiling=false")
	if err != nil {
		return err
	}
	if err := waitHTTP(c.api.client, apiServer+"/readyz", apiserver, 60*time.Second); err != nil {
		return err
	}

	cm, err := c.start("kube-controller-manager", filepath.Join(c.bin, "kube-controller-manager"),
		"--kubeconfig="+filepath.Join(c.dir, "controller-manager.conf"),
		"--bind-address=127.0.0.1", "--secure-port=10257", "--cert-dir="+filepath.Join(c.dir, "controller-manager"),
		"--use-service-account-credentials", "--root-ca-file="+p.path("ca.crt"),
		"--service-account-private-key-file="+p.path("sa.key"),
		"--cluster-signing-cert-file="+p.path("ca.crt"), "--cluster-signing-key-file="+p.path("ca.key"),
		// Not /usr/libexec/kubernetes, which it would try to make.
		"--flex-volume-plugin-dir="+filepath.Join(c.dir, "volume-plugins"),
		"--leader-elect=false", "--profiling=false")
	if err != nil {
		return err
	}
	sched, err := c.start("kube-scheduler", filepath.Join(c.bin, "kube-scheduler"),
		"--kubeconfig="+filepath.Join(c.dir, "scheduler.conf"),
		"--bind-address=127.0.0.1", "--secure-port=10259", "--cert-dir="+filepath.Join(c.dir, "scheduler"),
		"--leader-elect=false", "--profiling=false")
	if err != nil {
		return err
	}
	if err := waitHTTP(insecure, "https://127.0.0.1:10257/healthz", cm, 60*time.Second); err != nil {
		return err
	}
	if err := waitHTTP(insecure, "https://127.0.0.1:10259/healthz", sched, 60*time.Second); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.waitObject(ctx, "/api/v1/namespaces/default/serviceaccounts", "default"); err != nil {
		return fmt.Errorf("the controller-manager made no default ServiceAccount: %w\n%s", err, cm.tail())
	}
	if err := c.waitObject(ctx, "/api/v1/namespaces/default/configmaps", "kube-root-ca.crt"); err != nil {
		return fmt.Errorf("the controller-manager published no kube-root-ca.crt: %w\n%s", err, cm.tail())
	}
	return nil
}

// start starts a server with its log in the fixture's directory, and
// remembers it so that close stops it.
func (c *cluster) start(name string, argv ...string) (*server, error) {
	s, err := startServer(c.dir, name, argv...)
	if err != nil {
		return nil, err
	}
	c.servers = append(c.servers, s)
	return s, nil
}
