# Kubernetes' own end-to-end suite against a nodeinit node: e2e.test of the
# release test/k8s/build pins, run on the real-node suite's control plane
# against one node of nodeinit with the real kubelet and kube-proxy
# (TestConformance in test/k8s). Included by the Makefile, which defines GO
# and FAILURES. test/k8s/conformance/build.sh builds the suite and agnhost
# from the Go module proxy into the cache make k8s uses, with make k8s's
# flags, so that what both compile is compiled once; the suite's images are
# made here on the first run (images/agnhost, images/busybox) and kept
# beside the build. docs/conformance.md has the last results.

# The specs a run selects: CONFORMANCE_SPECS, a file of full spec names,
# one a line (the fixed set CI can afford, by default), or a ginkgo focus
# of your own, CONFORMANCE_FOCUS='\[Conformance\]' say, which then wins.
CONFORMANCE_SPECS   ?= test/k8s/conformance/ci-specs.txt
CONFORMANCE_FOCUS   ?=
# A ginkgo label filter that narrows what the specs or the focus select:
# 'NodeConformance && !Conformance', say.
CONFORMANCE_LABELS  ?=
# The nodes: empty, one nodeinit node on the real-node suite's control
# plane; or the directory of a cluster make cluster brought up
# (/var/lib/nodeinit-cluster/nodeinit for make cluster's default), whose
# nodes pull the suite's images from a registry on the host.
CONFORMANCE_CLUSTER ?=
# ginkgo processes: above 1 the [Serial] specs run after the rest, alone.
CONFORMANCE_PROCS   ?= 1
# Where junit_01.xml (with several processes, in parallel/ and serial/),
# results.md (the table) and e2e*.log go.
CONFORMANCE_REPORT  ?= $(BIN)/conformance
# The suite's own bound, and the bound of the whole run around it.
CONFORMANCE_TIMEOUT ?= 30m
CONFORMANCE_GO_TIMEOUT ?= 45m

.PHONY: conformance conformance-build

conformance-build: ## e2e.test, agnhost and ginkgo of the suite's release, into make k8s's cache (3 min when make k8s has filled the build cache, 20–25 the first time)
	nice test/k8s/conformance/build.sh $(K8S_CACHE)

conformance: ## Kubernetes' e2e suite on a nodeinit node or CONFORMANCE_CLUSTER's nodes: CONFORMANCE_SPECS (the CI set, ≈ 8 min) or CONFORMANCE_FOCUS; JUnit and a table in CONFORMANCE_REPORT (root)
	@bin=$$(nice test/k8s/build/build.sh $(K8S_CACHE) | tail -n 1) && \
	  suite=$$(nice test/k8s/conformance/build.sh $(K8S_CACHE) | tail -n 1) && \
	  net=$$(nice test/cluster/build/build.sh | tail -n 1) && \
	  echo "Kubernetes binaries: $$bin; the e2e suite: $$suite; CoreDNS and etcd: $$net" && \
	  NODEINIT_K8S_BIN=$$bin NODEINIT_CONFORMANCE_BIN=$$suite NODEINIT_CLUSTER_BIN=$$net $(CONFORMANCE_ENV) \
	  $(if $(CONFORMANCE_CLUSTER),NODEINIT_CONFORMANCE_CLUSTER=$(abspath $(CONFORMANCE_CLUSTER))) \
	  $(GO) test -tags k8s -count=1 -json -timeout $(CONFORMANCE_GO_TIMEOUT) -run '^TestConformance$$' ./test/k8s | $(FAILURES)

# What a run runs, and where its reports go, for TestConformance and
# TestModernHostConformance.
CONFORMANCE_ENV = NODEINIT_CONFORMANCE_REPORT=$(abspath $(CONFORMANCE_REPORT)) NODEINIT_CONFORMANCE_TIMEOUT=$(CONFORMANCE_TIMEOUT) \
  NODEINIT_CONFORMANCE_PROCS=$(CONFORMANCE_PROCS) NODEINIT_CONFORMANCE_LABELS='$(CONFORMANCE_LABELS)' \
  $(if $(CONFORMANCE_FOCUS),NODEINIT_CONFORMANCE_FOCUS='$(CONFORMANCE_FOCUS)',NODEINIT_CONFORMANCE_SPECS=$(abspath $(CONFORMANCE_SPECS)))

