#!/usr/bin/env bash
# The kvdev-host container image, built without a registry: a Debian 13 (trixie) root file
# system from Debian's packages (mmdebstrap: python3, python3-venv, ca-certificates), kvdev's
# wheel with the host extra installed into a virtualenv in it (/opt/kvdev; its dependencies are
# PyPI's wheels for trixie's Python 3.13, downloaded on this host by pip and installed in the
# chroot without network), a non-root user kvdev (65532:65532, the chart's controller user),
# written as an OCI image layout by umoci and archived as one tar (an "oci-archive": podman load,
# skopeo copy oci-archive:..., ctr images import read it).
#
# The image: entrypoint kvdev-host (cmd --help), user 65532:65532, labels
# org.opencontainers.image.version (kvdev's version) and .source; the layout's tag is the
# version, so it is the chart's default image, kvdev-host:<version>.
#
# Two layers, each cached by what it depends on under $KVDEV_DIST_CACHE (default
# /var/cache/kvdev-dist, machine-wide like the e2e's /var/cache/kvdev-e2e), so a fresh clone (CI)
# rebuilds nothing it need not:
#   base-<key>.tar       Debian's packages, the virtualenv with the host extra's dependencies,
#                        the user: keyed by this recipe and the wheel's Requires-Dist lines
#   image-<key>.oci.tar  the whole image: keyed by the base's key and the wheel's bytes; its top
#                        layer is the wheel alone, installed into /opt/kvdev by Python's
#                        installer (python3-installer) without running anything in the image
# Owns: the cache directory's base-* and image-* entries and OUT. Touches nothing else.
#
# Usage: packaging/container/build-image.sh WHEEL OUT [--force]   (root; mmdebstrap, umoci;
#        PIP= the pip that downloads the dependencies, default python3 -m pip)
set -euo pipefail

