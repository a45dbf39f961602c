# The architectures (docs/arch.md). Included by the Makefile, which defines
# GO, BIN and LDFLAGS.

# The platforms make release builds: the four Kubernetes ships kubelet for,
# and 32-bit arm for boards. Each binary is static and stripped, in
# bin/<os>_<arch>[_<variant>]/nodeinit. The go command builds for others too
# (docs/arch.md lists which, and what they are not tested on):
# `make release RELEASE_PLATFORMS=linux/riscv64` takes one.
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64 linux/ppc64le linux/s390x linux/arm/v7


.PHONY: release

release: ## static, stripped nodeinit for each of RELEASE_PLATFORMS, in bin/<os>_<arch>[_<variant>]/ (each about 6 MB; a minute or more per platform with an empty build cache)
	@set -e; for p in $(RELEASE_PLATFORMS); do \
	  os=$${p%%/*}; rest=$${p#*/}; arch=$${rest%%/*}; variant=; \
	  case $$rest in */*) variant=$${rest#*/};; esac; \
	  goarm=; case $$arch/$$variant in arm/v*) goarm=$${variant#v};; arm/) goarm=7;; esac; \
	  out=$(BIN)/$$(echo $$p | tr / _)/nodeinit; \
	  echo "$$p -> $$out"; \
	  GOOS=$$os GOARCH=$$arch GOARM=$$goarm $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $$out ./cmd/nodeinit; \
	done
