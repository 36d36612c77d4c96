#!/usr/bin/env bash
# Builds promtool (the go.mod `tool` line: github.com/prometheus/prometheus/cmd/promtool, pinned
# in go.mod/go.sum) into build/promtool/bin/promtool, for the chart's alert rules tests. Its own
# module, so Prometheus's dependencies never move the other Go modules' pins. Rebuilds only when
# go.mod, go.sum or this script changes (the key below).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${PROMTOOL_OUT:-$here/../../build/promtool}"
mkdir -p "$out/bin"
out="$(cd "$out" && pwd)"
cd "$here"

# One build at a time per output directory: a second caller (make test's early background
# build, then unit's prerequisite) waits here and then finds the key up to date.
exec 9>"$out/.build.lock"
flock 9
key="$(cat go.mod go.sum build.sh | sha256sum | cut -c1-32)"
if [[ -f "$out/.key" && "$(cat "$out/.key")" == "$key" && -x "$out/bin/promtool" ]]; then
    echo "build/promtool: up to date (key $key)"
    exit 0
fi
export GOFLAGS="${GOFLAGS:--trimpath}"
start=$SECONDS
go build -o "$out/bin/promtool" github.com/prometheus/prometheus/cmd/promtool
echo "$key" > "$out/.key"
echo "build/promtool: built $("$out/bin/promtool" --version 2>&1 | head -1) in $((SECONDS - start)) s into $out/bin"
