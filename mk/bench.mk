# The benchmarks (docs/benchmarks.md). Included by the Makefile, which
# defines GO and BIN; the real-node workload uses K8S_CACHE and
# E2E_K8S_TIMEOUT of mk/k8s.mk.

# Rounds of the real-node workload: each is one node under nodeinit and one
# under a shell script, about 5 s for the two; their times vary by tens of
# per cent from node to node, so it takes many to tell 5 %.
K8S_BENCH_ROUNDS ?= 20
# Rounds of the node containers' comparison (issue 24): each is systemd's
# node image, nodeinit's, and nodeinit's with --graceful-node-shutdown, in
# podman, about 80 s each (a minute of it idle, for the CPU); 0 leaves it out.
K8S_BENCH_CONTAINER_ROUNDS ?= 3

.PHONY: bench bench-short bench-k8s bench-k8s-if-built

bench: build ## nodeinit against the Go floor and tini, dumb-init, catatonit; its growth; the real node when make k8s has built it (root)
	$(GO) run ./test/bench -nodeinit $(BIN)/nodeinit
	@$(MAKE) --no-print-directory bench-k8s-if-built

bench-short: build ## the benchmark harness in its short CI mode (no real node)
	$(GO) run ./test/bench -nodeinit $(BIN)/nodeinit -short

bench-k8s: build ## the real-node workload alone: nodeinit against a shell script, and nodeinit's node image against a systemd node image, with the real kubelet and kube-proxy (root; builds them first if need be)
	@bin=$$(test/k8s/build/build.sh $(K8S_CACHE) | tail -n 1) && net=$$(test/cluster/build/build.sh | tail -n 1) && \
	  $(call k8s-bench,$$bin,$$net)

# make bench runs the real-node workload only when the binaries and the
# control plane's etcd are in the cache already: building them takes some
# ten minutes.
bench-k8s-if-built:
	@if bin=$$(test/k8s/build/build.sh --cached $(K8S_CACHE) 2>/dev/null) && net=$$(test/cluster/build/build.sh --cached 2>/dev/null); then \
	  $(call k8s-bench,$$bin,$$net); \
	else echo; echo "Real node: not measured, the Kubernetes binaries or etcd are not in the cache (make k8s and make cluster-build build them; make bench-k8s builds them and measures)."; fi

# k8s-bench runs test/k8s's TestRealNodeBench with the binaries in $(1)
# and the cluster's build (its etcd) in $(2):
# its progress to stderr, its table to stdout (also when the test failed,
# say on a host it found changed after a node: the times were taken).
k8s-bench = out=$$(mktemp) && trap 'rm -f "$$out"' EXIT && \
	NODEINIT_K8S_BIN=$(1) NODEINIT_CLUSTER_BIN=$(2) NODEINIT_K8S_BENCH_ROUNDS=$(K8S_BENCH_ROUNDS) NODEINIT_K8S_BENCH_OUT=$$out \
	NODEINIT_K8S_BENCH_CONTAINER_ROUNDS=$(K8S_BENCH_CONTAINER_ROUNDS) \
	NODEINIT_BENCH_NODEINIT=$(CURDIR)/$(BIN)/nodeinit \
	$(GO) test -tags k8s -count=1 -v -timeout $(E2E_K8S_TIMEOUT) -run '^TestRealNodeBench$$' ./test/k8s >&2; \
	rc=$$?; echo; cat "$$out"; exit $$rc
