#!/usr/bin/env bash
# Make one e2e run's root disk: the cached base guest (build-image.sh) + a kvdev .deb installed
# with dpkg, as a user would, + optional extra files (e.g. /etc/kvdev/agent.toml).
#
# Owns: that one disk image. Must not change the cached base: the .deb goes into an overlay
# (or, where overlayfs cannot be mounted, a copy) in a private mount namespace, and the result
# is written with mkfs.ext4 -d into OUT.
#
# Usage: packaging/vm/make-run-image.sh IMAGE_DIR DEB OUT_IMG [EXTRA_DIR]      (root)
# Prints the installed package's name and version, as dpkg has it, on its last line.
set -euo pipefail

if [[ $# -lt 3 || $# -gt 4 ]]; then
    echo "usage: $0 IMAGE_DIR DEB OUT_IMG [EXTRA_DIR]" >&2
    exit 2
fi
base=$1/rootfs deb=$2 out=$3 extra=${4:-}
[[ -d $base ]] || { echo "$0: $base: no base image root (run build-image.sh)" >&2; exit 2; }
[[ -f $deb ]] || { echo "$0: $deb: no such .deb" >&2; exit 2; }
[[ -z $extra || -d $extra ]] || { echo "$0: $extra: no such directory" >&2; exit 2; }
deb=$(realpath "$deb")
pkg=$(dpkg-deb --field "$deb" Package)

if [[ ${KVDEV_E2E_IN_NS:-} != 1 ]]; then
    # Everything mounted below disappears with the namespace, also on failure.
    exec env KVDEV_E2E_IN_NS=1 unshare --mount --propagation private "$0" "$@"
fi

work=$(mktemp -d "$(dirname "$(realpath -m "$out")")/.rootfs-XXXXXX")
trap 'umount -R "$work/root" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/upper" "$work/work" "$work/root"
if ! mount -t overlay overlay \
    -o "lowerdir=$base,upperdir=$work/upper,workdir=$work/work" "$work/root" 2>/dev/null; then
    echo "make-run-image: overlayfs unavailable, copying the base root" >&2
    cp -a "$base/." "$work/root/"
fi

mount -t proc proc "$work/root/proc"
mount --bind /dev "$work/root/dev"
cp "$deb" "$work/root/tmp/"
if ! chroot "$work/root" dpkg -i "/tmp/$(basename "$deb")" >"$work/dpkg.log" 2>&1; then
    cat "$work/dpkg.log" >&2
    echo "make-run-image: dpkg -i $(basename "$deb") failed in the guest root" >&2
    exit 1
fi
# shellcheck disable=SC2016 # dpkg-query's format, not shell expansions
status=$(chroot "$work/root" dpkg-query -W -f='${Status}' "$pkg")
if [[ $status != "install ok installed" ]]; then
    cat "$work/dpkg.log" >&2
    echo "make-run-image: $pkg is '$status' after dpkg -i, not 'install ok installed'" >&2
    exit 1
fi
rm -f "$work/root/tmp/$(basename "$deb")"
umount "$work/root/dev" "$work/root/proc"
if [[ -n $extra ]]; then
    cp -a "$extra/." "$work/root/"
fi

rm -f "$out"
truncate -s 2G "$out"
mkfs.ext4 -q -F -L kvdev-e2e -E root_owner=0:0 -d "$work/root" "$out"
# shellcheck disable=SC2016
chroot "$work/root" dpkg-query -W -f='${Package} ${Version}\n' "$pkg"
