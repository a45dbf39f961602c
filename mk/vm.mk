# The VM suite (test/vm, test/k8s/vm*_test.go): a modern node host, booted
# under qemu, for the real-node tests — cgroup v2 only, systemd as PID 1,
# containerd with SystemdCgroup = true, the kubelet with cgroupDriver:
# systemd. Included by the Makefile, which defines GO and BIN. The guest is
# built from Debian's packages (test/vm/build-image.sh, cached outside the
# tree); the control plane runs on this machine's loopback, as in
# make e2e-k8s (its etcd from make cluster-build), and the guest reaches it
# through qemu's user network.

# Where build-image.sh keeps its images (its default: ~/.cache/nodeinit/vm).
VM_CACHE        ?=
E2E_VM_TIMEOUT  ?= 45m
# qemu's accelerator: tcg (the default) boots anywhere; kvm where the host's
# KVM runs a stock guest.
VM_ACCEL        ?= tcg
# Where a failed run keeps the guest's console and journal.
VM_LOGS         ?= $(CURDIR)/$(BIN)/e2e-vm-logs

.PHONY: vm-image e2e-vm e2e-vm-oldest bench-k8s-vm

vm-image: ## the VM suite's guest: a Debian systemd host, cgroup v2 only, as an ext4 image, into the cache (≈ 5 min the first time)
	test/vm/build-image.sh $(VM_CACHE)

# make e2e-vm runs the suite in a network and mount namespace of its own
# (test/vm/netns.sh), with a fixture that owns only that namespace
# (NODEINIT_K8S_GUESTS_ONLY): so it runs beside make e2e-k8s, whose tests
# leave more than a core idle, and the guest's emulation takes about one.
e2e-vm: build ## the real-node tests on a cgroup v2 systemd host booted under qemu: the node image in the guest's podman (root; runs beside make e2e-k8s)
	@rm -rf $(VM_LOGS); img=$$(test/vm/build-image.sh $(VM_CACHE) | tail -n 1) && \
	  bin=$$(test/k8s/build/build.sh $(K8S_CACHE) | tail -n 1) && \
	  oldest=$$(test/k8s/build/build.sh --release $(K8S_OLDEST) $(K8S_CACHE) | tail -n 1) && \
	  net=$$(test/cluster/build/build.sh | tail -n 1) && \
	  echo "VM image: $$img" && echo "Kubernetes binaries: $$bin; the oldest release's node binaries: $$oldest; etcd: $$net" && \
	  $(GO) list -deps -test -tags k8s ./test/k8s >/dev/null && \
	  NODEINIT_K8S_GUESTS_ONLY=1 NODEINIT_VM_IMAGE=$$img NODEINIT_VM_ACCEL=$(VM_ACCEL) NODEINIT_K8S_BIN=$$bin NODEINIT_K8S_OLDEST_BIN=$$oldest NODEINIT_CLUSTER_BIN=$$net NODEINIT_VM_NODEINIT=$(CURDIR)/$(BIN)/nodeinit NODEINIT_VM_LOGS=$(VM_LOGS) \
	  test/vm/netns.sh $(GO) test -tags k8s -count=1 -json -timeout $(E2E_VM_TIMEOUT) -run '^TestModernHost$$' ./test/k8s | $(FAILURES)

# The host's shutdown drained with the oldest supported release's kubelet
# and kube-proxy alone (make e2e-vm runs it among the rest): a guest boot of
# its own, 69 s in the latest whole run.
VM_OLDEST_CASE := host_shutdown_drains_the_node,_oldest_release

e2e-vm-oldest: build ## only the VM suite's host shutdown drained with the oldest supported release's kubelet (root)
	@rm -rf $(VM_LOGS); img=$$(test/vm/build-image.sh $(VM_CACHE) | tail -n 1) && \
	  bin=$$(test/k8s/build/build.sh $(K8S_CACHE) | tail -n 1) && \
	  oldest=$$(test/k8s/build/build.sh --release $(K8S_OLDEST) $(K8S_CACHE) | tail -n 1) && \
	  net=$$(test/cluster/build/build.sh | tail -n 1) && \
	  NODEINIT_VM_IMAGE=$$img NODEINIT_VM_ACCEL=$(VM_ACCEL) NODEINIT_K8S_BIN=$$bin NODEINIT_K8S_OLDEST_BIN=$$oldest NODEINIT_CLUSTER_BIN=$$net NODEINIT_VM_NODEINIT=$(CURDIR)/$(BIN)/nodeinit NODEINIT_VM_LOGS=$(VM_LOGS) \
	  $(GO) test -tags k8s -count=1 -json -timeout $(E2E_VM_TIMEOUT) -run '^TestModernHost$$/^$(VM_OLDEST_CASE)$$' ./test/k8s | $(FAILURES)

# Rounds of the node containers' comparison on the modern host: each is
# systemd's node image, nodeinit's, and nodeinit's with
# --graceful-node-shutdown, about 3 minutes each under TCG (a minute of it
# idle, for the CPU).
VM_BENCH_ROUNDS ?= 3
VM_BENCH_TIMEOUT ?= 90m

bench-k8s-vm: build ## make bench-k8s's node containers (nodeinit's node image against a systemd node) on the cgroup v2 systemd host under qemu, in one guest boot: the table and the ratios (root)
	@img=$$(test/vm/build-image.sh $(VM_CACHE) | tail -n 1) && \
	  bin=$$(test/k8s/build/build.sh $(K8S_CACHE) | tail -n 1) && \
	  net=$$(test/cluster/build/build.sh | tail -n 1) && \
	  out=$$(mktemp) && trap 'rm -f "$$out"' EXIT && \
	  NODEINIT_VM_IMAGE=$$img NODEINIT_VM_ACCEL=$(VM_ACCEL) NODEINIT_K8S_BIN=$$bin NODEINIT_CLUSTER_BIN=$$net NODEINIT_VM_NODEINIT=$(CURDIR)/$(BIN)/nodeinit NODEINIT_VM_LOGS=$(VM_LOGS) \
	  NODEINIT_VM_BENCH_ROUNDS=$(VM_BENCH_ROUNDS) NODEINIT_VM_BENCH_OUT=$$out \
	  $(GO) test -tags k8s -count=1 -v -timeout $(VM_BENCH_TIMEOUT) -run '^TestModernHostBench$$' ./test/k8s >&2; \
	  rc=$$?; echo; cat "$$out"; exit $$rc
