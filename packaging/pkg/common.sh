# shellcheck shell=bash disable=SC2034 # sourced: its variables are the sourcing script's
# Shared by deb.sh, deb-host.sh and rpm.sh (sourced, not run): the version, a clean copy of the
# tree, and (for the two host builds) a newer setuptools for hosts whose own is too old for
# pyproject.toml (PEP 639 licence needs setuptools >= 77, which needs packaging >= 24.2;
# Debian 12 has 66 and 23.0).
# Must not touch the working tree outside build/ and dist/.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VERSION=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$ROOT/agent/kvdev/__init__.py")
[[ -n $VERSION ]] || { echo "cannot read __version__ from agent/kvdev/__init__.py" >&2; exit 1; }
PIP=${PIP:-$ROOT/.venv/bin/pip}
SHIM=$ROOT/build/pkg/setuptools  # setuptools_shim's target, kept between builds
# pybuild and rpmbuild's python3 must be the distribution's, never a pyenv shim.
SYSTEM_PATH=/usr/sbin:/usr/bin:/sbin:/bin

# copy_tree DEST: the files git tracks plus untracked ones it does not ignore (so a tree with
# uncommitted work builds what is there); without git, everything but build output.
copy_tree() {
    local dest=$1
    mkdir -p "$dest"
    if git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git -C "$ROOT" ls-files -z --cached --others --exclude-standard \
            | (cd "$ROOT" && tar --null -T - -cf -) | tar -C "$dest" -xf -
    else
        tar -C "$ROOT" --exclude=./.venv --exclude=./build --exclude=./dist --exclude=./.git \
            -cf - . | tar -C "$dest" -xf -
    fi
}

# setuptools_ok: the system python3 can build this pyproject.toml as it is.
setuptools_ok() {
    PATH=$SYSTEM_PATH python3 - <<'PY' 2>/dev/null
import sys
import packaging.version as v, setuptools
sys.exit(0 if v.Version(setuptools.__version__) >= v.Version("77") else 1)
PY
}

# setuptools_shim DIR: setuptools >= 77 and packaging >= 24.2 in DIR (for PYTHONPATH), once.
setuptools_shim() {
    local dir=$1
    [[ -d $dir/setuptools && -d $dir/packaging/licenses ]] && return
    [[ -x $PIP ]] || { echo "no $PIP: run 'make' once (it builds .venv), or set PIP=" >&2; exit 1; }
    "$PIP" install --quiet --disable-pip-version-check --target "$dir" \
        "setuptools>=77,<81" "packaging>=24.2" 2>&1 | grep -v "^WARNING: Location" >&2 || true
    [[ -d $dir/setuptools ]] || { echo "could not install setuptools into $dir" >&2; exit 1; }
}
