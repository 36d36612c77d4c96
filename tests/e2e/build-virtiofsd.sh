#!/usr/bin/env bash
# Builds the virtiofs daemon KubeVirt runs (the Rust virtiofsd; its options --sandbox=none and
# --migration-* are not the C daemon's that Debian 12's QEMU ships) from crates.io, pinned to one
# version with its Cargo.lock (--locked), into the e2e's machine-wide cache
# ($KVDEV_E2E_CACHE, default /var/cache/kvdev-e2e, as the guest image: a fresh clone reuses it)
# as virtiofsd-<version>/, and points build/virtiofsd at it. Cached by version. A cold build costs about
# 4 minutes on 2 busy cores (measured 2026-12-02: 4 min 9 s, 440 MB peak RSS); it needs cargo
# and the headers of libcap-ng and libseccomp (.ci/run installs them).
set -euo pipefail
VERSION=1.13.3
here="$(cd "$(dirname "$0")" && pwd)"
root="${KVDEV_E2E_CACHE:-/var/cache/kvdev-e2e}/virtiofsd-$VERSION"
link="$here/../../build/virtiofsd"
mkdir -p "$(dirname "$link")"
if [[ -x "$root/bin/virtiofsd" ]] && "$root/bin/virtiofsd" --version 2>/dev/null | grep -qx "virtiofsd $VERSION"; then
    ln -sfn "$root" "$link"
    echo "build/virtiofsd: virtiofsd $VERSION cached ($root)"
    exit 0
fi
command -v cargo >/dev/null || { echo "build-virtiofsd.sh: cargo is missing (rustup, or apt-get install cargo)" >&2; exit 2; }
start=$SECONDS
cargo install --quiet --locked --version "=$VERSION" --root "$root" virtiofsd
ln -sfn "$root" "$link"
echo "build/virtiofsd: virtiofsd $VERSION built in $((SECONDS - start)) s"
