# The real-node tests (test/k8s): nodeinit with the real kubelet and
# kube-proxy against a real control plane and containerd. Included by the
# Makefile, which defines GO and STATICCHECK. The Kubernetes binaries come
# from test/k8s/build, a Go module of its own (Kubernetes never enters
# nodeinit's go.mod): build.sh builds them from the Go module proxy into a
# cache outside the tree, keyed on the release, the Go version and the
# flags, and prints the directory; a cached build is reused.

# Where build.sh keeps its builds (its default: ~/.cache/nodeinit/k8s).
K8S_CACHE       ?=
E2E_K8S_TIMEOUT ?= 30m

.PHONY: k8s e2e-k8s lint-k8s

k8s: ## kubelet, kube-proxy, the control plane, kubectl and crictl at the pinned release, into the cache (≈ 10 min the first time)
	test/k8s/build/build.sh $(K8S_CACHE)

e2e-k8s: ## the real-node tests: real kubelet and kube-proxy under nodeinit, a real control plane, containerd, podman (root)
	@bin=$$(test/k8s/build/build.sh $(K8S_CACHE) | tail -n 1) && \
	  echo "Kubernetes binaries: $$bin" && \
	  NODEINIT_K8S_BIN=$$bin $(GO) test -tags k8s -count=1 -v -timeout $(E2E_K8S_TIMEOUT) -skip '^(TestRealNodeBench|TestModernHost)$$' ./test/k8s

# The tests carry the build tag k8s, so `go vet ./...` and staticcheck in
# lint do not see them: this runs both with the tag, as part of lint.
lint: lint-k8s
lint-k8s:
	$(GO) vet -tags k8s ./test/k8s
	$(STATICCHECK) -tags k8s ./test/k8s
