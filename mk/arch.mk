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

# The tests under Debian's qemu-user-static, registered in binfmt_misc
# (make binfmt, as root, after apt-get install qemu-user-static
# binfmt-support): the go command builds the tests for the emulated
# architecture and the kernel runs them through the emulator, and the
# binaries they build (nodeinit, the helpers) are that architecture's too.
# The PID-1 tests start nodeinit through unshare(1), a native program, as
# PID 1 of a new pid namespace (test/testenv: the emulator refuses
# CLONE_NEWPID). What an emulator measures is no architecture's speed: these
# targets check behaviour only, and their times say what CI pays for them.
#
# What does not pass under the emulator is listed, with the reason, in
# test/arch/emulated/known.txt, which the runner (test/arch/emulated) holds
# every outcome to: a test not on it that fails or skips, or one on it that
# passes, fails the run.
EMULATED ?= $(GO) run ./test/arch/emulated
EMULATED_ARCHES = aarch64 s390x

.PHONY: binfmt test-arm64 test-s390x test-emulated check-binfmt-%

binfmt: ## register qemu-user-static's arm64 and s390x emulators in binfmt_misc, mounting it if need be (root; Debian's qemu-user-static and binfmt-support)
	@mountpoint -q /proc/sys/fs/binfmt_misc || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
	@for a in $(EMULATED_ARCHES); do \
	  grep -qx enabled /proc/sys/fs/binfmt_misc/qemu-$$a 2>/dev/null || update-binfmts --enable qemu-$$a; \
	  grep -qx enabled /proc/sys/fs/binfmt_misc/qemu-$$a && echo "qemu-$$a: $$(sed -n 's/^interpreter //p' /proc/sys/fs/binfmt_misc/qemu-$$a)"; \
	done

check-binfmt-%:
	@grep -qx enabled /proc/sys/fs/binfmt_misc/qemu-$* 2>/dev/null || \
	  { echo "qemu-$* is not registered in binfmt_misc: make binfmt (root), after apt-get install qemu-user-static binfmt-support"; exit 1; }

test-arm64: check-binfmt-aarch64 ## every test of make test built for arm64 and run under qemu-user-static, held to test/arch/emulated/known.txt (root)
	$(EMULATED) -goarch arm64 -timeout 30m ./...

# The big-endian run: the packages that read or write bytes in an order —
# the D-Bus wire format (bus/...), the log pump and the sd_notify datagram
# (logfile, notify), the CRI connection's HTTP/2 frames, /proc parsing
# (internal/procstatus, init/proctree, cgroups), netlink and the xtables
# structures (restrict), the signal set and the stat fields (init/signals,
# internal/linux) — and --version (test/arch); then the PID-1 tests of the
# same: the bus with dbus-daemon (the node's own and the host's logind), the
# log files, exit codes and signals. The PID-1 tests of sd_notify and of log
# rotation run nodeinit as a subreaper only, which the emulator does not
# allow (known.txt): the notify and logfile packages carry those on s390x.
S390X_PKGS = ./bus/... ./logfile ./notify ./init/supervisor/cri ./internal/procstatus ./init/proctree \
	./cgroups ./restrict ./init/signals ./internal/linux ./test/arch
S390X_PID1 = ^(TestTheNodeDrainsBeforeTheExecutorGetsTerm|TestTheHostsShutdownDrainsTheNode|TestAConnectFloodFromOutsideCostsTheExecutorNoCall|TestDescriptorsSentToNodeinitOnTheHostsBusAreClosed|TestAFullLogDiskBlocksNeitherReapingNorSignals|TestExitCodeOfTheExecutorIsNodeinits|TestDeathBySignalGives128PlusSignal)$$

test-s390x: check-binfmt-s390x ## the tests that touch byte order, built for s390x (big-endian) and run under qemu-user-static, held to test/arch/emulated/known.txt (root)
	$(EMULATED) -goarch s390x $(S390X_PKGS)
	$(EMULATED) -goarch s390x -run '$(S390X_PID1)' ./test/integration

# What CI runs under the emulator (.ci/run), a few minutes: the big-endian
# run, and on arm64 the PID-1 tests of reaping, signals, exit codes, the
# mount namespace, the log files and the bus. make test-arm64's other tests
# (the unit tests, and PID-1 tests that take minutes under the emulator)
# are left to a run by hand: docs/arch.md has their times.
ARM64_CI_PID1 = ^(TestDemoRunsAndStopsGracefullyOnInt|TestExitCodeOfTheExecutorIsNodeinits|TestDeathBySignalGives128PlusSignal|TestEveryCatchableSignalReachesTheExecutor|TestTermAndIntReachExecutorThenProxy|TestPID1MountsTheIdentityBeforeMakingRootShared|TestAFullLogDiskBlocksNeitherReapingNorSignals|TestTheNodeDrainsBeforeTheExecutorGetsTerm)$$

.PHONY: test-emulated-ci
test-emulated-ci: check-binfmt-aarch64 check-binfmt-s390x ## CI's emulated runs: make test-s390x, and arm64's PID-1 tests of reaping, signals, exit codes, the mount namespace, log files and the bus (root)
	$(EMULATED) -goarch s390x $(S390X_PKGS)
	$(EMULATED) -goarch s390x -run '$(S390X_PID1)' ./test/integration
	$(EMULATED) -goarch arm64 -run '$(ARM64_CI_PID1)' ./test/integration

# The multi-platform image index's test (mk/image.mk): make image-index in a
# private podman store, then the arm64 image's nodeinit under the emulator.
.PHONY: test-image-index lint-arch

test-image-index: check-binfmt-aarch64 ## make image-index, checked: an OCI index of amd64 and arm64, whose arm64 nodeinit runs make demo's scenario under qemu-user (root, podman, runc)
	$(GO) test -tags image -count=1 -v -run '^TestTheImageIndexsArm64NodeinitRunsTheDemo$$' ./test/arch

# The test carries the build tag image, which lint's go vet ./... does not
# see: this vets it, as part of lint.
lint: lint-arch
lint-arch:
	$(GO) vet -tags image ./test/arch
	$(STATICCHECK) -tags image ./test/arch
