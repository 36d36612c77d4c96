#!/usr/bin/env bash
# make dist (after make deb and make rpm): the rest of what a user installs, into dist/, and
# dist/SHA256SUMS over all of it:
#   kvdev_<v>_all.deb                  make deb (Debian 12 and 13, Ubuntu 24.04 and 26.04)
#   kvdev-<v>-1.noarch.rpm, el9/...    make rpm (Fedora, EL10; EL9)
#   kvdev-<v>-py3-none-any.whl         python3 -m build, from a clean copy of the tree
#   kvdev-<v>.tar.gz                   the sdist, the same way
#   kvdev-<v>.tgz                      the Helm chart (helm package; version and appVersion <v>)
#   kvdev-host_<v>.oci.tar             the kvdev-host image (packaging/container/build-image.sh)
# <v> is kvdev's version (agent/kvdev/__init__.py). The wheel and sdist are reproducible
# (SOURCE_DATE_EPOCH fixed), so the same tree gives the same wheel and the image its cache key.
#
# Owns: build/pkg/dist/ and those files in dist/. Must not touch the working tree elsewhere.
#
# Usage: packaging/pkg/dist.sh   (root, for the image: mmdebstrap, umoci; helm from make helm)
set -euo pipefail
# shellcheck source=common.sh source-path=SCRIPTDIR
source "$(dirname "$0")/common.sh"

HELM=${HELM:-$ROOT/build/helm/bin/helm}
[[ -x $HELM ]] || { echo "dist: no $HELM: run make helm" >&2; exit 1; }
work=$ROOT/build/pkg/dist
dist=$ROOT/dist
rm -rf "$work"
mkdir -p "$work" "$dist"
timings=$work/timings.txt
: >"$timings"
step() {  # step NAME CMD...: run it, record its seconds
    local name=$1 start
    shift
    start=$(date +%s.%N)
    "$@"
    awk -v a="$start" -v b="$(date +%s.%N)" -v n="$name" \
        'BEGIN { printf "%s-seconds=%.1f\n", n, b - a }' >>"$timings"
}

SOURCE_DATE_EPOCH=315532800  # 1980-01-01, the oldest time a zip entry holds
export SOURCE_DATE_EPOCH

# The wheel and the sdist: Debian's python3-build, isolated (setuptools >= 77 from PyPI).
python_dists() {
    copy_tree "$work/src"
    PATH=$SYSTEM_PATH python3 -m build --outdir "$work/py" "$work/src" >"$work/build.log" 2>&1 \
        || { tail -n 30 "$work/build.log" >&2; echo "dist: python3 -m build failed" >&2; exit 1; }
    cp "$work/py/kvdev-$VERSION-py3-none-any.whl" "$work/py/kvdev-$VERSION.tar.gz" "$dist/"
}
step python python_dists

step chart "$HELM" package "$ROOT/packaging/helm/kvdev" --version "$VERSION" \
    --app-version "$VERSION" --destination "$dist" >/dev/null

step image "$ROOT/packaging/container/build-image.sh" "$dist/kvdev-$VERSION-py3-none-any.whl" \
    "$dist/kvdev-host_$VERSION.oci.tar"

artifacts=(
    "kvdev_${VERSION}_all.deb"
    "kvdev-$VERSION-1.noarch.rpm"
    "el9/kvdev-$VERSION-1.noarch.rpm"
    "kvdev-$VERSION-py3-none-any.whl"
    "kvdev-$VERSION.tar.gz"
    "kvdev-$VERSION.tgz"
    "kvdev-host_$VERSION.oci.tar"
)
for a in "${artifacts[@]}"; do
    [[ -f $dist/$a ]] || { echo "dist: $dist/$a is missing (make dist runs make deb and make rpm first)" >&2; exit 1; }
done
(cd "$dist" && sha256sum "${artifacts[@]}" >SHA256SUMS)
cat "$timings" >&2
echo "dist: $dist/SHA256SUMS" >&2
