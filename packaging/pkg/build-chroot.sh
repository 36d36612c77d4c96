#!/usr/bin/env bash
# Build (or reuse) the Debian 13 (trixie) build chroot that deb.sh (make deb) builds the .deb in.
#
# Owns: a buildd-style root tree (mmdebstrap --variant=buildd: Essential, apt, build-essential)
# with the package's build dependencies (debian/control's Build-Depends, <!nocheck> ones
# included, resolved by trixie's apt-get build-dep) and lintian preinstalled, plus the
# unprivileged user "builder" (uid/gid 1000, home /build) that the build and lintian run as.
# kvdev is not in it. Must not touch anything outside its cache.
#
# Cached under $KVDEV_DEB_CACHE (default /var/cache/kvdev-deb) in chroot-<hash>/, the hash being
# one of this script and of the Build-Depends field: a changed recipe builds a new chroot, an
# unchanged one is reused. Published atomically (built in a temporary directory, renamed, then
# marked .complete); older chroots of the cache are removed. It holds trixie as it was on the
# day it was built: --force rebuilds it from the mirror.
# Prints the chroot directory (root/, packages.txt, build-seconds) as its last line.
#
# Usage: packaging/pkg/build-chroot.sh [--force]      (root; needs mmdebstrap)
#        packaging/pkg/build-chroot.sh --key          the chroot directory it would use, only
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
control=$here/../../debian/control
cache=${KVDEV_DEB_CACHE:-/var/cache/kvdev-deb}
mirror=${KVDEV_DEB_MIRROR:-http://deb.debian.org/debian}
suite=trixie

force=0 key_only=0
case ${1:-} in
--force) force=1 ;;
--key) key_only=1 ;;
"") ;;
*) echo "usage: $0 [--force | --key]" >&2; exit 2 ;;
esac
[[ -f $control ]] || { echo "$0: no $control" >&2; exit 2; }

# build_depends: the source paragraph's Build-Depends* fields, continuation lines included.
build_depends() {
    awk '/^$/ { exit } /^Build-Depends/ { on = 1; print; next } on && /^[ \t]/ { print; next } { on = 0 }' \
        "$control"
}
[[ -n $(build_depends) ]] || { echo "$0: $control has no Build-Depends" >&2; exit 2; }

key=$( { cat "$here/build-chroot.sh"; build_depends; } | sha256sum | cut -c1-16)
out=$cache/chroot-$key
if [[ $key_only == 1 ]]; then
    echo "$out"
    exit 0
fi

if [[ $(id -u) != 0 ]]; then
    echo "$0: must run as root (mmdebstrap root mode, chroot)" >&2
    exit 2
fi
command -v mmdebstrap >/dev/null || { echo "$0: mmdebstrap is not installed (apt-get install mmdebstrap)" >&2; exit 2; }
if [[ $force == 0 && -f $out/.complete ]]; then
    echo "deb chroot: cached ($out)" >&2
    echo "$out"
    exit 0
fi

mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"  # apt's sandbox user _apt downloads into root/var/lib/apt/lists below it
mkdir -p "$tmp/bdeps/debian"
{ echo "Source: kvdev-build-deps"; build_depends; printf '\nPackage: kvdev-build-deps\nArchitecture: all\n'; } \
    >"$tmp/bdeps/debian/control"
start=$(date +%s.%N)

# builder: like a buildd's sbuild user, not root; Rules-Requires-Root: no says it needs none.
# Written straight into the databases: the buildd variant has no useradd (passwd is not
# Essential).
# shellcheck disable=SC2016 # $1 is expanded by mmdebstrap's hook shell, not here
add_builder='echo "builder:x:1000:1000:kvdev package builder:/build:/bin/sh" >>"$1/etc/passwd"
echo "builder:x:1000:" >>"$1/etc/group"
echo "builder:!:20000::::::" >>"$1/etc/shadow"
install -d -o 1000 -g 1000 "$1/build"'
# shellcheck disable=SC2016 # $1 is expanded by mmdebstrap's hook shell, not here
mmdebstrap --variant=buildd --format=directory \
    --include=lintian \
    --customize-hook="copy-in '$tmp/bdeps' /tmp" \
    --customize-hook='chroot "$1" env DEBIAN_FRONTEND=noninteractive apt-get build-dep -y -qq -o Dpkg::Use-Pty=0 --no-install-recommends /tmp/bdeps' \
    --customize-hook='rm -rf "$1/tmp/bdeps"' \
    --customize-hook="$add_builder" \
    "$suite" "$tmp/root" "$mirror" >&2

dpkg-query --admindir="$tmp/root/var/lib/dpkg" -W -f='${Package} ${Version}\n' >"$tmp/packages.txt"
end=$(date +%s.%N)
awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f\n", b - a }' >"$tmp/build-seconds"
rm -rf "$tmp/bdeps"

# Publish atomically, then drop older chroots of this cache (one machine keeps one).
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
touch "$out/.complete"
for old in "$cache"/chroot-*; do
    [[ $old == "$out" ]] || rm -rf "$old"
done
echo "deb chroot: built in $(cat "$out/build-seconds") s ($out)" >&2
echo "$out"
