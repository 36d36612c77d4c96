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

# One build at a time per output directory: a second caller (make test's early background
# build, then unit's prerequisite) waits here and then finds the key up to date. Not .lock: the
# tests' Python helpers hold that one while they call this script.
exec 9>"$out/.build.lock"
flock 9
sources="$( { cat go.mod go.sum build.sh; find . -name '*.go' -print0 | sort -z | xargs -0 cat; } | sha256sum | cut -c1-32)"
key="$with_tools-$sources"
# A build with the control plane holds everything a build without it does.
if [[ -f "$out/.key" && ( "$(cat "$out/.key")" == "$key" || "$(cat "$out/.key")" == "1-$sources" ) ]]; then
    echo "build/upstream: up to date (key $(cat "$out/.key"))"
    exit 0
fi

export GOFLAGS="${GOFLAGS:--trimpath}"
start=$SECONDS
mapfile -t cmds < <(go list -f '{{if eq .Name "main"}}{{.ImportPath}}{{end}}' ./cmd/... 2>/dev/null | sed '/^$/d')
tools=()
if ((with_tools)); then
    mapfile -t tools < <(awk '/^tool \(/{t=1;next} t&&/^\)/{t=0} t{print $1} /^tool [^(]/{print $2}' go.mod)
fi
# The release's version, as Kubernetes' hack/lib/version.sh stamps it (without that the binaries
# print v0.0.0-master): taken from the k8s.io/kubernetes line of go.mod.
kube="$(awk '$1 == "k8s.io/kubernetes" {print $2; exit}' go.mod)"
major="${kube#v}"; major="${major%%.*}"
minor="${kube#v*.}"; minor="${minor%%.*}"
ldflags=()
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    ldflags+=("-X $pkg.gitVersion=$kube" "-X $pkg.gitMajor=$major" "-X $pkg.gitMinor=$minor"
        "-X $pkg.gitTreeState=clean")
done
echo "build/upstream: building ${#cmds[@]} oracles and ${#tools[@]} control-plane binaries ($(go version | cut -d' ' -f3))"
go build -ldflags "${ldflags[*]}" -o "$out/bin/" "${cmds[@]}" "${tools[@]}"
echo "$key" > "$out/.key"
echo "build/upstream: built in $((SECONDS - start)) s into $out/bin"
