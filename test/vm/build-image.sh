#!/usr/bin/env bash
# Builds the guest of the VM suite: a Debian bookworm systemd host (cgroup v2
# only, containerd with the systemd cgroup driver, podman, Docker, sshd) made from
# Debian's packages alone with mmdebstrap, as an ext4 disk image made with
# mke2fs -d (no loop device, no mount), with the guest's kernel and initrd
# beside it and an ssh key made for this image. Cached outside the work tree,
# keyed on the package list, this script and the guest's files; a cached
# image is reused. Prints the image's directory on the last line:
#
#   DIR/disk.img       the root file system (raw ext4, sparse)
#   DIR/vmlinuz        the guest's kernel
#   DIR/initrd.img     its initrd
#   DIR/id_ed25519     the key root logs in with (loopback ssh only)
#
#   test/vm/build-image.sh [--cached] [CACHE_ROOT]
#
# With --cached it builds nothing: it prints the directory of a complete
# image, or fails with exit code 3 when there is none.
set -euo pipefail
cached_only=
if [[ "${1:-}" == --cached ]]; then
  cached_only=1
  shift
fi
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

packages="$(grep -v '^#' packages | grep -v '^$' | paste -sd, -)"
key="$(
  {
    cat packages build-image.sh
    find guest -type f | LC_ALL=C sort | while read -r f; do
      printf '%s\n' "$f"
      cat "$f"
    done
  } | sha256sum | cut -c1-12
)"
root="${1:-${NODEINIT_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nodeinit/vm}}"
out="$root/bookworm-$key"

if [[ -f "$out/.complete" ]]; then
  echo "$out"
  exit 0
fi
if [[ -n "$cached_only" ]]; then
  echo "build-image.sh: the VM image is not built ($out is missing or incomplete): make vm-image builds it" >&2
  exit 3
fi
for tool in mmdebstrap mke2fs ssh-keygen; do
  command -v "$tool" >/dev/null || { echo "build-image.sh: $tool is missing (apt-get install mmdebstrap e2fsprogs openssh-client)" >&2; exit 1; }
done

rm -rf "$out"
mkdir -p "$out"
rootfs="$out/rootfs"
trap 'rm -rf "$rootfs"' EXIT
start=$SECONDS
echo "mmdebstrap bookworm: $packages" >&2
mmdebstrap --quiet --variant=minbase --include="$packages" bookworm "$rootfs"
echo "mmdebstrap: $((SECONDS - start)) s" >&2

# The guest's configuration, over what the packages installed: every file
# 0644, whatever the checkout's umask made of it (the key hashes names and
# contents only).
(cd guest && find . -type f) | while read -r f; do
  install -D -m 0644 "guest/$f" "$rootfs/$f"
done
# systemd-networkd brings the network up (DHCP on en*), with
# network-online.target waiting for it; the socat forward to the API server
# starts at boot. Timers that would compete for the slow guest's CPU go.
systemctl --root="$rootfs" enable systemd-networkd.service systemd-networkd-wait-online.service apiserver-forward.service ssh.service containerd.service >/dev/null
# Docker's engine starts when a test asks for it (systemctl start docker),
# not at every boot of the slow guest.
systemctl --root="$rootfs" disable docker.service docker.socket >/dev/null
systemctl --root="$rootfs" mask apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer >/dev/null 2>&1 || true
# No swap: the guest has no swap partition or file; mask the target so
# nothing turns one on.
systemctl --root="$rootfs" mask swap.target >/dev/null
mkdir -p "$rootfs/mnt/share"

ssh-keygen -q -t ed25519 -N '' -C nodeinit-vm -f "$out/id_ed25519"
install -d -m 0700 "$rootfs/root/.ssh"
install -m 0600 "$out/id_ed25519.pub" "$rootfs/root/.ssh/authorized_keys"

# The kernel and initrd the packages installed, booted with qemu -kernel:
# its /lib/modules are in the image (overlay, br_netfilter, 9p).
cp "$(ls "$rootfs"/boot/vmlinuz-* | sort -V | tail -1)" "$out/vmlinuz"
cp "$(ls "$rootfs"/boot/initrd.img-* | sort -V | tail -1)" "$out/initrd.img"

mke2fs -q -t ext4 -L nodeinit-vm -d "$rootfs" -F "$out/disk.img" 8G
rm -rf "$rootfs"
printf '%s\n' "$packages" > "$out/PACKAGES"
touch "$out/.complete"
echo "image built in $((SECONDS - start)) s: $(du -sh --apparent-size "$out/disk.img" | cut -f1) apparent, $(du -sh "$out/disk.img" | cut -f1) on disk" >&2
echo "$out"
