#!/usr/bin/env bash
# Builds the upstream judges into build/upstream/bin: our small programs under cmd/ (each wraps
# upstream Go packages at the release kvdev targets, pinned in go.mod/go.sum) and the control
# plane's binaries named by go.mod's `tool` lines. Rebuilds only when go.mod, go.sum, a Go source
# here or this script changes (the key below); Go's own build cache makes a rebuild after a
# source edit cost only the packages that changed. The control plane's binaries (go.mod's `tool`
# lines: about 12 minutes of a cold 2-core build) are built only with --cluster.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${UPSTREAM_OUT:-$here/../../build/upstream}"
mkdir -p "$out/bin"
out="$(cd "$out" && pwd)"
cd "$here"

with_tools=0
[[ "${1:-}" == "--cluster" ]] && with_tools=1

key="$with_tools-$( { cat go.mod go.sum build.sh; find . -name '*.go' -print0 | sort -z | xargs -0 cat; } | sha256sum | cut -c1-32)"
if [[ -f "$out/.key" && "$(cat "$out/.key")" == "$key" ]]; then
    echo "build/upstream: up to date (key $key)"
    exit 0
fi

export GOFLAGS="${GOFLAGS:--trimpath}"
start=$SECONDS
mapfile -t cmds < <(go list -f '{{if eq .Name "main"}}{{.ImportPath}}{{end}}' ./cmd/... 2>/dev/null | sed '/^$/d')
tools=()
if ((with_tools)); then
    mapfile -t tools < <(awk '/^tool \(/{t=1;next} t&&/^\)/{t=0} t{print $1} /^tool [^(]/{print $2}' go.mod)
fi
echo "build/upstream: building ${#cmds[@]} oracles and ${#tools[@]} control-plane binaries ($(go version | cut -d' ' -f3))"
go build -o "$out/bin/" "${cmds[@]}" "${tools[@]}"
echo "$key" > "$out/.key"
echo "build/upstream: built in $((SECONDS - start)) s into $out/bin"
