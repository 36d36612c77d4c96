#!/usr/bin/env bash
# make test-compat: the guest's netlink, watching, API, agent and schema tests at the versions
# each supported distribution ships (docs/reference/distributions.md), one leg per row:
# tests/packaging/compat/<row>.txt names the row's Python ("python: X.Y") and pins its
# packages; a dependency of pyproject.toml the file does not name is pinned at its floor, unless
# the file says "absent: NAME" (the row has no such package: the agent runs without it).
# Debian 12's leg is also the pyproject floor's (it checks the file's pins are the floors).
# Each leg gets a virtualenv in $KVDEV_COMPAT_CACHE/<row> (default /var/cache/kvdev-compat, machine-wide
# as the e2e image is, so a fresh clone reuses it), rebuilt only when its Python or pins change.
# COMPAT_LEGS="debian12 el9" runs only those. Needs root: the netlink and agent tests run on
# real links in network namespaces (and would otherwise skip, proving nothing), so a non-root
# run outside CI skips the whole target.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
if [[ $(id -u) != 0 ]]; then
    echo "test-compat: needs root (network namespaces)${CI:+; CI runs as root}" >&2
    [[ -z ${CI:-} ]] && { echo "test-compat: skipped" >&2; exit 0; }
    exit 1
fi

tests=(
    tests/adapters/test_netlink.py
    tests/adapters/test_watch.py
    # Not test_files_swap.py: its 200-swap stress hits a race inside watchdog < 7 (an emitter
    # being stopped reads an IN_IGNORED event for a watch it already forgot: KeyError in that
    # dying thread). Harmless to the agent (the thread belongs to the watch being removed) but a
    # traceback; seen once in CI on the floor leg (watchdog 4.0). Runs on the dev venv's 7.x.
    tests/integration/test_agent_netns.py
    tests/unit/test_stream.py
    tests/unit/test_documents.py
    tests/unit/test_schema_regressions.py
    tests/unit/test_fields.py
    tests/unit/test_config.py
    tests/unit/test_agent_metrics.py
    tests/integration/test_agent_metrics_netns.py
    # the local API's HTTP (h11), udev (pyudev), sd_notify, the agent's usage (psutil or not),
    # and the kvdev CLI against a running agent, socket-activated
    tests/adapters/test_server.py
    tests/adapters/test_udev.py
    tests/adapters/test_systemd.py
    tests/adapters/test_procstats.py
    tests/integration/test_cli_agent_api.py
    tests/integration/test_agent_socket_activated.py
)

floor_pins() {  # every "name>=X" of [project].dependencies as "name==X"
    .venv/bin/python - <<'PY'
import re, tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
for dep in deps:
    found = re.match(r"^([A-Za-z0-9_.-]+)\s*>=\s*([^,;\s]+)", dep)
    if not found:
        raise SystemExit(f"pyproject.toml: dependency {dep!r} has no lower bound")
    print(f"{found[1]}=={found[2]}")
PY
}

find_python() {  # find_python X.Y: an interpreter of that version (PATH, then pyenv's)
    local candidate
    for candidate in "python$1" "/usr/bin/python$1" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$1".*/bin/"python$1"; do
        if "$candidate" -c 'pass' >/dev/null 2>&1; then
            echo "$candidate"
            return
        fi
    done
    echo "test-compat: no Python $1 here (set PYTHON${1/./})" >&2
    exit 1
}

leg() {  # leg NAME PYTHON PINS...
    local name=$1 python=$2; shift 2
    local venv=${KVDEV_COMPAT_CACHE:-/var/cache/kvdev-compat}/$name stamp start=$SECONDS
    stamp=$(printf '%s\n' "$("$python" --version)" "$@" | sha256sum | cut -c1-16)
    if [[ ! -f $venv/.stamp-$stamp ]]; then
        rm -rf "$venv"
        "$python" -m venv "$venv"
        "$venv/bin/pip" install --quiet --disable-pip-version-check \
            "setuptools>=77" wheel pytest hypothesis "$@" 2>&1 | grep -v "^WARNING: Location" || true
        touch "$venv/.stamp-$stamp"
    fi
    # The tree itself, editable and without dependencies: the pins above are what it gets.
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --no-build-isolation \
        -e "$root" 2>&1 | grep -v "^WARNING: Location" || true
    echo "== $name: $("$venv/bin/python" --version), $*"
    if ! PATH=$venv/bin:$PATH "$venv/bin/python" -m pytest -q -p no:cacheprovider "${tests[@]}"; then
        failed+=("$name")
    fi
    timings+=("$name $((SECONDS - start)) s")
}

# row_pins FILE: the file's pins, then each pyproject dependency it does not name (nor declares
# absent) at its floor.
row_pins() {
    local file=$1 pin name
    grep -E '^[A-Za-z0-9_.-]+==' "$file"
    for pin in "${floor[@]}"; do
        name=${pin%%==*}
        grep -qiE "^(${name}==|absent: *${name}\$)" "$file" || echo "$pin"
    done
}

mapfile -t floor < <(floor_pins)
# The floors are Debian 12's versions: the oldest row holds pyproject.toml to what it ships.
for pin in "${floor[@]}"; do
    if grep -qi "^${pin%%==*}==" tests/packaging/compat/debian12.txt \
        && ! grep -qix "$pin" tests/packaging/compat/debian12.txt; then
        echo "test-compat: pyproject.toml's floor $pin is not Debian 12's version" \
            "($(grep -i "^${pin%%==*}==" tests/packaging/compat/debian12.txt))" >&2
        exit 1
    fi
done

timings=() failed=()
for file in tests/packaging/compat/*.txt; do
    name=$(basename "$file" .txt)
    if [[ -n ${COMPAT_LEGS:-} && " $COMPAT_LEGS " != *" $name "* ]]; then
        continue
    fi
    version=$(sed -n 's/^python: *//p' "$file")
    [[ -n $version ]] || { echo "test-compat: $file names no python: X.Y" >&2; exit 1; }
    var=PYTHON${version/./}
    mapfile -t pins < <(row_pins "$file")
    leg "$name" "${!var:-$(find_python "$version")}" "${pins[@]}"
done
printf 'test-compat: %s\n' "${timings[@]}"
if ((${#failed[@]})); then
    echo "test-compat: failed: ${failed[*]}" >&2
    exit 1
fi
