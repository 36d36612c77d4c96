"""Write and remove a claim's KEP-5304 metadata files and CDI specs on the host (the I/O half).

What to write is decided in ``files`` (the layout, names, generations, the record; pure); this
module applies it under the claim's lock, with the rules: a metadata file that exists is
rewritten in place (the same inode, where upstream's v0.37.2 writer renames a new file over
it: a running container sees it through a single-file bind mount, which a replacing rename
would never reach); a new one, a CDI
spec and the record are written atomically by rename; every write is fsynced
(``kvdev.host.fs``), mode 0644, directories 0755 whatever the umask; ``prepare`` is
idempotent (same input, same bytes, same generation; the file is not rewritten); ``update``
rewrites with generation + 1; ``unprepare`` removes exactly what was written and the
directories it emptied, and succeeds when it is all gone already. Calls for one claim, from
threads or processes, are serialized by an ``flock``. The record is written before new files
(the union of old and new) and after (the new set), so a crash never leaves a file
``unprepare`` does not know.

Documents come from ``metadata``, specs from ``kvdev.host.cdi.spec`` (both pure).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path

from kvdev.errors import Problem, SchemaError, os_error
from kvdev.host.cdi import spec as cdi
from kvdev.host.fs import locked, mkdirs, prune, read, remove, remove_temps, rewrite, write
from kvdev.host.k8s import ResourceClaim, ResourceSlice
from kvdev.host.k8s.device import NetworkDeviceData
from kvdev.host.publish.files import (
    METADATA_FILE,
    RECORD_FILE,
    Layout,
    OnDisk,
    PlannedFile,
    Prepared,
    PreparedDevice,
    claim_dir_name,
    metadata_path,
    parse_record,
    planned_files,
    prepared_devices,
    record_bytes,
)
from kvdev.host.publish.metadata import (
    ClaimIdentity,
    NetworkData,
    build_metadata,
    check_uid,
    claim_identity,
)
from kvdev.schema.fields import check_dns_label

__all__ = [
    "RECORD_FILE",
    "Layout",
    "Prepared",
    "PreparedDevice",
    "prepare",
    "unprepare",
    "update",
]


def _apply(
    claim: ResourceClaim,
    slices: Sequence[ResourceSlice],
    layout: Layout,
    network_data: Mapping[tuple[str, str, str], NetworkDeviceData] | None,
    *,
    bump: bool,
) -> Prepared:
    ident = claim_identity(claim)
    dir_name = claim_dir_name(ident.namespace, ident.name)
    requests = build_metadata(claim, slices, layout.driver, network_data=network_data)
    claim_dir = layout.claim_dir(dir_name)
    if not requests and not (claim_dir / RECORD_FILE).exists():
        return Prepared(ident.namespace, ident.name, ident.uid, (), ())  # none of ours
    with locked(layout.lock_file(dir_name)) as lock:
        on_disk = {
            path: read(path)
            for path in (metadata_path(layout, dir_name, r.request) for r in requests)
        }
        planned = planned_files(ident, requests, layout, on_disk, bump=bump)
        _write(ident, layout, claim_dir, planned, lock)
    devices = prepared_devices(claim, layout, ident.uid, requests)
    return Prepared(ident.namespace, ident.name, ident.uid, devices, tuple(f.path for f in planned))


def _write(
    ident: ClaimIdentity,
    layout: Layout,
    claim_dir: Path,
    planned: Sequence[PlannedFile],
    lock: Path,
) -> None:
    """Make the claim's files ``planned``, recording the union first: under the claim's lock."""
    new_files = [f.path for f in planned]
    _, old_files = parse_record(read(claim_dir / RECORD_FILE), layout, claim_dir)
    mkdirs(claim_dir)
    record = claim_dir / RECORD_FILE
    intent = record_bytes(ident, list(dict.fromkeys([*old_files, *new_files])))
    if read(record) != intent:  # before any new file: a crash never leaves one unrecorded
        write(record, intent)
    for f in planned:
        if read(f.path) != f.data:
            mkdirs(f.path.parent)
            if f.path.name == METADATA_FILE:  # bind-mounted into running containers: in place
                rewrite(f.path, f.data)
            else:
                write(f.path, f.data)
    for stale in (f for f in old_files if f not in new_files):
        remove(stale)
        prune(stale.parent, claim_dir)
    final = record_bytes(ident, new_files)
    if not new_files:  # the driver has no device left in the claim: nothing to keep
        remove(record)
        prune(claim_dir, layout.metadata_root)
        remove(lock)
    elif intent != final:  # the record holds ``intent`` now
        write(record, final)


# --------------------------------------------------------------------------- prepare / update


def prepare(
    claim: ResourceClaim,
    slices: Sequence[ResourceSlice],
    layout: Layout,
    *,
    network_data: NetworkData | None = None,
) -> Prepared:
    """Write the metadata files and CDI specs of ``layout.driver``'s devices of ``claim``.

    Idempotent: the same input leaves the files (bytes, mtime, generation) as they are; a
    changed input rewrites with generation + 1. Network data per (driver, pool, device)
    defaults to the claim's ``status.devices[].networkData``.

    Raises:
        SchemaError: a name is unsafe, the claim is not allocated or a device is not in
            the slices (nothing is written).
        PermanentError, RetryableError: a file could not be written (the message names it);
            no file is ever left partial.
    """
    return _apply(claim, slices, layout, network_data, bump=False)


def update(
    claim: ResourceClaim,
    slices: Sequence[ResourceSlice],
    layout: Layout,
    *,
    network_data: NetworkData | None = None,
) -> Prepared:
    """Rewrite the claim's files with generation + 1 (network data that arrived later)."""
    return _apply(claim, slices, layout, network_data, bump=True)


