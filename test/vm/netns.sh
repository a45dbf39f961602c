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
# in the namespace's own. The namespace has no way out: the go command finds
# the modules in its cache (make e2e-vm lists them first), and the suite
# fetches Debian's packages for the node images' bases in the network
# namespace the script started in, which it names in NODEINIT_HOST_NETNS (a
# bind mount in the new mount namespace's /run, seen nowhere else).
set -euo pipefail
case "${1:-}" in
--mounts)
  # In a mount namespace of its own, still in the starting network namespace.
  shift
  mount -t tmpfs -o mode=0755 nodeinit-vm-run /run
  mkdir -m 1777 /run/lock
  ln -s /dev/shm /run/shm
  touch /run/nodeinit-host-netns
  mount --bind "/proc/$$/ns/net" /run/nodeinit-host-netns
  export NODEINIT_HOST_NETNS=/run/nodeinit-host-netns
  exec unshare --net "$0" --net "$@"
  ;;
--net)
  shift
  ip link set lo up
  exec "$@"
  ;;
*)
  exec unshare --mount --propagation private "$0" --mounts "$@"
  ;;
esac
