# A cluster of nodeinit nodes on this machine (test/cluster, docs/cluster.md):
# one control plane and NODES containers of the self-contained node image
# (images/node-runtime) on a podman network, flannel and CoreDNS. Included by
# the Makefile, which defines GO, BIN, STATICCHECK and FAILURES. The
# Kubernetes binaries come from test/k8s/build (make k8s), flanneld, the
# flannel CNI plugin, coredns and the control plane's etcd from
# test/cluster/build (make cluster-build), each built once into a cache
# outside the tree.

NODES   ?= 3
NAME    ?= nodeinit
# The nodes' PID 1: nodeinit, or systemd (kind's model, the baseline).
FLAVOR  ?= nodeinit
# Empty: the command's default, 172.30.40.0/24. Two clusters at once need
# two subnets.
SUBNET  ?=
# Empty: the command's default, /var/lib/nodeinit-cluster/NAME.
CLUSTER_DIR ?=
E2E_CLUSTER_TIMEOUT ?= 20m

.PHONY: cluster-build cluster cluster-down cluster-load e2e-cluster lint-cluster

cluster-build: ## flanneld, the flannel CNI plugin, coredns and etcd from the Go module proxy, into the cache (≈ 3–10 min the first time, and etcd's 3 min of CPU)
	test/cluster/build/build.sh

# The pods' sandbox program, static (CGO_ENABLED=0 from the Makefile).
$(BIN)/pause: test/k8s/pause/main.go
	$(GO) build -trimpath -o $@ ./test/k8s/pause

cluster: build $(BIN)/pause ## a cluster of NODES (3) nodes (FLAVOR=nodeinit or systemd) with flannel and CoreDNS; prints how to use kubectl with it (root)
	@bin=$$(test/k8s/build/build.sh | tail -n 1) && net=$$(test/cluster/build/build.sh | tail -n 1) && \
	  $(GO) run ./test/cluster/cmd/cluster create --name=$(NAME) --nodes=$(NODES) --flavor=$(FLAVOR) \
	    $(if $(SUBNET),--subnet=$(SUBNET)) $(if $(CLUSTER_DIR),--dir=$(CLUSTER_DIR)) \
	    --k8s-bin=$$bin --net-bin=$$net --nodeinit=$(BIN)/nodeinit --pause=$(BIN)/pause

cluster-down: ## take the cluster NAME (nodeinit) down: containers, network, volumes, cgroups, its directory (root)
	$(GO) run ./test/cluster/cmd/cluster delete --name=$(NAME) $(if $(CLUSTER_DIR),--dir=$(CLUSTER_DIR))

cluster-load: ## load image archives (IMAGES="app.tar ...", podman save or docker save) into every node of the cluster NAME (root)
	@test -n "$(IMAGES)" || { echo 'make cluster-load: name the archives: IMAGES="app.tar ..."'; exit 2; }
	$(GO) run ./test/cluster/cmd/cluster load --name=$(NAME) $(if $(CLUSTER_DIR),--dir=$(CLUSTER_DIR)) $(abspath $(IMAGES))

e2e-cluster: build $(BIN)/pause ## the cluster test: 3 nodes up, pod network, Services, DNS, logs/exec, a pull through the registry, a node stopped and started, the cluster deleted and nothing left (root)
	@bin=$$(test/k8s/build/build.sh | tail -n 1) && net=$$(test/cluster/build/build.sh | tail -n 1) && \
	  NODEINIT_K8S_BIN=$$bin NODEINIT_CLUSTER_BIN=$$net \
	  $(GO) test -tags cluster -count=1 -json -timeout $(E2E_CLUSTER_TIMEOUT) ./test/cluster | $(FAILURES)

# The test carries the build tag cluster: vet and staticcheck with it, as
# part of lint.
lint: lint-cluster
lint-cluster:
	$(GO) vet -tags cluster ./test/cluster/...
	$(STATICCHECK) -tags cluster ./test/cluster/...
