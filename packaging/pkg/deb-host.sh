#!/usr/bin/env bash
# make deb-host: for developers only. dist/kvdev_<version>_all.deb built with this host's own
# dpkg-buildpackage, no root, from a clean copy of the tree in build/pkg/deb-host, then checked
# with this host's lintian (errors fail the build). CI and the e2e do not use it: they build
# with deb.sh (make deb), natively in a Debian 13 chroot.
# On Debian 13 every build dependency is met and the build runs the pure unit tests. Elsewhere
# (Debian 12: setuptools 66, pydantic 1) dpkg-checkbuilddeps fails; the build then goes on with
# -d, setuptools from PyPI on PYTHONPATH and DEB_BUILD_OPTIONS=nocheck, so no build-time tests
# run, and Debian 12's debhelper installs the units under /lib/systemd/system: a package that
# installs on Debian 13, but not the one Debian would build.
set -euo pipefail
# shellcheck source=common.sh source-path=SCRIPTDIR
source "$(dirname "$0")/common.sh"

for tool in dpkg-buildpackage dh pybuild; do
    command -v "$tool" >/dev/null 2>&1 && continue
    echo "deb-host: no $tool: apt-get install debhelper dh-python pybuild-plugin-pyproject python3-all lintian (or, as root: make deb)" >&2
    exit 1
done
changelog_version=$(dpkg-parsechangelog -l "$ROOT/debian/changelog" -S Version)
if [[ $changelog_version != "$VERSION" ]]; then
    echo "debian/changelog says $changelog_version, kvdev.__version__ is $VERSION" >&2
    exit 1
fi

work=$ROOT/build/pkg/deb-host
rm -rf "$work"
copy_tree "$work/kvdev-$VERSION"
mkdir -p "$ROOT/dist"
cd "$work/kvdev-$VERSION"

opts=(-us -uc -b)
if ! PATH=$SYSTEM_PATH dpkg-checkbuilddeps 2>"$work/builddeps.txt"; then
    echo "deb-host: $(cat "$work/builddeps.txt")" >&2
    echo "deb-host: not Debian 13: building without the checks, tests skipped (nocheck)" >&2
    opts+=(-d)
    export DEB_BUILD_OPTIONS="nocheck ${DEB_BUILD_OPTIONS:-}" DEB_BUILD_PROFILES=nocheck
    if ! setuptools_ok; then
        setuptools_shim "$SHIM"
        export PYTHONPATH=$SHIM
    fi
fi
start=$(date +%s%N)
if ! PATH=$SYSTEM_PATH dpkg-buildpackage "${opts[@]}" >"$work/build.log" 2>&1; then
    tail -n 40 "$work/build.log" >&2
    echo "deb-host: dpkg-buildpackage failed; full log: $work/build.log" >&2
    exit 1
fi
echo "deb-host: dpkg-buildpackage took $((($(date +%s%N) - start) / 1000000)) ms" >&2
deb=kvdev_${VERSION}_all.deb
mv "$work/$deb" "$ROOT/dist/$deb"

if command -v lintian >/dev/null 2>&1; then
    PATH=$SYSTEM_PATH lintian --fail-on error --info "$ROOT/dist/$deb"
else
    echo "deb-host: lintian not installed: not checked" >&2
fi
echo "dist/$deb"
