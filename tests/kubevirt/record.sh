#!/usr/bin/env bash
# Record what KubeVirt's own code answers for kvdev's VMIs: make record-kubevirt KUBEVIRT=DIR.
#
# DIR is a KubeVirt checkout (with its vendor/). The judge (tests/kubevirt/judge) is built
# inside it, offline, against the checkout's own packages: go build -mod=vendor with -overlay,
# which adds the judge's files to the build without writing into DIR. The version recorded is
# the tag DIR's HEAD carries (vX.Y.Z), else "main"; the recording goes to
# tests/data/kubevirt/<version> (tests/kubevirt/record.py).
set -euo pipefail
KUBEVIRT=${1:?usage: record.sh KUBEVIRT_CHECKOUT}
KUBEVIRT=$(cd "$KUBEVIRT" && pwd)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
JUDGE_SRC=$ROOT/tests/kubevirt/judge
[ -f "$KUBEVIRT/go.mod" ] && [ -d "$KUBEVIRT/vendor" ] || { echo "$KUBEVIRT: not a KubeVirt checkout with vendor/" >&2; exit 2; }
grep -q '^module kubevirt.io/kubevirt$' "$KUBEVIRT/go.mod" || { echo "$KUBEVIRT/go.mod: not kubevirt.io/kubevirt" >&2; exit 2; }

COMMIT=$(git -C "$KUBEVIRT" rev-parse HEAD)
VERSION=$(git -C "$KUBEVIRT" describe --tags --exact-match --match 'v*' HEAD 2>/dev/null || echo main)
case "$VERSION" in *-*) VERSION=main ;; esac   # a pre-release tag is not a release

# virt-api registers SIG-Storage's VMI validator beside SIG-Network's from the version on that has it
TAGS=libvirt_dlopen
grep -q 'storageadmitters.Validate' "$KUBEVIRT/pkg/virt-api/api.go" && TAGS="$TAGS kvstorage"

OUT=$ROOT/build/kubevirt-judge/$VERSION
mkdir -p "$OUT"
PKG=$KUBEVIRT/cmd/kvdev-kubevirt-judge
{
  printf '{"Replace": {\n'
  for f in "$JUDGE_SRC"/*.go; do printf '  "%s": "%s",\n' "$PKG/$(basename "$f")" "$f"; done
  printf '  "%s": "%s"\n}}\n' "$KUBEVIRT/pkg/virt-launcher/virtwrap/zz_kvdev_judge_export.go" "$JUDGE_SRC/overlay/virtwrap_export.go"
} >"$OUT/overlay.json"
echo "building the judge in $KUBEVIRT ($VERSION, $COMMIT) ..." >&2
(cd "$KUBEVIRT" && GOFLAGS=-mod=vendor go build -tags "$TAGS" -overlay "$OUT/overlay.json" -o "$OUT/judge" ./cmd/kvdev-kubevirt-judge)
PY=$ROOT/.venv/bin/python
[ -x "$PY" ] || PY=python3
"$PY" "$ROOT/tests/kubevirt/record.py" "$OUT/judge" "$VERSION" "$COMMIT"
