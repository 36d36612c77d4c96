"""Write and remove a claim's KEP-5304 metadata files and CDI specs on the host (the I/O half).

Owns the host layout (upstream's, K/DRA ``kubeletplugin/metadata.go``)::

    <plugin-data-dir>/dra-device-metadata/<ns>_<claim>/<request>/metadata.json
    <plugin-data-dir>/dra-device-metadata/<ns>_<claim>/.kvdev-prepared.json   (what was written)
    <plugin-data-dir>/dra-device-metadata/.<ns>_<claim>.lock                   (per-claim flock)
    <cdi-dir>/<driver>_metadata_<claimUID>_<request>.json

and the rules: every file is replaced atomically with fsync (``kvdev._atomic``), mode 0644,
directories 0755 whatever the umask; ``prepare`` is idempotent (same input, same bytes, same
generation; the file is not rewritten); ``update`` rewrites with generation + 1; ``unprepare``
removes exactly what was written and the directories it emptied, and succeeds when it is all
gone already. Calls for one claim, from threads or processes, are serialized by an ``flock``.
The record is written before new files (the union of old and new) and after (the new set),
so a crash never leaves a file ``unprepare`` does not know.

It builds nothing itself: documents come from ``metadata``, specs from ``cdi`` (both pure).
Every path component comes from a validated name; input never supplies a path.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from kvdev.errors import Problem, SchemaError, os_error
from kvdev.host.fs import locked, mkdirs, prune, read, remove, remove_temps, write
from kvdev.host.k8s import ResourceClaim, ResourceSlice
from kvdev.host.publish import cdi
from kvdev.host.publish.metadata import (
    CLAIM_DIR_MAX,
    NetworkData,
    RequestMetadata,
    build_metadata,
    check_uid,
    claim_identity,
    driver_results,
    same_content,
    with_generation,
)
from kvdev.schema.fields import base_request, check_dns_label, check_dns_subdomain
from kvdev.schema.metadata import DeviceMetadata, NetworkDeviceData
from kvdev.schema.stream import DEVICE_METADATA, decode_stream, encode_stream

METADATA_DIR: Final = "dra-device-metadata"
METADATA_FILE: Final = "metadata.json"
RECORD_FILE: Final = ".kvdev-prepared.json"
RECORD_KIND: Final = "PreparedClaim"
RECORD_API: Final = "kvdev.io/v1alpha1"


@dataclass(frozen=True, slots=True)
class Layout:
    """Where one driver's files go."""

    driver: str  # validated DNS subdomain
    plugin_data_dir: Path  # default Path("/var/lib/kubelet/plugins") / driver
    cdi_dir: Path  # default Path("/var/run/cdi")

    def __post_init__(self) -> None:
        try:
            check_dns_subdomain(self.driver, 63)
            cdi.check_vendor(self.driver)
        except ValueError as e:
            raise SchemaError([Problem(f"driver name: {e}", path="driver")]) from e

    @classmethod
    def default(cls, driver: str) -> Layout:
        """``/var/lib/kubelet/plugins/<driver>`` and ``/var/run/cdi``."""
        return cls(driver, Path("/var/lib/kubelet/plugins") / driver, Path("/var/run/cdi"))

    @property
    def metadata_root(self) -> Path:
        """``<plugin-data-dir>/dra-device-metadata``."""
        return self.plugin_data_dir.absolute() / METADATA_DIR


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    """One device of the claim as the kubelet plugin reports it."""

    requests: tuple[str, ...]  # the allocation results' request names (incl. "req/sub")
    pool: str
    device: str
    cdi_device_ids: tuple[str, ...]  # ("<driver>/metadata=<claimUID>_<baseRequest>",)


@dataclass(frozen=True, slots=True)
class Prepared:
    """What ``prepare``/``update`` produced for one claim."""

    namespace: str
    name: str
    uid: str
    devices: tuple[PreparedDevice, ...]  # this driver's devices of the claim, allocation order
    paths: tuple[Path, ...]  # every file written (metadata files + CDI specs)


# --------------------------------------------------------------------------- names


def _claim_dir_name(namespace: str, name: str) -> str:
    try:
        check_dns_label(namespace)
        check_dns_subdomain(name)
    except ValueError as e:
        raise SchemaError([Problem(f"claim {namespace}/{name}: {e}")]) from e
    dir_name = f"{namespace}_{name}"
    if len(dir_name) > CLAIM_DIR_MAX:
        msg = f"claim {namespace}/{name}: '<namespace>_<name>' is too long for a directory name"
        raise SchemaError([Problem(msg)])
    return dir_name


# --------------------------------------------------------------------------- the record


def _record_bytes(namespace: str, name: str, uid: str, files: Sequence[Path]) -> bytes:
    body = {
        "apiVersion": RECORD_API,
        "kind": RECORD_KIND,
        "namespace": namespace,
        "name": name,
        "uid": uid,
        "files": [str(f) for f in files],
    }
    return (json.dumps(body, indent=2) + "\n").encode()


def _ours(path: Path, layout: Layout, claim_dir: Path) -> bool:
    """A recorded path is one this writer could have written for that claim (a guard)."""
    if path.parent == layout.cdi_dir.absolute():
        return path.name.startswith(f"{layout.driver}_{cdi.CLASS}_") and path.suffix == ".json"
    return path.name == METADATA_FILE and path.parent.parent == claim_dir


