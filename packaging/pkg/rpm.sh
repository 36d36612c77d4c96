#!/usr/bin/env bash
# make rpm: dist/kvdev-<version>-1.noarch.rpm from rpm/kvdev.spec, built with rpmbuild from a
# tarball of a clean copy of the tree, then rpmlint with rpm/kvdev.rpmlintrc (errors fail).
# Off Fedora this is a smoke build (the spec's fallbacks; --nodeps, the rpm database is empty):
# it proves the spec parses, builds and lists every file, not that Fedora can install it.
# --el9: the spec's EL9 branch (rpmbuild --define 'rhel 9': python3.11, the four bundled
# wheels and sdist, Source1-4, downloaded once by pip into build/pkg/wheels), as
# dist/el9/kvdev-<version>-1.noarch.rpm.
#
# Usage: packaging/pkg/rpm.sh [--el9]
set -euo pipefail
# shellcheck source=common.sh source-path=SCRIPTDIR
source "$(dirname "$0")/common.sh"

command -v rpmbuild >/dev/null 2>&1 || { echo "rpm: no rpmbuild: apt-get install rpm rpmlint" >&2; exit 1; }
spec_version=$(sed -n 's/^Version:[[:space:]]*//p' "$ROOT/rpm/kvdev.spec")
if [[ $spec_version != "$VERSION" ]]; then
    echo "rpm/kvdev.spec says $spec_version, kvdev.__version__ is $VERSION" >&2
    exit 1
fi

el9=0 defines=()
case ${1:-} in
--el9) el9=1 ;;
"") ;;
*) echo "usage: $0 [--el9]" >&2; exit 2 ;;
esac

work=$ROOT/build/pkg/rpm
if ((el9)); then work+=-el9; fi
rm -rf "$work"
mkdir -p "$work/SOURCES" "$ROOT/dist"
copy_tree "$work/tree/kvdev-$VERSION"
tar -C "$work/tree" -czf "$work/SOURCES/kvdev-$VERSION.tar.gz" "kvdev-$VERSION"
if ((el9)); then
    # Source1-4 of the spec's EL9 branch, by the names its URLs end in, fetched once.
    wheels=$ROOT/build/pkg/wheels
    mapfile -t wanted < <(sed -n 's|^Source[1-9]:.*/\([^/]*\)$|\1|p' "$ROOT/rpm/kvdev.spec")
    for whl in "${wanted[@]}"; do
        if [[ ! -f $wheels/$whl ]]; then
            IFS=- read -r name version _ <<<"${whl%.tar.gz}"
            kind=(--only-binary=:all:)
            [[ $whl == *.tar.gz ]] && kind=(--no-binary=:all:)
            "$PIP" download --quiet --disable-pip-version-check --no-deps --no-build-isolation \
                "${kind[@]}" --dest "$wheels" "$name==$version" >&2
        fi
        [[ -f $wheels/$whl ]] || { echo "rpm: pip gave no $whl" >&2; exit 1; }
        cp "$wheels/$whl" "$work/SOURCES/"
    done
    defines=(--define "rhel 9")
fi

if ! setuptools_ok; then
    setuptools_shim "$SHIM"
    export PYTHONPATH=$SHIM
fi
start=$(date +%s%N)
if ! PATH=$SYSTEM_PATH rpmbuild -bb --nodeps --define "_topdir $work" "${defines[@]}" \
    "$ROOT/rpm/kvdev.spec" >"$work/build.log" 2>&1; then
    tail -n 40 "$work/build.log" >&2
    echo "rpm: rpmbuild failed; full log: $work/build.log" >&2
    exit 1
fi
echo "rpm: rpmbuild took $((($(date +%s%N) - start) / 1000000)) ms" >&2
rpm=$(cd "$work/RPMS/noarch" && ls kvdev-"$VERSION"-*.noarch.rpm)
out=dist
if ((el9)); then out=dist/el9; fi
mkdir -p "$ROOT/$out"
mv "$work/RPMS/noarch/$rpm" "$ROOT/$out/$rpm"

if command -v rpmlint >/dev/null 2>&1; then
    rc=$ROOT/rpm/kvdev.rpmlintrc
    if ((el9)); then
        cat "$rc" "$ROOT/rpm/kvdev-el9.rpmlintrc" >"$work/rpmlintrc"
        rc=$work/rpmlintrc
    fi
    PATH=$SYSTEM_PATH rpmlint -r "$rc" "$ROOT/rpm/kvdev.spec" "$ROOT/$out/$rpm"
else
    echo "rpm: rpmlint not installed: not checked" >&2
fi
echo "$out/$rpm"
