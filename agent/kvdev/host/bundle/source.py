"""Reading the input of ``kvdev-host bundle``: the container-side tree, directly or from CDI specs.

The tree virt-launcher sees at /var/run/kubernetes.io/dra-device-attributes is read either as a
directory (``read_tree_dir``: the caller's own path, links followed, only regular files opened)
or rebuilt from the ``<driver>/metadata`` CDI specs of a directory (``read_cdi_dir``: each
mount at a metadata file's place, its ``hostPath`` read and placed as the runtime would mount
it, with the CDI package's rules and confined reads, ``kvdev.host.cdi``). What the files mean
is ``kvdev.host.bundle.build``'s business.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from kvdev._confined import RefusedError, read_path
from kvdev.errors import Problem, SchemaError, TransientReadError
from kvdev.host.cdi.ondisk import DEFAULT_HOST_DIRS, MAX_LISTED, HostFiles, read_spec, spec_names
from kvdev.host.cdi.spec import (
    check_counts,
    load_spec,
    metadata_driver,
    mount_field,
    mount_place,
    selected_mounts,
)
from kvdev.schema.stream import MAX_STREAM_BYTES
from kvdev.schema.tree import ROOT, Role, role_of


def read_bounded(path: Path, limit: int = MAX_STREAM_BYTES) -> bytes:
    """A regular file's bytes, at most ``limit``; a FIFO or device is looked at, never opened.

    Raises:
        TransientReadError: it cannot be opened or read.
        SchemaError: it is not a regular file, or larger than ``limit``.
    """
    try:
        return read_path(path, limit)
    except RefusedError as e:
        raise SchemaError([Problem(e.reason, str(path))]) from e
    except OSError as e:
        raise TransientReadError(f"{path}: cannot read: {e.strerror or e}") from e


def read_tree_dir(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by relative path; only metadata files are read (others: b"").

    Raises:
        SchemaError: ``root`` is not a directory, a link leaves it, or a file is too large.
        TransientReadError: a file or directory cannot be read.
    """
    if not root.is_dir():
        raise SchemaError([Problem("not a directory", str(root))])
    real_root = root.resolve()
    out: dict[str, bytes] = {}

    def failed(e: OSError) -> None:
        raise TransientReadError(f"{e.filename}: cannot list: {e.strerror or e}") from e

    for here, dirnames, filenames in os.walk(root, onerror=failed):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(here) / name
            rel = path.relative_to(root).as_posix()
            if role_of(rel) is not Role.DEVICE_METADATA:
                out[rel] = b""
                continue
            if not path.resolve().is_relative_to(real_root):
                msg = "symbolic link points outside the tree; not read"
                raise SchemaError([Problem(msg, str(path))])
            out[rel] = read_bounded(path)
    return out


def read_cdi_dir(
    cdi_dir: Path,
    claim_uids: Iterable[str] = (),
    host_dirs: Sequence[str | os.PathLike[str]] = DEFAULT_HOST_DIRS,
) -> dict[str, bytes]:
    """The container-side tree rebuilt from the metadata CDI specs in ``cdi_dir``.

    The files are read beneath ``host_dirs`` (the module's rules).

    Raises:
        SchemaError: a spec is not JSON/YAML or over a bound, a mount lacks a path, a file
            breaks a rule, or two mounts claim one container path with different content (the
            spec and field are named).
        TransientReadError: the directory, a spec or a mounted file cannot be read.
    """
    uids = frozenset(claim_uids)
    if not cdi_dir.is_dir():
        raise SchemaError([Problem("not a directory", str(cdi_dir))])
    try:
        names, cut = spec_names(cdi_dir)
    except OSError as e:
        raise TransientReadError(f"{cdi_dir}: cannot list: {e.strerror or e}") from e
    if cut:
        raise SchemaError([Problem(f"more than {MAX_LISTED} entries; not read", str(cdi_dir))])
    files = HostFiles(host_dirs, MAX_STREAM_BYTES)
    out: dict[str, bytes] = {}
    origin: dict[str, str] = {}
    errors: list[Problem] = []
    for name in names:
        path = cdi_dir / name
        try:
            spec = load_spec(read_spec(cdi_dir, name), str(path))
            if not isinstance(spec, dict) or metadata_driver(spec) is None:
                continue
            devices = check_counts(spec, str(path))
        except SchemaError as e:
            errors.extend(e.problems)
            continue
        _spec_tree(path, selected_mounts(spec, devices, uids), files, (out, origin, errors))
    if errors:
        raise SchemaError(errors)
    return out


def _spec_tree(
    path: Path,
    mounts: Iterable[tuple[int, object]],
    files: HostFiles,
    into: tuple[dict[str, bytes], dict[str, str], list[Problem]],
) -> None:
    """One spec's mounts placed ``into`` the tree (bytes, their spec, the problems)."""
    out, origin, errors = into
    for i, mount in mounts:
        where = mount_field(i)
        try:
            placed = mount_place(mount, str(path), where)
        except SchemaError as e:
            errors.extend(e.problems)
            continue
        if placed is None:
            continue
        rel, host = placed
        try:
            data = files.read(host)
        except RefusedError as e:
            errors.append(Problem(f"hostPath {host}: {e.reason}", str(path), None, where))
            continue
        except OSError as e:
            raise TransientReadError(f"{host}: cannot read: {e.strerror or e}") from e
        if rel in out and out[rel] != data:
            msg = f"{ROOT}/{rel} is also mounted by {origin[rel]}, with other content"
            errors.append(Problem(msg, str(path), None, where))
            continue
        out[rel], origin[rel] = data, str(path)


def read_file(path: Path, limit: int = MAX_STREAM_BYTES * 2) -> bytes:
    """A whole input file (domain XML, guest plan), bounded (``read_bounded``).

    Raises:
        TransientReadError: it cannot be read.
        SchemaError: it is not a regular file, or larger than ``limit``.
    """
    return read_bounded(path, limit)
