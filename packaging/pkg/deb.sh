#!/usr/bin/env bash
# make deb: dist/kvdev_<version>_all.deb built the way Debian builds it: dpkg-buildpackage -us -uc
# (source and binary) inside a Debian 13 (trixie) chroot (build-chroot.sh: buildd variant, the
# build dependencies preinstalled, cached by recipe hash), as the unprivileged user "builder",
# without network, with the build-time tests (debian/rules override_dh_auto_test), then trixie's
# lintian --pedantic on the .changes (source and binary). Any lintian finding fails the build;
# the few overrides in debian/ each say why.
#
# Owns: build/pkg/deb/ (the artifacts, build.log, lintian.txt, timings.txt) and
# dist/kvdev_<version>_all.deb. Must not touch the working tree outside build/ and dist/ or the
# cached chroot (each build writes into an overlay of it, thrown away afterwards).
#
# Every build runs in private mount, pid and network namespaces (unshare): the overlay, /proc
# and /dev/shm vanish with them, also when the build is interrupted, and the build has only a
# loopback interface, like a buildd's.
#
# The developer fallback without root or mmdebstrap (a Debian 12 host build, no tests) is
# deb-host.sh (make deb-host).
#
# Usage: packaging/pkg/deb.sh      (root; needs mmdebstrap, unshare, ip)
set -euo pipefail
# shellcheck source=common.sh source-path=SCRIPTDIR
source "$(dirname "$0")/common.sh"

BUILDER=1000  # uid and gid of "builder" in the chroot (build-chroot.sh)

# inside CHROOT WORK: the build itself, run by the outer half in fresh namespaces.
inside() {
    local chroot=$1 work=$2
    local merged=$work/root
    if ! mount -t overlay overlay \
        -o "lowerdir=$chroot/root,upperdir=$work/upper,workdir=$work/overlay-work" "$merged" \
        2>/dev/null; then
        echo "deb: overlayfs unavailable here: building in a copy of the chroot" >&2
        cp -a "$chroot/root/." "$merged/"
        cp -a "$work/upper/build/." "$merged/build/"
    fi
    mount -t proc proc "$merged/proc"
    mkdir -p "$merged/dev/shm"
    mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$merged/dev/shm"
    ip link set lo up
    as_builder() {
        # CI=...: the tests' conftest replays fixed Hypothesis examples in CI, here as well
        chroot --userspec="$BUILDER:$BUILDER" "$merged" /usr/bin/env -i HOME=/build USER=builder \
            LOGNAME=builder PATH=/usr/bin:/bin LANG=C.UTF-8 ${CI:+"CI=$CI"} "$@"
    }
    local start
    start=$(date +%s.%N)
    if ! as_builder sh -c "cd /build/kvdev-$VERSION && dpkg-buildpackage -us -uc" \
        >"$work/build.log" 2>&1; then
        tail -n 40 "$work/build.log" >&2
        echo "deb: dpkg-buildpackage failed in the trixie chroot; full log: $work/build.log" >&2
        exit 1
    fi
    elapsed "$start" build-seconds
    start=$(date +%s.%N)
    local rc=0
    # Shown: overrides (O:, each after its reason) and the tags lintian's own screens mask (M:).
    # The verdict is ours, not --fail-on's: trixie's lintian counts a masked hint towards
    # --fail-on info as if it were reported (Lintian::Pool), so a screened false positive
    # (python/egg/metadata) would fail every build.
    as_builder sh -c 'lintian --pedantic --display-info --display-experimental --show-overrides \
        --tag-display-limit 0 --fail-on none /build/*.changes' >"$work/lintian.txt" 2>&1 || rc=$?
    elapsed "$start" lintian-seconds
    # shellcheck disable=SC2016 # dpkg-query's format, for the chroot's shell
    as_builder sh -c 'lintian --version; dpkg-query -W -f="\${Package} \${Version}\n" \
        debhelper dh-python lintian python3 dpkg-dev' >"$work/versions.txt"
    if ((rc)); then
        cat "$work/lintian.txt" >&2
        echo "deb: lintian failed (exit $rc)" >&2
        exit 1
    fi
    # Any error, warning, info, pedantic or experimental tag that no override covers fails.
    if grep -E '^[EWIPX]: ' "$work/lintian.txt" >&2; then
        echo "deb: lintian --pedantic (trixie's) found the above: fix them in debian/" >&2
        exit 1
    fi
    mv "$merged"/build/kvdev_"$VERSION"* "$work/"
}

elapsed() {  # elapsed START NAME: seconds since START, appended to timings.txt as NAME=...
    awk -v a="$1" -v b="$(date +%s.%N)" -v n="$2" 'BEGIN { printf "%s=%.1f\n", n, b - a }' \
        >>"$work/timings.txt"
}

if [[ ${1:-} == --inside ]]; then
    work=$3
    inside "$2" "$3"
    exit 0
fi

if [[ $(id -u) != 0 ]]; then
    echo "deb: must run as root (mmdebstrap, an overlay mount, chroot); without root: make deb-host" >&2
    exit 2
fi
for tool in mmdebstrap unshare chroot ip; do
    command -v "$tool" >/dev/null 2>&1 && continue
    echo "deb: no $tool here (apt-get install mmdebstrap util-linux coreutils iproute2); without it: make deb-host" >&2
    exit 2
done
changelog_version=$(sed -n '1s/^[^ ]* (\([^)]*\)).*/\1/p' "$ROOT/debian/changelog")
if [[ $changelog_version != "$VERSION" ]]; then
    echo "deb: debian/changelog says '$changelog_version', kvdev.__version__ is $VERSION" >&2
    exit 1
fi

chroot_start=$(date +%s.%N)
chroot=$("$ROOT/packaging/pkg/build-chroot.sh" | tail -n 1)
[[ -f $chroot/.complete ]] || { echo "deb: build-chroot.sh gave no complete chroot ($chroot)" >&2; exit 1; }

work=$ROOT/build/pkg/deb
rm -rf "$work"
mkdir -p "$work/upper/build" "$work/overlay-work" "$work/root" "$ROOT/dist"
elapsed "$chroot_start" chroot-seconds
copy_tree "$work/upper/build/kvdev-$VERSION"
chown -R "$BUILDER:$BUILDER" "$work/upper/build"

unshare --mount --propagation private --pid --net --fork --kill-child \
    "$ROOT/packaging/pkg/deb.sh" --inside "$chroot" "$work"

# The results are in $work (inside moved them there); the overlay's layers (or the copy) go.
deb=kvdev_${VERSION}_all.deb
rm -rf "$work/upper" "$work/overlay-work" "$work/root"
[[ -f $work/$deb ]] || { echo "deb: the build made no $deb (see $work/build.log)" >&2; exit 1; }
cp "$work/$deb" "$ROOT/dist/$deb"

passed=$(sed -n 's/^\([0-9][0-9]*\) passed.*/\1/p' "$work/build.log" | tail -n 1)
echo "build-tests-passed=${passed:-0}" >>"$work/timings.txt"
echo "deb: build chroot $chroot (made in $(cat "$chroot/build-seconds") s); $(tr '\n' ' ' <"$work/timings.txt")" >&2
echo "deb: lintian --pedantic: no findings; $(grep -c '^O: ' "$work/lintian.txt" || true) overridden, $(grep -c '^M: ' "$work/lintian.txt" || true) masked by lintian's screens" >&2
echo "dist/$deb"
