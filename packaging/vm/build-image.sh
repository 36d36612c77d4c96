#!/usr/bin/env bash
# Build (or reuse) a Debian guest image for the end-to-end tests (tests/e2e): trixie (Debian 13,
# every boot but one) or bookworm (Debian 12, the oldest supported row's boot).
#
# Owns: the base guest: kernel, initrd and a root tree with systemd, udev, iproute2, the
# Debian python3-* packages the agent needs, and its neighbours (NetworkManager, cloud-init;
# systemd-networkd is systemd's), installed but not enabled -- but NOT kvdev itself, which make-run-image.sh
# installs from the freshly built .deb for every run. Must not touch anything outside its cache.
#
# Cached under $KVDEV_E2E_CACHE (default /var/cache/kvdev-e2e) in image-<suite>-<hash>/, the hash
# being one of this directory's files and the suite: a changed recipe builds a new image, an
# unchanged one is reused; each suite keeps its own newest image.
# Prints the image directory (vmlinuz, initrd.img, rootfs/) as its last line.
#
# Usage: packaging/vm/build-image.sh [--suite trixie|bookworm] [--force]   (root; needs mmdebstrap)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${KVDEV_E2E_CACHE:-/var/cache/kvdev-e2e}
mirror=${KVDEV_E2E_MIRROR:-http://deb.debian.org/debian}
suite=${KVDEV_E2E_SUITE:-trixie}

force=0
while (($#)); do
    case $1 in
    --force) force=1 ;;
    --suite) suite=${2:-}; shift ;;
    *) echo "usage: $0 [--suite trixie|bookworm] [--force]" >&2; exit 2 ;;
    esac
    shift
done
case $suite in
trixie | bookworm) ;;
*) echo "$0: suite '$suite': only trixie (Debian 13) and bookworm (Debian 12) are e2e guests" >&2; exit 2 ;;
esac

if [[ $(id -u) != 0 ]]; then
    echo "$0: must run as root (mmdebstrap root mode, device nodes, chroot)" >&2
    exit 2
fi
command -v mmdebstrap >/dev/null || { echo "$0: mmdebstrap is not installed" >&2; exit 2; }

# The key: the recipe (this script, trim.sh, the files copied into the image), by content.
key=$( { echo "$suite"; cd "$here" && find build-image.sh trim.sh rootfs -type f -print0 \
    | LC_ALL=C sort -z | xargs -0 sha256sum; } | sha256sum | cut -c1-16)
out=$cache/image-$suite-$key
if [[ $force == 0 && -f $out/.complete ]]; then
    echo "vm image: cached ($out)" >&2
    echo "$out"
    exit 0
fi

mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s.%N)

packages=(
    linux-image-amd64 initramfs-tools kmod
    systemd systemd-sysv udev iproute2
    python3 python3-pyudev python3-watchdog python3-psutil
    python3-h11 python3-prometheus-client python3-systemd
    # The neighbours the agent must live with (tests/e2e/test_vm_neighbours.py): installed in
    # every image but started only where a boot enables them (trim.sh disables them).
    network-manager dbus cloud-init
    # What KubeVirt reads out of a guest (status.interfaces[]): started by its udev rule when
    # the VM has the org.qemu.guest_agent.0 channel (tests/e2e/test_vm_kubevirt.py).
    qemu-guest-agent
)

# MODULES=list keeps the initrd small (11 MB instead of 37 MB): it must set up virtio-blk + ext4
# only; everything else loads after the switch to the real root.
# shellcheck disable=SC2016 # $1 is expanded by mmdebstrap's hook shell, not here
mmdebstrap --variant=minbase --format=directory \
    --include="$(IFS=,; echo "${packages[*]}")" \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --setup-hook='mkdir -p "$1/etc/initramfs-tools/conf.d" "$1/usr/share/initramfs-tools/modules.d"' \
    --setup-hook='echo MODULES=list > "$1/etc/initramfs-tools/conf.d/kvdev-e2e.conf"' \
    --setup-hook='printf "%s\n" virtio_pci virtio_blk ext4 > "$1/usr/share/initramfs-tools/modules.d/kvdev-e2e"' \
    --customize-hook="cp -a '$here/rootfs/.' \"\$1/\"" \
    --customize-hook="'$here/trim.sh' \"\$1\"" \
    "$suite" "$tmp/rootfs" "$mirror" >&2

cp "$tmp"/rootfs/boot/vmlinuz-* "$tmp/vmlinuz"
cp "$tmp"/rootfs/boot/initrd.img-* "$tmp/initrd.img"
dpkg-query --admindir="$tmp/rootfs/var/lib/dpkg" -W \
    -f='${Package} ${Version}\n' >"$tmp/packages.txt"
end=$(date +%s.%N)
awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f\n", b - a }' >"$tmp/build-seconds"

# Publish atomically, then drop older images of this suite (one machine keeps one per suite),
# and trixie images named before there were two suites (image-<hash>).
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
touch "$out/.complete"
for old in "$cache"/image-"$suite"-* "$cache"/image-????????????????; do
    if [[ -e $old && $old != "$out" ]]; then rm -rf "$old"; fi
done
echo "vm image: built in $(cat "$out/build-seconds") s ($out)" >&2
echo "$out"
