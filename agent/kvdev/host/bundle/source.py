"""Reading the input of ``kvdev-host bundle``: the container-side tree, directly or from CDI specs.

Two ways to get the tree virt-launcher sees at /var/run/kubernetes.io/dra-device-attributes:

* ``read_tree_dir(DIR)``: DIR *is* that tree (e.g. a copy, or the path inside the launcher).
* ``read_cdi_dir(DIR, claim_uids)``: DIR holds CDI specs (``/var/run/cdi``); every spec of a
  ``<driver>/metadata`` kind contributes its mounts whose ``containerPath`` lies under that root:
  the ``hostPath`` file is read and placed at the container path, as the runtime would mount
  it. With ``claim_uids`` only devices named ``<claimUID>_<request>`` of those claims count.
  Only mounts at a metadata file's place are read: a spec cannot pull another host file into a
  bundle that is shared with a VM (and what is read must still be valid DeviceMetadata).

Reads are bounded (``MAX_STREAM_BYTES`` per file) and never follow a link out of DIR (for a
tree). Owns this I/O only; what the files mean is ``kvdev.host.bundle.build``'s business.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from kvdev.errors import Problem, SchemaError, TransientReadError
from kvdev.schema.stream import MAX_STREAM_BYTES
from kvdev.schema.tree import ROOT, Role, role_of

CDI_SUFFIXES = (".json", ".yaml", ".yml")


def read_bounded(path: Path, limit: int = MAX_STREAM_BYTES) -> bytes:
    """A regular file's bytes, at most ``limit``; a FIFO or device is refused, never waited on.

    Raises:
        TransientReadError: it cannot be opened or read.
        SchemaError: it is not a regular file, or larger than ``limit``.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise TransientReadError(f"{path}: cannot read: {e.strerror or e}") from e
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SchemaError([Problem("not a regular file; not read", str(path))])
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise TransientReadError(f"{path}: cannot read: {e.strerror or e}") from e
    finally:
        os.close(fd)
    if len(data) > limit:
        raise SchemaError([Problem(f"larger than {limit} bytes", str(path))])
    return data


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


def _mounts(
    spec: dict[str, Any], claim_uids: frozenset[str]
) -> Iterable[tuple[int, dict[str, Any]]]:
    """(device index or -1 for the spec's own edits, mount) of the specs' selected devices."""
    if not claim_uids:
        edits = spec.get("containerEdits") or {}
        for mount in edits.get("mounts") or []:
            yield -1, mount
    for i, device in enumerate(spec.get("devices") or []):
        name = str(device.get("name", ""))
        if claim_uids and name.partition("_")[0] not in claim_uids:
            continue
        for mount in (device.get("containerEdits") or {}).get("mounts") or []:
            yield i, mount


def mount_place(mount: object, spec: Path, where: str) -> tuple[str, str] | None:
    """(relative path in the tree, hostPath) of one mount; None when it is no metadata file.

    Raises:
        SchemaError: the mount lacks a path, or its containerPath leaves the tree.
    """
    container = mount.get("containerPath") if isinstance(mount, dict) else None
    host = mount.get("hostPath") if isinstance(mount, dict) else None
    if not isinstance(container, str) or not isinstance(host, str):
        problem = Problem("a mount without hostPath and containerPath", str(spec), None, where)
        raise SchemaError([problem])
    if not container.startswith(ROOT + "/"):
        return None
    rel = os.path.normpath(container[len(ROOT) + 1 :])
    if rel.startswith(".."):
        msg = f"containerPath {container!r} leaves {ROOT}"
        raise SchemaError([Problem(msg, str(spec), None, where)])
    if role_of(rel) is not Role.DEVICE_METADATA:
        return None  # only metadata files are ever read into a bundle
    return rel, host


def _place(mount: object, spec: Path, where: str) -> tuple[str, bytes] | None:
    """(relative path in the tree, content) of one mount; None when it is outside the tree."""
    placed = mount_place(mount, spec, where)
    if placed is None:
        return None
    rel, host = placed
    return rel, read_bounded(Path(host))


def read_cdi_dir(cdi_dir: Path, claim_uids: Iterable[str] = ()) -> dict[str, bytes]:
    """The container-side tree rebuilt from the metadata CDI specs in ``cdi_dir``.

    Raises:
        SchemaError: a spec is not JSON/YAML, a mount lacks a path, or two mounts claim one
            container path with different content (the spec and field are named).
        TransientReadError: a spec or a mounted file cannot be read.
    """
    uids = frozenset(claim_uids)
    if not cdi_dir.is_dir():
        raise SchemaError([Problem("not a directory", str(cdi_dir))])
    out: dict[str, bytes] = {}
    origin: dict[str, str] = {}
    errors: list[Problem] = []
    for path in sorted(p for p in cdi_dir.iterdir() if p.suffix in CDI_SUFFIXES):
        try:
            spec = yaml.safe_load(read_bounded(path))
        except yaml.YAMLError as e:
            errors.append(Problem(f"not valid JSON or YAML: {e}", str(path)))
            continue
        if not isinstance(spec, dict) or not str(spec.get("kind", "")).endswith("/metadata"):
            continue
        for i, mount in _mounts(spec, uids):
            where = f"devices[{i}].containerEdits.mounts" if i >= 0 else "containerEdits.mounts"
            try:
                placed = _place(mount, path, where)
            except SchemaError as e:
                errors.extend(e.problems)
                continue
            if placed is None:
                continue
            rel, data = placed
            if rel in out and out[rel] != data:
                msg = f"{ROOT}/{rel} is also mounted by {origin[rel]}, with other content"
                errors.append(Problem(msg, str(path), None, where))
                continue
            out[rel], origin[rel] = data, str(path)
    if errors:
        raise SchemaError(errors)
    return out


def read_file(path: Path, limit: int = MAX_STREAM_BYTES * 2) -> bytes:
    """A whole input file (domain XML, guest plan), bounded.

    Raises:
        TransientReadError: it cannot be read.
        SchemaError: it is larger than ``limit``.
    """
    try:
        with path.open("rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise TransientReadError(f"{path}: cannot read: {e.strerror or e}") from e
    if len(data) > limit:
        raise SchemaError([Problem(f"larger than {limit} bytes", str(path))])
    return data
