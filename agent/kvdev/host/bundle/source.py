"""Reading the input of ``kvdev-host bundle``: the container-side tree, directly or from CDI specs.

Two ways to get the tree virt-launcher sees at /var/run/kubernetes.io/dra-device-attributes:

* ``read_tree_dir(DIR)``: DIR *is* that tree (e.g. a copy, or the path inside the launcher).
* ``read_cdi_dir(DIR, claim_uids, host_dirs)``: DIR holds CDI specs (``/var/run/cdi``); every
  spec of a ``<driver>/metadata`` kind contributes its mounts whose ``containerPath`` lies under
  that root: the ``hostPath`` file is read and placed at the container path, as the runtime
  would mount it. With ``claim_uids`` only devices named ``<claimUID>_<request>`` of those
  claims count. Only mounts at a metadata file's place are read: a spec cannot pull another
  host file into a bundle that is shared with a VM (and what is read must still be valid
  DeviceMetadata).

The CDI reads are the node relay's too (``relay.finder``), with one set of rules:

* a spec is read beneath its directory and a ``hostPath`` beneath one of the host directories
  (``DEFAULT_HOST_DIRS``, ``--host-dir``) by ``kvdev._confined``: no link followed, no ``..``,
  only a regular file with one link is opened (a device or a FIFO is looked at, never opened);
  anything else is refused, named (``read_spec``, ``read_host_file``);
* a spec is at most ``MAX_SPEC_BYTES``, JSON or YAML (``load_spec``: nesting too deep is an
  error of that spec); a metadata spec has at most ``MAX_DEVICES`` devices and ``MAX_MOUNTS``
  mounts counted after YAML aliases are expanded (``check_counts``): aliases are legitimate
  YAML, so they are counted, not refused;
* a directory is listed through its descriptor, at most ``MAX_LISTED`` names (``spec_names``).

Files under ``--from-tree`` and the other inputs are the caller's own paths (``read_bounded``):
links in them are followed, but only a regular file is ever opened. Owns this I/O only; what
the files mean is ``kvdev.host.bundle.build``'s business.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

import yaml

from kvdev._confined import RefusedError, list_names, place, read_beneath, read_path
from kvdev.errors import Problem, SchemaError, TransientReadError
from kvdev.schema.stream import MAX_STREAM_BYTES
from kvdev.schema.tree import ROOT, Role, role_of

CDI_SUFFIXES = (".json", ".yaml", ".yml")
DEFAULT_HOST_DIRS: Final = ("/var/lib/kubelet/plugins",)  # kubelet's, upstream's plugin data
MAX_SPEC_BYTES: Final = MAX_STREAM_BYTES  # one CDI spec file (other kinds can be large)
MAX_DEVICES: Final = 128  # devices of one metadata spec, YAML aliases expanded (upstream: 1)
MAX_MOUNTS: Final = 256  # mounts of one metadata spec, in all, aliases expanded (upstream: 1)
MAX_LISTED: Final = 65536  # names of one spec directory looked at

_LOADER: Final = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


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


def spec_names(directory: Path) -> tuple[list[str], bool]:
    """The CDI spec files of ``directory`` by name (no hidden ones), and whether it was cut.

    The listing is cut at ``MAX_LISTED`` names.

    Raises:
        OSError: the directory cannot be listed (FileNotFoundError: it is not there).
    """
    names, cut = list_names(directory, MAX_LISTED)
    return sorted(n for n in names if n.endswith(CDI_SUFFIXES) and not n.startswith(".")), cut


def read_spec(directory: Path, name: str) -> bytes:
    """The bytes of the spec ``name`` beneath ``directory``, confined, at most MAX_SPEC_BYTES.

    Raises:
        SchemaError: it breaks a rule of ``kvdev._confined`` or is too large (named).
        TransientReadError: it cannot be read now.
    """
    path = directory / name
    try:
        return read_beneath(directory, name, MAX_SPEC_BYTES)
    except RefusedError as e:
        raise SchemaError([Problem(e.reason, str(path))]) from e
    except OSError as e:
        raise TransientReadError(f"{path}: cannot read: {e.strerror or e}") from e


def load_spec(data: bytes, path: Path) -> object:
    """A spec's document: JSON (upstream writes JSON), else YAML.

    Raises:
        SchemaError: neither, or nested too deeply to parse.
    """
    try:
        return json.loads(data)
    except RecursionError as e:
        raise SchemaError([Problem("nested too deeply to read", str(path))]) from e
    except ValueError:
        pass
    try:
        return yaml.load(data, Loader=_LOADER)  # noqa: S506 - a safe loader
    except yaml.YAMLError as e:
        raise SchemaError([Problem(f"not valid JSON or YAML: {e}", str(path))]) from e
    except RecursionError as e:
        raise SchemaError([Problem("nested too deeply to read", str(path))]) from e


def check_counts(spec: dict[str, Any], path: Path) -> list[dict[str, Any]]:
    """The devices of a metadata spec, once its counts are within bounds.

    Devices and mounts are counted as a reader walks them, YAML aliases expanded (one device
    listed 2,000 times is 2,000 devices); the walk stops at the first bound passed.

    Raises:
        SchemaError: devices is no list of objects, or a bound is passed (named).
    """
    devices = spec.get("devices") or []
    if not isinstance(devices, list):
        raise SchemaError([Problem("devices is not a list", str(path), None, "devices")])
    if len(devices) > MAX_DEVICES:
        message = f"{len(devices)} devices, over {MAX_DEVICES}: not read"
        raise SchemaError([Problem(message, str(path), None, "devices")])
    mounts = len(_mount_list(spec))
    for i, device in enumerate(devices):
        if not isinstance(device, dict):
            problem = Problem("a device is not an object", str(path), None, f"devices[{i}]")
            raise SchemaError([problem])
        mounts += len(_mount_list(device))
        if mounts > MAX_MOUNTS:
            message = f"over {MAX_MOUNTS} mounts in all: not read"
            raise SchemaError([Problem(message, str(path), None, f"devices[{i}]")])
    return devices


def _mount_list(holder: dict[str, Any]) -> list[Any]:
    edits = holder.get("containerEdits") or {}
    mounts = edits.get("mounts") if isinstance(edits, dict) else None
    return mounts if isinstance(mounts, list) else []


def read_host_file(host: str, roots: Sequence[str | os.PathLike[str]], limit: int) -> bytes:
    """The file a mount's ``hostPath`` names, read beneath one of ``roots`` (confined).

    Raises:
        RefusedError: it is not beneath a root, or breaks a rule of ``kvdev._confined``.
        OSError: it cannot be read now.
    """
    placed = place(host, roots)
    if placed is None:
        listed = ", ".join(os.fspath(r) for r in roots) or "none given"
        raise RefusedError(host, f"not beneath a host directory ({listed}); not read")
    root, rel = placed
    return read_beneath(root, rel, limit)


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
    spec: dict[str, Any], devices: list[dict[str, Any]], claim_uids: frozenset[str]
) -> Iterable[tuple[int, object]]:
    """(device index or -1 for the spec's own edits, mount) of the specs' selected devices."""
    if not claim_uids:
        for mount in _mount_list(spec):
            yield -1, mount
    for i, device in enumerate(devices):
        name = str(device.get("name", ""))
        if claim_uids and name.partition("_")[0] not in claim_uids:
            continue
        for mount in _mount_list(device):
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


class HostFiles:
    """The ``hostPath`` files of one read of the specs: each distinct path read at most once.

    Each is read by ``read_host_file`` (at most ``limit`` bytes); its answer (bytes or
    refusal) is kept for the other mounts that name it.
    """

    def __init__(self, roots: Iterable[str | os.PathLike[str]], limit: int) -> None:
        self.roots, self.limit = tuple(roots), limit
        self.bytes_read = 0
        self._done: dict[str, bytes | RefusedError | OSError] = {}

    def read(self, host: str) -> bytes:
        """The file's bytes.

        Raises:
            RefusedError: it breaks a rule (not beneath a root, a link, a device ...).
            OSError: it cannot be read now.
        """
        key = "/".join(p for p in host.split("/") if p not in ("", "."))
        if key not in self._done:
            try:
                data = read_host_file(host, self.roots, self.limit)
                self.bytes_read += len(data)
                self._done[key] = data
            except (RefusedError, OSError) as e:
                self._done[key] = e
        got = self._done[key]
        if isinstance(got, BaseException):
            raise got.with_traceback(None)
        return got


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
            spec = load_spec(read_spec(cdi_dir, name), path)
            if not isinstance(spec, dict) or not str(spec.get("kind", "")).endswith("/metadata"):
                continue
            devices = check_counts(spec, path)
        except SchemaError as e:
            errors.extend(e.problems)
            continue
        _spec_tree(path, _mounts(spec, devices, uids), files, (out, origin, errors))
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
        where = f"devices[{i}].containerEdits.mounts" if i >= 0 else "containerEdits.mounts"
        try:
            placed = mount_place(mount, path, where)
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
