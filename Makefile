# nodeinit: every developer command. `make help` lists them.

GO        ?= go
# The Go release every target builds, tests and scans with. The go command
# fetches it from the Go module proxy on first use (76 MB, about 10 s) and
# runs it in place of the machine's Go, whose go.env says GOTOOLCHAIN=local
# (so go.mod alone cannot ask for it). A release behind this one carries
# standard-library vulnerabilities that make vuln reports.
GOTOOLCHAIN ?= go1.27.3
export GOTOOLCHAIN
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X main.version=$(VERSION)
BIN       := bin
# Built by the same Go as the code it checks: a staticcheck built by an older
# Go cannot type-check a newer standard library.
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2
# The long runs' test output: `go test -json` piped through it reads as
# `go test -v`, ending with each failed test's last log entries, where a CI
# log's tail shows them; its exit status is the run's.
FAILURES  ?= $(GO) run ./test/failures
# podman or docker, whichever is installed.
ENGINE    ?= $(shell command -v podman 2>/dev/null || command -v docker 2>/dev/null)

export CGO_ENABLED := 0

.PHONY: help build helpers test test-race lint demo clean

help: ## list the targets
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

build: ## static, stripped bin/nodeinit, version stamped
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/nodeinit ./cmd/nodeinit

helpers: ## the demo executor and proxy, and the test helper programs
	$(GO) build -trimpath -o $(BIN)/ ./test/helpers/...

# The long runs (build tag long) are make test-long's, in mk/long.mk.
test: ## every test but the long runs (make test-long); root tests need root (CI=true fails instead of skipping); on 2 cores 1.5–3 minutes warm by the machine (docs/testing.md)
	$(GO) test -count=1 ./...

test-race: ## make test's tests, short, under the race detector, with a race-built nodeinit in the integration tests (130–169 s on 2 cores with the build cache warm, 4.5–5 minutes with it empty)
	CGO_ENABLED=1 NODEINIT_RACE=1 $(GO) test -race -short -count=1 ./...

lint: ## gofmt, go vet, staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go') $$(git ls-files -o --exclude-standard '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags soak ./test/soak
	$(STATICCHECK) ./...
	$(STATICCHECK) -tags soak ./test/soak

demo: build helpers ## nodeinit as PID 1 of a new pid namespace with the demo executor and proxy (root; Ctrl-C stops it)
	unshare --pid --fork --mount-proc --kill-child \
	  $(BIN)/nodeinit --proxy-path=$(BIN)/demo-proxy --proxy-arg=--interval=5s \
	  --shutdown-grace-period=5s -- $(BIN)/demo-executor --interval=3s

clean: ## remove build output
	rm -rf $(BIN)

# Benchmarks (mk/bench.mk), images and end-to-end tests (mk/image.mk), the
# real-node tests (mk/k8s.mk), the test suite's long runs (mk/long.mk), the
# soak runs and the vulnerability scan (mk/soak.mk).
include $(wildcard mk/*.mk)