def unprepare(namespace: str, name: str, uid: str, layout: Layout) -> tuple[Path, ...]:
    """Remove what ``prepare`` wrote for the claim, and the directories that leaves empty.

    Returns the files removed; ``()`` when nothing was there. Files of another claim with the
    same namespace and name (a different uid) are left alone.

    Raises:
        SchemaError: a name or the uid is not valid (nothing is touched).
        PermanentError, RetryableError: a file could not be removed.
    """
    dir_name = claim_dir_name(namespace, name)
    try:
        check_uid(uid)
    except ValueError as e:
        raise SchemaError([Problem(f"claim {namespace}/{name}: uid: {e}")]) from e
    claim_dir = layout.claim_dir(dir_name)
    cdi_dir = layout.cdi_dir.absolute()
    removed: list[Path] = []
    if not layout.metadata_root.is_dir():  # never prepared here: no lock to take (or create)
        removed.extend(_remove_specs(layout, cdi_dir, uid))
        if not layout.metadata_root.is_dir():  # still so: no prepare wrote a spec meanwhile
            return tuple(removed)
    with locked(layout.lock_file(dir_name)) as lock:
        recorded_uid, files = parse_record(read(claim_dir / RECORD_FILE), layout, claim_dir)
        if recorded_uid is None:
            files = _derived(claim_dir, uid)
        if recorded_uid in {None, uid}:
            for path in files:
                if remove(path):
                    removed.append(path)
                remove_temps(path)  # left by a writer killed mid-way (never under the name)
                prune(path.parent, claim_dir)
            if recorded_uid is not None:
                remove(claim_dir / RECORD_FILE)
            remove_temps(claim_dir / RECORD_FILE)  # also when a killed writer left no record
            prune(claim_dir, layout.metadata_root)
        removed.extend(p for p in _remove_specs(layout, cdi_dir, uid) if p not in removed)
        if not claim_dir.exists():
            remove(lock)
    return tuple(removed)


def _derived(claim_dir: Path, uid: str) -> list[Path]:
    """Without a record: this uid's ``<request>/metadata.json`` files in the claim directory."""
    found = []
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for entry in sorted(claim_dir.iterdir()):
            path = entry / METADATA_FILE
            data = read(path) if entry.is_dir() and not entry.is_symlink() else None
            if data is not None and OnDisk.read(data).uid == uid:
                found.append(path)
    return found


def _remove_specs(layout: Layout, cdi_dir: Path, uid: str) -> tuple[Path, ...]:
    """This driver's metadata specs for ``uid`` in the CDI directory."""
    prefix = cdi.spec_file_prefix(layout.driver, uid)
    try:
        names = sorted(p.name for p in cdi_dir.iterdir())
    except FileNotFoundError:
        return ()
    except OSError as e:
        raise os_error(e, "list", cdi_dir) from e
    removed = []
    for file_name in names:
        if file_name.startswith(f".{prefix}") and file_name.endswith(".tmp"):
            remove(cdi_dir / file_name)  # left by a writer killed mid-way
            continue
        request = file_name.removeprefix(prefix).removesuffix(".json")
        if file_name.startswith(prefix) and file_name.endswith(".json"):
            with contextlib.suppress(ValueError):
                check_dns_label(request)
                if remove(cdi_dir / file_name):
                    removed.append(cdi_dir / file_name)
    return tuple(removed)
