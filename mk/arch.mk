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

# The tests under Debian's qemu-user-static, registered in binfmt_misc (as
# root: apt-get install qemu-user-static binfmt-support, mount binfmt_misc
# at /proc/sys/fs/binfmt_misc if it is not, update-binfmts --enable): the go
# command builds the tests for the emulated architecture and runs them, and
# the binaries they build (nodeinit, the helpers) are that architecture's
# too. What an emulator measures is no architecture's speed: these targets
# check behaviour only, and their times say what CI pays for them.
.PHONY: test-arm64 test-s390x check-binfmt-%

check-binfmt-%:
	@grep -qx enabled /proc/sys/fs/binfmt_misc/qemu-$* 2>/dev/null || \
	  { echo "qemu-$* is not registered in binfmt_misc: see the comment above make test-arm64 in mk/arch.mk"; exit 1; }

# What make test-arm64 leaves out, each for its reason (docs/arch.md):
# - TestIdleConnectionsAreDroppedAndTheExecutorAlwaysConnects (bus): its 4 s
#   Hello timeout is shorter than nine emulated helper processes take to
#   start and connect, so the first are dropped before the last connect.
# - TestProbeReadsWhatIptablesWrote (restrict): reads iptables' tables
#   through getsockopt(IPT_SO_GET_INFO/ENTRIES) and nftables' netlink dump,
#   and under the emulator finds no rules for either (on amd64 it passes);
#   that the emulator does not translate those calls is likely, not shown.
# - the packages test/integration and test/e2e: the PID-1 tests start
#   nodeinit with clone(CLONE_NEWPID|CLONE_NEWNS), which Debian 12's
#   qemu-user (7.2) refuses with EINVAL, and nodeinit as a subreaper calls
#   prctl(PR_SET_CHILD_SUBREAPER), which it also refuses with EINVAL:
#   only the tests that end before either (usage errors, --help) pass.
#   (test/mountcg starts nodeinit through unshare(1), a native program, and
#   its PID-1 tests pass but the three below.)
# - the package mountns, and in test/mountcg
#   TestPrivateMountNamespaceHoldsNodeinitAndItsChildren,
#   TestAMarkerFromOutsideIsNotItsOwnReexec and
#   TestPrivateMountnsReceivesHostMountsAndKeepsItsOwn: a private mount
#   namespace does not come up under the emulator (mountns's helper hangs
#   until the 10-minute test timeout; nodeinit --private-mountns never starts
#   the executor). The cause is not established.
# - TestLaunchedProgramsGetTheDefaultActions (test/testenv): a signal the
#   emulated parent ignores is not ignored in the child it executes (SigIgn
#   lacks HUP and INT); likely because the emulator keeps a handler of its
#   own on the host, which execve resets, but that is not shown.
ARM64_SKIP = ^(TestIdleConnectionsAreDroppedAndTheExecutorAlwaysConnects|TestProbeReadsWhatIptablesWrote|TestPrivateMountNamespaceHoldsNodeinitAndItsChildren|TestAMarkerFromOutsideIsNotItsOwnReexec|TestPrivateMountnsReceivesHostMountsAndKeepsItsOwn|TestLaunchedProgramsGetTheDefaultActions)$$
ARM64_PKGS = $(shell $(GO) list ./... | grep -vE '/(mountns|test/integration|test/e2e)$$')

test-arm64: check-binfmt-aarch64 ## make test's tests built for arm64 and run under qemu-user-static, less the ones mk/arch.mk lists with their reasons (root; binfmt_misc registered)
	@echo "make test-arm64 leaves out, for the reasons in mk/arch.mk: the tests $(ARM64_SKIP) and the packages mountns, test/integration, test/e2e"
	GOARCH=arm64 $(GO) test -count=1 -skip '$(ARM64_SKIP)' $(ARM64_PKGS)

# The big-endian run: the packages that read or write bytes in an order —
# the D-Bus wire format (bus/...), the log pump and the sd_notify datagram
# (logfile, notify), the CRI connection's HTTP/2 frames, /proc parsing
# (internal/procstatus, init/proctree, cgroups), netlink and the xtables
# structures (restrict), the signal set and the stat fields (init/signals,
# internal/linux) — and --version (test/arch).
S390X_PKGS = ./bus/... ./logfile ./notify ./init/supervisor/cri ./internal/procstatus ./init/proctree \
	./cgroups ./restrict ./init/signals ./internal/linux ./test/arch
# Left out on s390x: TestProbeReadsWhatIptablesWrote, as on arm64; and
# TestParseNftReply (restrict), whose hand-made netlink attribute header is
# a little-endian byte literal ({8, 0, type, 0}) where the kernel writes
# host order: the parser reads host order, rightly, and on a big-endian host
# finds a length of 2048. The test, not the code, is little-endian only.
S390X_SKIP = ^(TestProbeReadsWhatIptablesWrote|TestParseNftReply)$$

test-s390x: check-binfmt-s390x ## the tests of the packages that touch byte order, built for s390x (big-endian) and run under qemu-user-static (root; binfmt_misc registered)
	@echo "make test-s390x leaves out, for the reasons in mk/arch.mk: the tests $(S390X_SKIP)"
	GOARCH=s390x $(GO) test -count=1 -skip '$(S390X_SKIP)' $(S390X_PKGS)
