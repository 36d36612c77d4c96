#!/usr/bin/env bash
# Builds helm (the go.mod `tool` line: helm.sh/helm/v3/cmd/helm, pinned in go.mod/go.sum) into
# build/helm/bin/helm. Its own module, so helm's dependencies never move tests/upstream's
# Kubernetes pins. Rebuilds only when go.mod, go.sum or this script changes (the key below).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${HELM_OUT:-$here/../../build/helm}"
mkdir -p "$out/bin"
out="$(cd "$out" && pwd)"
cd "$here"

# One build at a time per output directory: a second caller (make test's early background
# build, then unit's prerequisite) waits here and then finds the key up to date. Not .lock: the
# tests' Python helpers hold that one while they call this script.
exec 9>"$out/.build.lock"
flock 9
key="$(cat go.mod go.sum build.sh | sha256sum | cut -c1-32)"
if [[ -f "$out/.key" && "$(cat "$out/.key")" == "$key" && -x "$out/bin/helm" ]]; then
    echo "build/helm: up to date (key $key)"
    exit 0
fi
export GOFLAGS="${GOFLAGS:--trimpath}"
start=$SECONDS
go build -o "$out/bin/helm" helm.sh/helm/v3/cmd/helm
echo "$key" > "$out/.key"
echo "build/helm: built $("$out/bin/helm" version --short) in $((SECONDS - start)) s into $out/bin"
