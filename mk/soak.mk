# Soak runs and the vulnerability scan. Included by the Makefile, which
# defines GO. Neither is part of `make test` or `make test-long`
# (mk/long.mk): `make soak` takes about an hour (docs/soak.md has the last
# results), `make vuln` a few minutes on a fresh machine, most of it
# downloading and compiling.

# How long each fuzz target runs, and with how many workers (1 keeps a shared
# machine usable).
FUZZTIME      ?= 10m
FUZZ_PARALLEL ?= 1
# Where the fuzz logs go: outside the tree, so a run leaves nothing to commit
# but the crashers `go test -fuzz` writes into testdata/fuzz.
SOAK_LOGS     ?= $(or $(TMPDIR),/tmp)/nodeinit-soak
SOAK_TIMEOUT  ?= 15m

# The vulnerability data (a pseudo-version of golang.org/x/vulndb, or latest)
# and the scanner's version, both from the Go module proxy, so vuln.go.dev
# need not be reachable. The module holds the database's entries as OSV
# files in data/osv; govulncheck reads such a directory of OSV files as a
# database (-db file://DIR; it builds the index itself), which spares
# building the served layout with the module's cmd/indexdb and the cloud
# libraries that command drags in (900 MB of modules).
VULNDB_VERSION      ?= latest
GOVULNCHECK_VERSION ?= v1.9.0

.PHONY: soak soak-fuzz soak-crashloop vuln

soak: soak-fuzz soak-crashloop ## soak runs, about an hour: every fuzz target for FUZZTIME (10m) each, then the proxy crash loop soak (root)

soak-fuzz: ## every fuzz target of the tree for FUZZTIME each, one at a time; logs in SOAK_LOGS
	@mkdir -p $(SOAK_LOGS); failed=; \
	targets=$$(grep -rE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*\(' . | \
	  sed -E 's#^(.*)/[^/]*:func (Fuzz[A-Za-z0-9_]*)\(.*#\1:\2#' | sort); \
	test -n "$$targets" || { echo "no fuzz targets found"; exit 1; }; \
	for t in $$targets; do \
	  pkg=$${t%%:*}; fn=$${t##*:}; log=$(SOAK_LOGS)/$$fn.log; \
	  echo "--- $$fn ($$pkg) for $(FUZZTIME): $$log"; \
	  if $(GO) test -run='^$$' -fuzz="^$$fn\$$" -fuzztime=$(FUZZTIME) -parallel=$(FUZZ_PARALLEL) $$pkg >$$log 2>&1; \
	  then grep '^fuzz: elapsed' $$log | tail -n 1; \
	  else tail -n 30 $$log; failed="$$failed $$fn"; fi; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz targets that failed:$$failed (crashers are in their testdata/fuzz)"; exit 1; fi

soak-crashloop: ## the proxy crash loop soak: 2 minutes of the default backoff, 2 of a 2ms one (root)
	$(GO) test -tags soak -count=1 -v -timeout $(SOAK_TIMEOUT) ./test/soak

# The binary is scanned as `make build` makes it but with its symbol table
# (no -s -w): without symbols govulncheck cannot tell which functions the
# binary holds and reports every vulnerability of every module in it.
vuln: ## govulncheck over every package and the nodeinit binary, against golang.org/x/vulndb from the module proxy
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	info=$$(cd "$$tmp" && $(GO) mod download -json golang.org/x/vulndb@$(VULNDB_VERSION)); \
	dir=$$(printf '%s\n' "$$info" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p'); \
	ver=$$(printf '%s\n' "$$info" | sed -n 's/^[[:space:]]*"Version": "\(.*\)",$$/\1/p'); \
	test -d "$$dir/data/osv" || { echo "golang.org/x/vulndb@$$ver holds no data/osv"; exit 1; }; \
	db="file://$$dir/data/osv"; \
	echo "--- vulnerability database: golang.org/x/vulndb@$$ver ($$(ls "$$dir/data/osv" | wc -l) OSV entries)"; \
	echo "--- govulncheck $(GOVULNCHECK_VERSION) ./... (what the code calls)"; \
	$(GO) run golang.org/x/vuln/cmd/govulncheck@$(GOVULNCHECK_VERSION) -db "$$db" ./...; \
	echo "--- govulncheck $(GOVULNCHECK_VERSION) -mode binary nodeinit (what the binary holds)"; \
	$(GO) build -trimpath -o "$$tmp/nodeinit" ./cmd/nodeinit; \
	$(GO) run golang.org/x/vuln/cmd/govulncheck@$(GOVULNCHECK_VERSION) -db "$$db" -mode binary "$$tmp/nodeinit"
