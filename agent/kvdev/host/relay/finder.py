"""Every KEP-5304 metadata file on this node, found through the drivers' CDI specs (I/O).

A driver that writes metadata (upstream's ``kubeletplugin`` with ``EnableDeviceMetadata``)
writes, per claim and request, a CDI spec of kind ``<driver>/metadata`` into a CDI spec
directory (``/etc/cdi``, ``/var/run/cdi``) whose device ``<claimUID>_<request>`` bind-mounts
the file at ``/var/run/kubernetes.io/dra-device-attributes/.../<driver>-metadata.json``. The
finder reads those specs and, for each such mount, the ``hostPath`` file (the placement rule is
``bundle.source.mount_place``, the one ``kvdev-host bundle --from-cdi`` uses).

Bounded and isolated: at most ``MAX_SPECS`` specs per directory (by name), each spec and file
read with ``read_bounded`` (a size limit; a FIFO or device refused, never waited on), and a
spec that is bad in any way (not YAML, a mount that leaves the tree, a file of another driver
or another request than its device says, a file too large) is skipped with a problem naming
it and its field: it never keeps another spec's files from being found.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

import yaml

from kvdev.errors import KvdevError, Problem, SchemaError
from kvdev.host.bundle.source import CDI_SUFFIXES, mount_place, read_bounded
from kvdev.host.publish.relayed import RECORD_BYTES_MAX, DriverFile
from kvdev.schema.stream import MAX_STREAM_BYTES
from kvdev.schema.tree import metadata_location

DEFAULT_CDI_DIRS: Final = ("/etc/cdi", "/var/run/cdi")
MAX_SPECS: Final = 4096  # per directory: a node's claims times requests, with room
KIND_SUFFIX: Final = "/metadata"


def _spec_names(directory: Path) -> tuple[list[str], list[Problem]]:
    try:
        names = sorted(
            e.name
            for e in os.scandir(directory)
            if e.name.endswith(CDI_SUFFIXES) and not e.name.startswith(".")
        )
    except FileNotFoundError:
        return [], []  # a CDI directory that is not there holds no spec
    except OSError as e:
        return [], [Problem(f"cannot list: {e.strerror or e}", str(directory))]
    if len(names) > MAX_SPECS:
        message = f"{len(names)} spec files, only the first {MAX_SPECS} by name are read"
        return names[:MAX_SPECS], [Problem(message, str(directory))]
    return names, []


def _device_files(spec: dict[str, Any], path: Path, driver: str) -> list[DriverFile]:
    """The files of one ``<driver>/metadata`` spec.

    Raises:
        SchemaError, TransientReadError: the spec breaks a rule (the first is named).
    """
    out = []
    devices = spec.get("devices") or []
    if not isinstance(devices, list):
        raise SchemaError([Problem("devices is not a list", str(path), None, "devices")])
    for i, device in enumerate(devices):
        where = f"devices[{i}]"
        if not isinstance(device, dict):
            raise SchemaError([Problem("a device is not an object", str(path), None, where)])
        uid, sep, request = str(device.get("name", "")).partition("_")
        if not sep or not uid or not request:
            message = f"device name {device.get('name')!r} is not <claimUID>_<request>"
            raise SchemaError([Problem(message, str(path), None, f"{where}.name")])
        edits = device.get("containerEdits") or {}
        mounts = edits.get("mounts") if isinstance(edits, dict) else None
        for j, mount in enumerate(mounts or []):
            at = f"{where}.containerEdits.mounts[{j}]"
            placed = mount_place(mount, path, at)
            if placed is None:
                continue
            rel, host = placed
            location = metadata_location(rel)
            if location is None or location.driver != driver or location.request != request:
                message = (
                    f"containerPath names driver/request {rel!r}, not this spec's "
                    f"{driver!r} and its device's request {request!r}"
                )
                raise SchemaError([Problem(message, str(path), None, f"{at}.containerPath")])
            try:
                data = read_bounded(Path(host), RECORD_BYTES_MAX)
            except KvdevError as e:
                what = "; ".join(p.message for p in e.problems) if isinstance(e, SchemaError) else e
                problem = Problem(f"hostPath {host}: {what}", str(path), None, f"{at}.hostPath")
                raise SchemaError([problem]) from e
            out.append(DriverFile(uid.lower(), request, driver, data, str(path)))
    return out


def _one_spec(path: Path) -> list[DriverFile]:
    """The files of the spec at ``path`` ([] when it is not a metadata spec).

    Raises:
        SchemaError, TransientReadError: the spec or a file it mounts is bad (named).
    """
    try:
        spec = yaml.safe_load(read_bounded(path, MAX_STREAM_BYTES))
    except yaml.YAMLError as e:
        raise SchemaError([Problem(f"not valid JSON or YAML: {e}", str(path))]) from e
    if not isinstance(spec, dict):
        return []
    kind = spec.get("kind")
    if not isinstance(kind, str) or not kind.endswith(KIND_SUFFIX):
        return []
    return _device_files(spec, path, kind.removesuffix(KIND_SUFFIX))


def find(cdi_dirs: Iterable[Path]) -> tuple[list[DriverFile], list[Problem]]:
    """Every driver file of the metadata specs in ``cdi_dirs``; the specs skipped, and why.

    Two specs that give one claim, request and driver different bytes: both are skipped (the
    node cannot tell which holds), each named.
    """
    found: dict[tuple[str, str, str], DriverFile] = {}
    clashed: set[tuple[str, str, str]] = set()
    problems: list[Problem] = []
    for directory in cdi_dirs:
        names, listed = _spec_names(directory)
        problems += listed
        for name in names:
            try:
                files = _one_spec(directory / name)
            except KvdevError as e:
                problems += e.problems if isinstance(e, SchemaError) else [Problem(str(e))]
                continue
            for f in files:
                at = (f.claim_uid, f.request, f.driver)
                before = found.setdefault(at, f)
                if before.data != f.data:
                    message = (
                        f"{f.key} of claim {f.claim_uid} is also in {before.spec}, other bytes"
                    )
                    problems.append(Problem(message + ": neither is relayed", f.spec))
                    clashed.add(at)
    return [f for at, f in sorted(found.items()) if at not in clashed], problems


def cdi_dirs(given: Sequence[str] | None) -> list[Path]:
    """The directories to read: those given, else ``DEFAULT_CDI_DIRS``."""
    return [Path(d) for d in (given or DEFAULT_CDI_DIRS)]


__all__ = ["DEFAULT_CDI_DIRS", "MAX_SPECS", "cdi_dirs", "find"]
