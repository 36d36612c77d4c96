#!/usr/bin/env bash
# make rpm: dist/kvdev-<version>-1.noarch.rpm from rpm/kvdev.spec, built with rpmbuild from a
# tarball of a clean copy of the tree, then rpmlint with rpm/kvdev.rpmlintrc (errors fail).
# Off Fedora this is a smoke build (the spec's fallbacks; --nodeps, the rpm database is empty):
# it proves the spec parses, builds and lists every file, not that Fedora can install it.
set -euo pipefail
# shellcheck source=common.sh source-path=SCRIPTDIR
source "$(dirname "$0")/common.sh"

command -v rpmbuild >/dev/null 2>&1 || { echo "rpm: no rpmbuild: apt-get install rpm rpmlint" >&2; exit 1; }
spec_version=$(sed -n 's/^Version:[[:space:]]*//p' "$ROOT/rpm/kvdev.spec")
if [[ $spec_version != "$VERSION" ]]; then
    echo "rpm/kvdev.spec says $spec_version, kvdev.__version__ is $VERSION" >&2
    exit 1
fi

work=$ROOT/build/pkg/rpm
rm -rf "$work"
mkdir -p "$work/SOURCES" "$ROOT/dist"
copy_tree "$work/tree/kvdev-$VERSION"
tar -C "$work/tree" -czf "$work/SOURCES/kvdev-$VERSION.tar.gz" "kvdev-$VERSION"

if ! setuptools_ok; then
    setuptools_shim "$SHIM"
    export PYTHONPATH=$SHIM
fi
start=$(date +%s%N)
if ! PATH=$SYSTEM_PATH rpmbuild -bb --nodeps --define "_topdir $work" \
    "$ROOT/rpm/kvdev.spec" >"$work/build.log" 2>&1; then
    tail -n 40 "$work/build.log" >&2
    echo "rpm: rpmbuild failed; full log: $work/build.log" >&2
    exit 1
fi
echo "rpm: rpmbuild took $((($(date +%s%N) - start) / 1000000)) ms" >&2
rpm=$(cd "$work/RPMS/noarch" && ls kvdev-"$VERSION"-*.noarch.rpm)
mv "$work/RPMS/noarch/$rpm" "$ROOT/dist/$rpm"

if command -v rpmlint >/dev/null 2>&1; then
    PATH=$SYSTEM_PATH rpmlint -r "$ROOT/rpm/kvdev.rpmlintrc" "$ROOT/rpm/kvdev.spec" "$ROOT/dist/$rpm"
else
    echo "rpm: rpmlint not installed: not checked" >&2
fi
echo "dist/$rpm"
