# The long runs of the test suite. Included by the Makefile, which defines
# GO and STATICCHECK. A long run is a test in a file with the build tag
# long: the same behaviour as a fast test's at the count that catches a rare
# race (a thousand PID-1 runs, 20,000 orphans), or a run of a minute and
# more (the benchmark harness in its short mode). `go test ./...` and `make
# test` do not build them; CI runs them after `make test`.

# The files, packages and tests of the long runs.
LONG_FILES = $(shell grep -rl --include='*_test.go' '^//go:build long' .)
LONG_PKGS  = $(sort $(patsubst %/,%,$(dir $(LONG_FILES))))
LONG_TESTS = $(shell sed -nE 's/^func (Test[A-Za-z0-9_]+)\(t \*testing\.T\).*/\1/p' $(LONG_FILES) | sort -u | paste -sd'|')
LONG_TIMEOUT ?= 15m

.PHONY: test-long lint-long

test-long: ## the long runs: every test with the build tag long (root; about 1.5 min on 2 cores)
	$(GO) test -tags long -count=1 -json -timeout $(LONG_TIMEOUT) -run '^($(LONG_TESTS))$$' $(LONG_PKGS) | $(FAILURES)

# The long runs carry the build tag long, so `go vet ./...` and staticcheck
# in lint do not see them: this runs both with the tag, as part of lint.
lint: lint-long
lint-long:
	$(GO) vet -tags long $(LONG_PKGS)
	$(STATICCHECK) -tags long $(LONG_PKGS)
