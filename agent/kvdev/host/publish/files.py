"""Which files a claim's preparation leaves on the host, with which bytes (no file is touched).

Owns the host layout (upstream's, K/DRA ``kubeletplugin/metadata.go``)::

    <plugin-data-dir>/dra-device-metadata/<ns>_<claim>/<request>/metadata.json
    <plugin-data-dir>/dra-device-metadata/<ns>_<claim>/.kvdev-prepared.json   (what was written)
    <plugin-data-dir>/dra-device-metadata/.<ns>_<claim>.lock                   (per-claim flock)
    <cdi-dir>/<driver>_metadata_<claimUID>_<request>.json

and the decisions: a metadata file keeps its generation when its content is the same (or
takes the old one + 1, or 1 when new), the record's bytes, which recorded paths are this
writer's. ``planned_files`` is the whole "what" of ``writer.prepare``/``update``: given the
bytes now on disk it returns every file with the bytes it must hold. Every path component
comes from a validated name; input never supplies a path. ``writer`` does the I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from kvdev.errors import Problem, SchemaError
from kvdev.host.cdi import spec as cdi
from kvdev.host.k8s import ResourceClaim
from kvdev.host.publish.metadata import (
    CLAIM_DIR_MAX,
    ClaimIdentity,
    RequestMetadata,
    driver_results,
    with_generation,
)
from kvdev.schema import gojson
from kvdev.schema.fields import base_request, check_dns_label, check_dns_subdomain
from kvdev.schema.metadata import GO_LAYOUT, DeviceMetadata
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

    def claim_dir(self, dir_name: str) -> Path:
        """``<metadata-root>/<ns>_<claim>``."""
        return self.metadata_root / dir_name

    def lock_file(self, dir_name: str) -> Path:
        """``<metadata-root>/.<ns>_<claim>.lock``: beside the claim directory, which goes."""
        return self.metadata_root / f".{dir_name}.lock"


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    """One device of the claim as the kubelet plugin reports it.

    ``cdi_device_ids`` holds the metadata CDI device of each request this device is the
    first device of (as upstream's plugin injects it: the first device per request only, so
    one container does not get the same file mounted twice at one path).
    """

    requests: tuple[str, ...]  # the allocation results' request names (incl. "req/sub")
    pool: str
    device: str
    cdi_device_ids: tuple[str, ...]  # ("<driver>/metadata=<claimUID>_<baseRequest>",) or ()
    share_id: str | None = None  # set for a share of a consumable-capacity device

    @property
    def base_requests(self) -> tuple[str, ...]:
        """The request names kubelet matches containers against: subrequests stripped."""
        return tuple(base_request(r) for r in self.requests)


@dataclass(frozen=True, slots=True)
class Prepared:
    """What ``prepare``/``update`` produced for one claim."""

    namespace: str
    name: str
    uid: str
    devices: tuple[PreparedDevice, ...]  # this driver's devices of the claim, allocation order
    paths: tuple[Path, ...]  # every file written (metadata files + CDI specs)


@dataclass(frozen=True, slots=True)
class PlannedFile:
    """A file a claim's preparation leaves on disk, and the bytes it must hold."""

    path: Path
    data: bytes


# --------------------------------------------------------------------------- names


def claim_dir_name(namespace: str, name: str) -> str:
    """``<ns>_<claim>``, from a checked namespace and name.

    Raises:
        SchemaError: a name is not a Kubernetes name, or the pair is too long for a directory.
    """
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


def metadata_path(layout: Layout, dir_name: str, request: str) -> Path:
    """``<claim dir>/<request>/metadata.json``."""
    return layout.claim_dir(dir_name) / request / METADATA_FILE


# --------------------------------------------------------------------------- the record


def record_bytes(ident: ClaimIdentity, files: Sequence[Path]) -> bytes:
    """The record of what was written for the claim."""
    body = {
        "apiVersion": RECORD_API,
        "kind": RECORD_KIND,
        "namespace": ident.namespace,
        "name": ident.name,
        "uid": ident.uid,
        "files": [str(f) for f in files],
    }
    return (json.dumps(body, indent=2) + "\n").encode()


def _ours(path: Path, layout: Layout, claim_dir: Path) -> bool:
    """A recorded path is one this writer could have written for that claim (a guard)."""
    if path.parent == layout.cdi_dir.absolute():
        return path.name.startswith(cdi.spec_file_prefix(layout.driver)) and path.suffix == ".json"
    return path.name == METADATA_FILE and path.parent.parent == claim_dir


def parse_record(
    data: bytes | None, layout: Layout, claim_dir: Path
) -> tuple[str | None, list[Path]]:
    """The uid and the files (only those this writer could have written) of a record.

    ``(None, [])`` when there is none or it does not parse.
    """
    if data is None:
        return None, []
    try:
        body = json.loads(data)
        uid, files = str(body["uid"]), [Path(str(f)) for f in body["files"]]
    except (ValueError, KeyError, TypeError):
        return None, []
    return uid, [f for f in files if _ours(f, layout, claim_dir)]


