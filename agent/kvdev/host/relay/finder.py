"""Every KEP-5304 metadata file on this node, found through the drivers' CDI specs (I/O).

For each ``<driver>/metadata`` spec of the CDI directories, each device ``<claimUID>_<request>``
and each of its mounts at that driver's and request's metadata place, the ``hostPath`` file,
read and bounded by the CDI package (``kvdev.host.cdi``) within this module's per-pass bounds
(``MAX_SPECS``, ``MAX_SPEC_FILE_BYTES``, ``MAX_PASS_BYTES``). A bad spec or file is skipped and
named, never keeping another spec's files from being found; ``Found`` tells the relay's
deletion rule whether the read was complete and which claims the specs name or hold. The
rules and bounds: docs/reference/relay.md.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from kvdev._confined import RefusedError
from kvdev.errors import KvdevError, Problem, SchemaError
from kvdev.host.cdi.ondisk import DEFAULT_HOST_DIRS, MAX_LISTED, HostFiles, read_spec, spec_names
from kvdev.host.cdi.spec import (
    check_counts,
    load_spec,
    metadata_driver,
    mount_field,
    mount_list,
    mount_place,
    split_device_name,
)
from kvdev.host.contract import RECORD_BYTES_MAX
from kvdev.host.publish.relayed import DriverFile
from kvdev.schema.tree import metadata_location

DEFAULT_CDI_DIRS: Final = ("/etc/cdi", "/var/run/cdi")
MAX_SPECS: Final = 4096  # metadata specs per directory: a node's claims times requests, with room
MAX_SPEC_FILE_BYTES: Final = 4 * RECORD_BYTES_MAX  # the files one spec mounts, in all
MAX_PASS_BYTES: Final = 32 * 1024 * 1024  # specs and files read in one pass, in all


@dataclass
class Found:
    """One read of the node's specs.

    The files found, the specs and files left out (named), whether the read was complete,
    every claim a spec read names, and those held (a file of theirs failed).
    """

    files: list[DriverFile] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    complete: bool = True
    claims: set[str] = field(default_factory=set)
    held: set[str] = field(default_factory=set)

    def incomplete(self, problem: Problem) -> None:
        """A part of the node that was not read: no claim may be taken as gone."""
        self.complete = False
        self.problems.append(problem)


class _Pass:
    """The bounds and the one-read-per-path cache of one pass."""

    def __init__(self, host_dirs: Sequence[str | os.PathLike[str]]) -> None:
        self.host_files = HostFiles(host_dirs, RECORD_BYTES_MAX)
        self.spec_bytes = 0

    @property
    def bytes_read(self) -> int:
        return self.spec_bytes + self.host_files.bytes_read


def _device_files(
    spec: dict[str, Any], path: Path, driver: str, run: _Pass, found: Found
) -> list[DriverFile]:
    """The files of one ``<driver>/metadata`` spec; its claims are added to ``found.claims``.

    A claim with a file that cannot be read this pass is held (``found.held``), named.

    Raises:
        SchemaError: the spec breaks a rule or a bound (the first is named).
    """
    devices = check_counts(spec, str(path))
    named = []
    for i, device in enumerate(devices):
        split = split_device_name(device.get("name", ""))
        if split is None:
            message = f"device name {device.get('name')!r} is not <claimUID>_<request>"
            raise SchemaError([Problem(message, str(path), None, f"devices[{i}].name")])
        named.append(split)
    found.claims.update(uid for uid, _ in named)
    try:
        return _mounted(devices, named, path, driver, run, found)
    except SchemaError:
        found.held.update(uid for uid, _ in named)  # a bad spec never updates a claim in part
        raise


def _mounted(
    devices: list[dict[str, Any]],
    named: list[tuple[str, str]],
    path: Path,
    driver: str,
    run: _Pass,
    found: Found,
) -> list[DriverFile]:
    out: list[DriverFile] = []
    spent = 0
    for i, ((uid, request), device) in enumerate(zip(named, devices, strict=True)):
        for j, mount in enumerate(mount_list(device)):
            at = mount_field(i, j)
            placed = mount_place(mount, str(path), at)
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
                data = run.host_files.read(host)
            except (RefusedError, OSError) as e:
                what = e.reason if isinstance(e, RefusedError) else f"cannot read: {e.strerror}"
                problem = Problem(f"hostPath {host}: {what}", str(path), None, f"{at}.hostPath")
                found.problems.append(problem)
                found.held.add(uid)
                continue
            spent += len(data)
            if spent > MAX_SPEC_FILE_BYTES:
                message = f"the files it mounts pass {MAX_SPEC_FILE_BYTES} bytes in all: not read"
                raise SchemaError([Problem(message, str(path), None, at)])
            out.append(DriverFile(uid, request, driver, data, str(path)))
    return out


def _one_spec(
    directory: Path, name: str, run: _Pass, found: Found
) -> tuple[list[DriverFile], bool]:
    """The files of the spec ``name`` and whether it is a metadata spec.

    Raises:
        SchemaError, TransientReadError: the spec is bad, over a bound or unreadable (named).
    """
    path = directory / name
    data = read_spec(directory, name)
    run.spec_bytes += len(data)
    spec = load_spec(data, str(path))
    driver = metadata_driver(spec)
    if not isinstance(spec, dict) or driver is None:
        return [], False
    return _device_files(spec, path, driver, run, found), True


def _directory(directory: Path, run: _Pass, found: Found) -> Iterable[DriverFile]:
    """The files of one directory's metadata specs, within the pass's bounds."""
    try:
        names, cut = spec_names(directory)
    except FileNotFoundError:
        return  # a CDI directory that is not there holds no spec
    except OSError as e:
        found.incomplete(Problem(f"cannot list: {e.strerror or e}", str(directory)))
        return
    if cut:
        message = f"more than {MAX_LISTED} names: the listing is cut, no record is deleted"
        found.incomplete(Problem(message, str(directory)))
    metadata = 0
    for at, name in enumerate(names):
        if run.bytes_read >= MAX_PASS_BYTES:
            message = (
                f"{MAX_PASS_BYTES} bytes read this pass: {len(names) - at} specs from {name} "
                "on are not read, no record is deleted"
            )
            found.incomplete(Problem(message, str(directory)))
            return
        if metadata == MAX_SPECS:
            message = (
                f"{MAX_SPECS} metadata specs read: {len(names) - at} spec files from {name} "
                "on are not read, no record is deleted"
            )
            found.incomplete(Problem(message, str(directory)))
            return
        try:
            files, is_metadata = _one_spec(directory, name, run, found)
        except KvdevError as e:
            problems = e.problems if isinstance(e, SchemaError) else [Problem(str(e))]
            found.incomplete(problems[0])
            found.problems += problems[1:]
            continue
        metadata += is_metadata
        yield from files


def find(
    cdi_dirs: Iterable[Path], host_dirs: Sequence[str | os.PathLike[str]] = DEFAULT_HOST_DIRS
) -> Found:
    """Every driver file of the metadata specs in ``cdi_dirs``, read beneath ``host_dirs``.

    Two specs that give one claim, request and driver different bytes: both are skipped (the
    node cannot tell which holds), each named, and the claim is held.
    """
    found = Found()
    run = _Pass(host_dirs)
    chosen: dict[tuple[str, str, str], DriverFile] = {}
    for directory in cdi_dirs:
        for f in _directory(directory, run, found):
            at = (f.claim_uid, f.request, f.driver)
            before = chosen.setdefault(at, f)
            if before.data != f.data:
                message = f"{f.key} of claim {f.claim_uid} is also in {before.spec}, other bytes"
                found.problems.append(Problem(message + ": neither is relayed", f.spec))
                found.held.add(f.claim_uid)
    found.files = [f for at, f in sorted(chosen.items()) if f.claim_uid not in found.held]
    return found


def cdi_dirs(given: Sequence[str] | None) -> list[Path]:
    """The directories to read: those given, else ``DEFAULT_CDI_DIRS``."""
    return [Path(d) for d in (given or DEFAULT_CDI_DIRS)]


def host_dirs(given: Sequence[str] | None) -> list[Path]:
    """The directories the files may lie beneath: those given, else ``DEFAULT_HOST_DIRS``."""
    return [Path(d) for d in (given or DEFAULT_HOST_DIRS)]


__all__ = [
    "DEFAULT_CDI_DIRS",
    "MAX_PASS_BYTES",
    "MAX_SPECS",
    "MAX_SPEC_FILE_BYTES",
    "Found",
    "cdi_dirs",
    "find",
    "host_dirs",
]
