# The long runs of the test suite. Included by the Makefile, which defines
# GO and STATICCHECK. A long run is a test named TestLong... in a file with
# the build tag long: the same behaviour as a fast test's, at the count that
# catches a rare race (a thousand PID-1 runs, 20,000 orphans). `go test
# ./...` and `make test` do not build them; CI runs them after `make test`.

# The packages that hold long runs.
LONG_PKGS = $(sort $(patsubst %/,%,$(dir $(shell grep -rl --include='*_test.go' '^//go:build long' .))))
LONG_TIMEOUT ?= 10m

.PHONY: test-long lint-long

test-long: ## the long runs: every TestLong of the tree, build tag long (root; about 1.5 min on 2 cores)
	$(GO) test -tags long -count=1 -v -timeout $(LONG_TIMEOUT) -run '^TestLong' $(LONG_PKGS)

# The long runs carry the build tag long, so `go vet ./...` and staticcheck
# in lint do not see them: this runs both with the tag, as part of lint.
lint: lint-long
lint-long:
	$(GO) vet -tags long $(LONG_PKGS)
	$(STATICCHECK) -tags long $(LONG_PKGS)