# --------------------------------------------------------------------------- the files


@dataclass(frozen=True, slots=True)
class OnDisk:
    """What an existing metadata file says, read as any writer may have laid it out.

    ``content`` is the object as Go would write it, without its apiVersion and generation
    (None when nothing in the file decodes); ``generation`` and ``uid`` come from the first
    object that has them (0 and None when none has).
    """

    content: object | None
    generation: int
    uid: str | None

    @classmethod
    def read(cls, data: bytes | None) -> OnDisk:
        """Read ``data`` (None: no file) leniently: compact or indented, ours or upstream's."""
        if data is None:
            return cls(None, 0, None)
        try:
            doc = decode_stream(data, DEVICE_METADATA).document
        except SchemaError:
            return cls(None, *_first_identity(data))
        uid = doc.metadata.uid if doc.metadata else None
        return cls(_content(doc.to_json_dict()), doc.generation, uid)


def _content(data: dict[str, object]) -> object:
    """The object as Go would write it, with neither apiVersion nor generation."""
    laid_out = gojson.go_value(data | {"apiVersion": ""}, GO_LAYOUT)
    assert isinstance(laid_out, dict)
    meta = laid_out.get("metadata")
    if isinstance(meta, dict):
        meta.pop("generation", None)
    return laid_out


def _first_identity(data: bytes) -> tuple[int, str | None]:
    """(generation, uid) of the first JSON object of a stream that has them, skipping junk."""
    text = data.decode("utf-8", "replace")
    decoder = json.JSONDecoder()
    pos = 0
    while (start := text.find("{", pos)) != -1:
        try:
            value, pos = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            pos = start + 1
            continue
        meta = value.get("metadata") if isinstance(value, dict) else None
        generation = meta.get("generation") if isinstance(meta, dict) else None
        if isinstance(generation, int) and not isinstance(generation, bool):
            uid = meta.get("uid") if isinstance(meta, dict) else None
            return generation, uid if isinstance(uid, str) else None
    return 0, None


def next_generation(
    document: DeviceMetadata, old: bytes | None, *, bump: bool = False
) -> DeviceMetadata:
    """``document`` with the generation it takes over ``old`` (the stream now published).

    1 when there is nothing (or another claim's stream: a different UID); the old one when
    the content is the same, unless ``bump``; else the old one + 1. Shared by the metadata
    writer and ``kvdev-host controller`` (a ConfigMap key holds the same stream).
    """
    before = OnDisk.read(old)
    if before.uid not in {None, document.metadata.uid}:
        before = OnDisk(None, 0, None)
    generation = before.generation
    unchanged = before.content is not None and before.content == _content(document.to_json_dict())
    if bump or not unchanged:
        generation += 1
    return with_generation(document, max(generation, 1))


def planned_files(
    ident: ClaimIdentity,
    requests: Sequence[RequestMetadata],
    layout: Layout,
    on_disk: Mapping[Path, bytes | None],
    *,
    bump: bool,
) -> tuple[PlannedFile, ...]:
    """Every file of the claim with its bytes: per request its metadata file and CDI spec.

    ``on_disk`` holds the bytes of each request's metadata file now (None: absent). A file
    keeps its generation when its content is unchanged, unless ``bump`` (``update``); any other
    change takes the next one. A file of another claim of the same name (a deleted and
    re-created claim: another UID) does not count: its successor starts again at 1.
    """
    dir_name = claim_dir_name(ident.namespace, ident.name)
    out = []
    for item in requests:
        path = metadata_path(layout, dir_name, item.request)
        document = next_generation(item.document, on_disk.get(path), bump=bump)
        out.append(PlannedFile(path, encode_stream(document, DEVICE_METADATA)))
        spec = cdi.metadata_spec(
            layout.driver,
            ident.uid,
            item.request,
            host_path=str(path),
            claim_name=ident.name,
            pod_claim_name=ident.pod_claim_name,
        )
        out.append(PlannedFile(layout.cdi_dir.absolute() / spec.file_name, spec.to_bytes()))
    return tuple(out)


def prepared_devices(
    claim: ResourceClaim, layout: Layout, uid: str, requests: Sequence[RequestMetadata]
) -> tuple[PreparedDevice, ...]:
    """This driver's devices of the claim in allocation order, each with its CDI device IDs.

    A request's metadata CDI device goes to its first device only (upstream's rule).
    """
    written = {r.request for r in requests}
    order: dict[tuple[str, str, str | None], list[str]] = {}
    for result in driver_results(claim, layout.driver):
        order.setdefault((result.pool, result.device, result.share_id), []).append(result.request)
    out = []
    injected: set[str] = set()
    for (pool, device, share_id), names in order.items():
        bases = [b for b in dict.fromkeys(base_request(n) for n in names) if b in written]
        ids = tuple(cdi.device_id(layout.driver, uid, b) for b in bases if b not in injected)
        injected.update(bases)
        out.append(PreparedDevice(tuple(names), pool, device, ids, share_id))
    return tuple(out)