def _read_record(layout: Layout, claim_dir: Path) -> tuple[str | None, list[Path]]:
    """The uid and files recorded for the claim directory (None, [] when there is none)."""
    data = read(claim_dir / RECORD_FILE)
    if data is None:
        return None, []
    try:
        body = json.loads(data)
        uid, files = str(body["uid"]), [Path(str(f)) for f in body["files"]]
    except (ValueError, KeyError, TypeError):
        return None, []
    return uid, [f for f in files if _ours(f, layout, claim_dir)]


def _generation(data: bytes | None) -> int:
    """``metadata.generation`` of an existing stream, read leniently (0 when unknown)."""
    for line in (data or b"").splitlines():
        try:
            value = json.loads(line)["metadata"]["generation"]
        except (ValueError, KeyError, TypeError):
            continue
        if isinstance(value, int):
            return value
    return 0


def _current(data: bytes | None) -> DeviceMetadata | None:
    if data is None:
        return None
    try:
        return decode_stream(data, DEVICE_METADATA).document
    except SchemaError:
        return None


# --------------------------------------------------------------------------- prepare / update


def _devices(
    claim: ResourceClaim, layout: Layout, uid: str, requests: Sequence[RequestMetadata]
) -> tuple[PreparedDevice, ...]:
    written = {r.request for r in requests}
    order: dict[tuple[str, str, str | None], list[str]] = {}
    for result in driver_results(claim, layout.driver):
        order.setdefault((result.pool, result.device, result.share_id), []).append(result.request)
    out = []
    for (pool, device, _), names in order.items():
        bases = dict.fromkeys(base_request(n) for n in names if base_request(n) in written)
        ids = tuple(cdi.device_id(layout.driver, uid, b) for b in bases)
        out.append(PreparedDevice(tuple(names), pool, device, ids))
    return tuple(out)


def _apply(
    claim: ResourceClaim,
    slices: Sequence[ResourceSlice],
    layout: Layout,
    network_data: Mapping[tuple[str, str, str], NetworkDeviceData] | None,
    *,
    bump: bool,
) -> Prepared:
    ident = claim_identity(claim)
    dir_name = _claim_dir_name(ident.namespace, ident.name)
    requests = build_metadata(claim, slices, layout.driver, network_data=network_data)
    claim_dir = layout.metadata_root / dir_name
    cdi_dir = layout.cdi_dir.absolute()
    if not requests and not (claim_dir / RECORD_FILE).exists():
        return Prepared(ident.namespace, ident.name, ident.uid, (), ())  # none of ours
    with locked(layout.metadata_root / f".{dir_name}.lock") as lock:
        planned: list[tuple[Path, bytes | None, bytes]] = []  # path, old bytes, new bytes
        for item in requests:
            path = claim_dir / item.request / METADATA_FILE
            old = read(path)
            current = _current(old)
            generation = _generation(old)
            if bump or current is None or not same_content(current, item.document):
                generation += 1
            generation = max(generation, 1)
            document = with_generation(item.document, generation)
            planned.append((path, old, encode_stream(document, DEVICE_METADATA)))
            spec = cdi.metadata_spec(
                layout.driver,
                ident.uid,
                item.request,
                host_path=str(path),
                claim_name=ident.name,
                pod_claim_name=ident.pod_claim_name,
            )
            spec_path = cdi_dir / spec.file_name
            planned.append((spec_path, read(spec_path), spec.to_bytes()))
        new_files = [p for p, _, _ in planned]
        _, old_files = _read_record(layout, claim_dir)
        union = list(dict.fromkeys([*old_files, *new_files]))
        mkdirs(claim_dir)
        record = claim_dir / RECORD_FILE
        intent = _record_bytes(ident.namespace, ident.name, ident.uid, union)
        if read(record) != intent:  # before any new file: a crash never leaves one unrecorded
            write(record, intent)
        for path, old, data in planned:
            if old != data:
                mkdirs(path.parent)
                write(path, data)
        for stale in (f for f in old_files if f not in new_files):
            remove(stale)
            prune(stale.parent, claim_dir)
        final = _record_bytes(ident.namespace, ident.name, ident.uid, new_files)
        if not new_files:  # the driver has no device left in the claim: nothing to keep
            remove(record)
            prune(claim_dir, layout.metadata_root)
            remove(lock)
        elif intent != final:  # the record holds ``intent`` now
            write(record, final)
    return Prepared(
        ident.namespace,
        ident.name,
        ident.uid,
        _devices(claim, layout, ident.uid, requests),
        tuple(new_files),
    )


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
    dir_name = _claim_dir_name(namespace, name)
    try:
        check_uid(uid)
    except ValueError as e:
        raise SchemaError([Problem(f"claim {namespace}/{name}: uid: {e}")]) from e
    claim_dir = layout.metadata_root / dir_name
    cdi_dir = layout.cdi_dir.absolute()
    removed: list[Path] = []
    if not layout.metadata_root.is_dir():  # never prepared here: no lock to take (or create)
        removed.extend(_remove_specs(layout, cdi_dir, uid))
        if not layout.metadata_root.is_dir():  # still so: no prepare wrote a spec meanwhile
            return tuple(removed)
    with locked(layout.metadata_root / f".{dir_name}.lock") as lock:
        recorded_uid, files = _read_record(layout, claim_dir)
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
            if data is not None and f'"uid":"{uid}"'.encode() in data.split(b"\n", 1)[0]:
                found.append(path)
    return found


def _remove_specs(layout: Layout, cdi_dir: Path, uid: str) -> tuple[Path, ...]:
    """This driver's metadata specs for ``uid`` in the CDI directory."""
    prefix = f"{layout.driver}_{cdi.CLASS}_{uid}_"
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