[[ $# -ge 2 ]] || { echo "usage: $0 WHEEL OUT [--force]" >&2; exit 2; }
wheel=$(realpath "$1")
out=$2
force=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
cache=${KVDEV_DIST_CACHE:-/var/cache/kvdev-dist}
mirror=${KVDEV_DIST_MIRROR:-http://deb.debian.org/debian}
source_url=https://github.com/kvdev/kvdev
uid=65532
read -r -a pip <<<"${PIP:-python3 -m pip}"

[[ -f $wheel ]] || { echo "$0: no wheel at $wheel" >&2; exit 2; }
version=$(basename "$wheel" | sed -n 's/^kvdev-\([^-]*\)-.*\.whl$/\1/p')
[[ -n $version ]] || { echo "$0: cannot read the version from the wheel's name $wheel" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "$0: must run as root (mmdebstrap root mode, chroot)" >&2; exit 2; }
for tool in mmdebstrap umoci; do
    command -v "$tool" >/dev/null || { echo "$0: $tool is not installed (apt-get install $tool)" >&2; exit 2; }
done

# The wheel's dependencies, as its METADATA states them: what the base layer depends on.
requires=$(python3 -c 'import sys, zipfile; sys.stdout.write(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]).decode())' \
    "$wheel" "kvdev-$version.dist-info/METADATA" | grep '^Requires-Dist:' | LC_ALL=C sort)
[[ -n $requires ]] || { echo "$0: $wheel states no Requires-Dist" >&2; exit 2; }
base_key=$( { sha256sum <"$here/build-image.sh"; echo "$requires"; echo "$mirror"; } \
    | sha256sum | cut -c1-16)
key=$( { echo "$base_key"; sha256sum <"$wheel"; } | sha256sum | cut -c1-16)
base=$cache/base-$base_key.tar
cached=$cache/image-$key.oci.tar
mkdir -p "$(dirname "$out")"
if [[ -f $cached && $force != --force ]]; then
    echo "image: cached ($cached)" >&2
    cp "$cached" "$out"
    exit 0
fi

mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
whl=$(basename "$wheel")
start=$(date +%s)

# The base layer: trixie's python3, a virtualenv /opt/kvdev holding the dependencies of the
# wheel's host extra (PyPI's binary wheels for trixie's Python 3.13, downloaded here by pip,
# installed in the chroot with a clean environment and no index), the user. The wheel is
# installed to resolve them and uninstalled again; pip goes too: the image installs nothing.
build_base() {
    mkdir "$tmp/wheels"
    cp "$wheel" "$tmp/wheels/"
    "${pip[@]}" download --quiet --disable-pip-version-check --dest "$tmp/wheels" \
        --only-binary=:all: --python-version 3.13 --implementation cp \
        --abi cp313 --abi abi3 --abi none --platform manylinux_2_28_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
        "$tmp/wheels/$whl[host]" >&2
    local in_root='chroot "$1" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8'
    # shellcheck disable=SC2016 # $1 is expanded by mmdebstrap's hook shell, not here
    mmdebstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
        --customize-hook="cp -r '$tmp/wheels' \"\$1/tmp/kvdev-wheels\"" \
        --customize-hook="$in_root python3 -m venv /opt/kvdev" \
        --customize-hook="$in_root /opt/kvdev/bin/pip install --quiet --no-cache-dir --no-index \
            --disable-pip-version-check --find-links /tmp/kvdev-wheels '/tmp/kvdev-wheels/$whl[host]'" \
        --customize-hook="$in_root /opt/kvdev/bin/pip uninstall --quiet --yes kvdev pip" \
        --customize-hook='rm -rf "$1/tmp/kvdev-wheels"; test -d "$1/opt/kvdev/lib/python3.13/site-packages"' \
        --customize-hook="$in_root groupadd --system --gid $uid kvdev" \
        --customize-hook="$in_root useradd --system --uid $uid --gid $uid --no-create-home \
            --home-dir /nonexistent --shell /usr/sbin/nologin kvdev" \
        trixie "$tmp/base.tar" "$mirror" >&2
    rm -rf "$tmp/wheels"
    # published under its key; this build keeps its own link, whatever another build removes
    ln "$tmp/base.tar" "$tmp/base.publish"
    mv "$tmp/base.publish" "$base"
    for old in "$cache"/base-*.tar; do
        [[ $old == "$base" ]] || rm -f "$old"
    done
}
if [[ -f $base && $force != --force ]] && ln "$base" "$tmp/base.tar" 2>/dev/null; then
    echo "image: base layer cached ($base)" >&2
else
    build_base
fi

# The top layer: the wheel, installed as pip would into /opt/kvdev (its scripts run
# /opt/kvdev/bin/python3), and kvdev-host on the default PATH.
mkdir -p "$tmp/top/usr/local/bin"
PATH=/usr/sbin:/usr/bin:/sbin:/bin python3 - "$wheel" "$tmp/top" <<'PY'
import sys

from installer import install
from installer.destinations import SchemeDictionaryDestination
from installer.sources import WheelFile

wheel, root = sys.argv[1:]
site = "/opt/kvdev/lib/python3.13/site-packages"
scheme = {"purelib": site, "platlib": site, "headers": "/opt/kvdev/include",
          "scripts": "/opt/kvdev/bin", "data": "/opt/kvdev"}
destination = SchemeDictionaryDestination(
    scheme, interpreter="/opt/kvdev/bin/python3", script_kind="posix", destdir=root)
with WheelFile.open(wheel) as source:
    install(source, destination, additional_metadata={"INSTALLER": b"kvdev build-image.sh\n"})
PY
ln -s /opt/kvdev/bin/kvdev-host "$tmp/top/usr/local/bin/kvdev-host"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@315532800 -C "$tmp/top" \
    -cf "$tmp/top.tar" opt usr

layout=$tmp/layout
umoci init --layout "$layout"
umoci new --image "$layout:$version"
umoci raw add-layer --image "$layout:$version" \
    --history.created_by "mmdebstrap trixie, the dependencies" "$tmp/base.tar"
umoci raw add-layer --image "$layout:$version" --history.created_by "$whl" "$tmp/top.tar"
umoci config --image "$layout:$version" --os linux --architecture amd64 \
    --config.entrypoint kvdev-host --config.cmd --help --config.user "$uid:$uid" \
    --config.workingdir / \
    --config.env PATH=/opt/kvdev/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.label "org.opencontainers.image.version=$version" \
    --config.label "org.opencontainers.image.source=$source_url" \
    --config.label org.opencontainers.image.title=kvdev-host \
    --manifest.annotation "org.opencontainers.image.version=$version" \
    --manifest.annotation "org.opencontainers.image.source=$source_url" \
    --history.created_by "kvdev-host $version: entrypoint, user, labels"
umoci gc --layout "$layout"
tar --sort=name --owner=0 --group=0 --numeric-owner -C "$layout" -cf "$tmp/image.oci.tar" .
cp "$tmp/image.oci.tar" "$out"
mv "$tmp/image.oci.tar" "$cached"
# one image per key is kept: an older recipe's or wheel's goes
for old in "$cache"/image-*.oci.tar; do
    [[ $old == "$cached" ]] || rm -f "$old"
done
echo "image: built in $(($(date +%s) - start)) s ($cached)" >&2