# The node image on the VM suite's modern host (cgroup v2 only, systemd,
# under qemu; mk/vm.mk), run as the README runs it there, on the real-node
# suite's control plane in test/vm/netns.sh's namespaces, as make e2e-vm
# runs: by default the fixed set's [NodeConformance] specs
# (test/k8s/conformance/vm-specs.txt), on one process, with bounds for
# the guest's emulation. The variables above choose otherwise.
.PHONY: conformance-vm

conformance-vm: CONFORMANCE_SPECS = test/k8s/conformance/vm-specs.txt
conformance-vm: CONFORMANCE_TIMEOUT = 90m
conformance-vm: CONFORMANCE_GO_TIMEOUT = 120m
conformance-vm: build ## Kubernetes' e2e suite on the node image in the cgroup v2 systemd guest under qemu: the fixed set's [NodeConformance] specs (root; ≈ 11 min under TCG)
	@img=$$(test/vm/build-image.sh $(VM_CACHE) | tail -n 1) && \
	  bin=$$(nice test/k8s/build/build.sh $(K8S_CACHE) | tail -n 1) && \
	  suite=$$(nice test/k8s/conformance/build.sh $(K8S_CACHE) | tail -n 1) && \
	  net=$$(nice test/cluster/build/build.sh | tail -n 1) && \
	  echo "VM image: $$img; Kubernetes binaries: $$bin; the e2e suite: $$suite" && \
	  $(GO) list -deps -test -tags k8s ./test/k8s >/dev/null && \
	  NODEINIT_K8S_GUESTS_ONLY=1 NODEINIT_VM_IMAGE=$$img NODEINIT_VM_ACCEL=$(VM_ACCEL) NODEINIT_VM_NODEINIT=$(CURDIR)/$(BIN)/nodeinit NODEINIT_VM_LOGS=$(VM_LOGS) \
	  NODEINIT_K8S_BIN=$$bin NODEINIT_CONFORMANCE_BIN=$$suite NODEINIT_CLUSTER_BIN=$$net $(CONFORMANCE_ENV) \
	  test/vm/netns.sh $(GO) test -tags k8s -count=1 -json -timeout $(CONFORMANCE_GO_TIMEOUT) -run '^TestModernHostConformance$$' ./test/k8s | $(FAILURES)

# CI's run of the fixed set: on a cluster of three nodeinit nodes of its
# own (make cluster's code, on a subnet of its own), where the cluster DNS
# answers and a host-exec pod's /proc/1 is the node's nodeinit, taken down
# after the run whatever its outcome.
CONFORMANCE_CI_NAME   ?= conformance
CONFORMANCE_CI_SUBNET ?= 172.30.48.0/24

.PHONY: e2e-conformance

e2e-conformance: build $(BIN)/pause ## the fixed set (CONFORMANCE_SPECS) on three nodeinit nodes of a cluster of its own, brought up and taken down (root; ≈ 6 min)
	@bin=$$(nice test/k8s/build/build.sh $(K8S_CACHE) | tail -n 1) && net=$$(nice test/cluster/build/build.sh | tail -n 1) && \
	  nice test/k8s/conformance/build.sh $(K8S_CACHE) >/dev/null && \
	  { $(GO) run ./test/cluster/cmd/cluster create --name=$(CONFORMANCE_CI_NAME) --nodes=3 --subnet=$(CONFORMANCE_CI_SUBNET) \
	      --k8s-bin=$$bin --net-bin=$$net --nodeinit=$(BIN)/nodeinit --pause=$(BIN)/pause && \
	    $(MAKE) --no-print-directory conformance CONFORMANCE_CLUSTER=/var/lib/nodeinit-cluster/$(CONFORMANCE_CI_NAME) CONFORMANCE_PROCS=2; \
	    rc=$$?; $(GO) run ./test/cluster/cmd/cluster delete --name=$(CONFORMANCE_CI_NAME) || rc=1; exit $$rc; }
