# The real-node tests (test/k8s): nodeinit with the real kubelet and
# kube-proxy against a real control plane and containerd. Included by the
# Makefile, which defines GO and STATICCHECK. The control plane's etcd is
# the cluster's (make cluster-build, mk/cluster.mk). The Kubernetes
# binaries come from test/k8s/build, a Go module per release (Kubernetes
# never enters nodeinit's go.mod): test/k8s/build itself pins the suite's
# release (control plane, kubelet, kube-proxy, kubectl, crictl), and
# test/k8s/build/$(K8S_OLDEST) the kubelet and kube-proxy of the oldest
# minor still supported upstream, which the node tests also run. build.sh
# builds a release from the Go module proxy into a cache outside the tree,
# keyed on the release, the Go version and the flags, and prints the
# directory; a cached build is reused.

# Where build.sh keeps its builds (its default: ~/.cache/nodeinit/k8s).
K8S_CACHE       ?=
K8S_OLDEST      ?= v1.35
E2E_K8S_TIMEOUT ?= 30m
# The real node under pod churn: how long the churn runs in make soak-k8s
# (make e2e-k8s runs it for 3 minutes), and the bound of the whole run.
SOAK_K8S_DURATION ?= 30m
SOAK_K8S_TIMEOUT  ?= 60m

.PHONY: k8s e2e-k8s soak-k8s lint-k8s

# The two releases build side by side: they share little (each pins its own
# k8s.io modules), and each build's narrow stretches, where a few large
# packages compile one after the other and the commands link, leave a core
# to the other.
k8s: ## the Kubernetes binaries of the suite's release and the oldest supported one's node binaries, into the cache (≈ 30 min the first time on 2 cores)
	@test/k8s/build/build.sh --release $(K8S_OLDEST) $(K8S_CACHE) & oldest=$$!; \
	  test/k8s/build/build.sh $(K8S_CACHE); rc=$$?; wait $$oldest || rc=1; exit $$rc

e2e-k8s: ## the real-node tests: real kubelet and kube-proxy under nodeinit, a real control plane, containerd, podman (root)
	@bin=$$(test/k8s/build/build.sh $(K8S_CACHE) | tail -n 1) && \
	  oldest=$$(test/k8s/build/build.sh --release $(K8S_OLDEST) $(K8S_CACHE) | tail -n 1) && \
	  net=$$(test/cluster/build/build.sh | tail -n 1) && \
	  echo "Kubernetes binaries: $$bin; the oldest release's node binaries: $$oldest; etcd: $$net" && \
	  NODEINIT_K8S_BIN=$$bin NODEINIT_K8S_OLDEST_BIN=$$oldest NODEINIT_CLUSTER_BIN=$$net \
	  $(GO) test -tags k8s -count=1 -json -timeout $(E2E_K8S_TIMEOUT) -skip '^(TestRealNodeBench|TestModernHost|TestModernHostBench|TestConformance|TestModernHostConformance)$$' ./test/k8s | $(FAILURES)

soak-k8s: ## a real node under pod churn for SOAK_K8S_DURATION (30m): nodeinit's memory, files, threads, goroutines flat, no zombie, its log quiet (root)
	@bin=$$(test/k8s/build/build.sh $(K8S_CACHE) | tail -n 1) && net=$$(test/cluster/build/build.sh | tail -n 1) && \
	  NODEINIT_K8S_BIN=$$bin NODEINIT_CLUSTER_BIN=$$net NODEINIT_SOAK_DURATION=$(SOAK_K8S_DURATION) \
	  $(GO) test -tags k8s -count=1 -json -timeout $(SOAK_K8S_TIMEOUT) -run '^TestNodeUnderPodChurn$$' ./test/k8s | $(FAILURES)

# The tests carry the build tag k8s, so `go vet ./...` and staticcheck in
# lint do not see them: this runs both with the tag, as part of lint.
lint: lint-k8s
lint-k8s:
	$(GO) vet -tags k8s ./test/k8s
	$(STATICCHECK) -tags k8s ./test/k8s
