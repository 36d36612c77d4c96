#!/bin/sh
# loaded.sh WORKERS COMMAND...: run COMMAND while WORKERS stress-ng CPU workers compete with it
# for the cores (make test-loaded; make unit with LOADED=1, which .ci/run sets), and stop them
# when COMMAND ends; exits with COMMAND's status. No test may depend on how fast the machine
# is (issue 23 §6): this is how the suite proves it, at the cost of no extra run.
set -eu
workers=$1
shift
if ! command -v stress-ng >/dev/null 2>&1; then
    echo "loaded.sh: stress-ng is not installed (Debian: apt-get install stress-ng)" >&2
    exit 2
fi
stress-ng --cpu "$workers" --quiet >/dev/null 2>&1 &
load=$!
trap 'kill "$load" 2>/dev/null || true; wait "$load" 2>/dev/null || true' EXIT
trap 'exit 130' INT TERM
echo "loaded.sh: $workers stress-ng CPU workers (pid $load) compete with: $*" >&2
"$@"
