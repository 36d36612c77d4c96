#!/usr/bin/env bash
# Builds one Go tool from its own pinned module (a directory under tests/ with go.mod, go.sum and
# the go.mod `tool` line) into build/NAME/bin/NAME: its own module, so the tool's dependencies
# never move another module's pins. Rebuilds only when go.mod, go.sum or this script changes.
# Usage: tests/gotool.sh NAME PACKAGE [OUT]   (tests/helm/build.sh, tests/promtool/build.sh)
set -euo pipefail
name="$1" package="$2"
here="$(cd "$(dirname "$0")" && pwd)"
out="${3:-$here/../build/$name}"
mkdir -p "$out/bin"
out="$(cd "$out" && pwd)"
cd "$here/$name"

# One build at a time per output directory: a second caller (make test's early background
# build, then unit's prerequisite) waits here and then finds the key up to date. Not .lock: the
# tests' Python helpers hold that one while they call the build.
exec 9>"$out/.build.lock"
flock 9
key="$(cat go.mod go.sum "$here/gotool.sh" | sha256sum | cut -c1-32)"
if [[ -f "$out/.key" && "$(cat "$out/.key")" == "$key" && -x "$out/bin/$name" ]]; then
    echo "build/$name: up to date (key $key)"
    exit 0
fi
export GOFLAGS="${GOFLAGS:--trimpath}"
start=$SECONDS
go build -o "$out/bin/$name" "$package"
echo "$key" > "$out/.key"
said="$("$out/bin/$name" version --short 2>/dev/null || "$out/bin/$name" --version 2>&1 | head -1)"
echo "build/$name: built $said in $((SECONDS - start)) s into $out/bin"
