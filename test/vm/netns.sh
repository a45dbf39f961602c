#!/usr/bin/env bash
# Runs a command in a network and mount namespace of its own, with its
# loopback up and a /run of its own: make e2e-vm runs the VM suite so, beside
# make e2e-k8s on the same machine.
#
#   test/vm/netns.sh COMMAND [ARG...]
#
# The suite's control plane then listens on the namespace's loopback, where
# qemu's user network takes the guest's connections, not on the host's,
# where make e2e-k8s's listens; the podman it builds the node images with
# programs the namespace's rules and links; and what that podman and its
# network stack leave in /run (network namespaces, the iptables lock) stays
# in the namespace's own. The namespace has no way out: the go command
# finds the modules in its cache (make e2e-vm lists them first), and the
# suite fetches Debian's packages for the node images' bases from PID 1's
# network namespace (nsenter).
set -euo pipefail
if [[ "${1:-}" != --inside ]]; then
  exec unshare --net --mount --propagation private "$0" --inside "$@"
fi
shift
ip link set lo up
mount -t tmpfs -o mode=0755 nodeinit-vm-run /run
mkdir -m 1777 /run/lock
ln -s /dev/shm /run/shm
exec "$@"
