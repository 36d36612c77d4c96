"""One file's bytes in, one checked result out: the entry point readers use for every file.

``check_file`` reads a DeviceMetadata stream, a GuestHints stream or a config drive's
meta_data.json, validates it, derives the normalized device view, and checks that a metadata
file's content agrees with its place in the tree (claim, request and driver in the path). It
never raises for bad input: errors and warnings are data in the ``FileResult``.

A ConfigMap volume's stream key (``stream_key``: every key but ``guest-hints.json`` and the
sources index) holds DeviceMetadata only: a GuestHints object in it, wherever in the stream, is
an error on that key (``HINTS_IN_STREAM``), never hints. On a ConfigMap volume hints come only
from the controller's ``guest-hints.json`` key, which it derives from the VMI's spec; a stream
key holds a driver's bytes, relayed from the node.

A DeviceMetadata stream without a v1alpha1 object gives each of its devices the note that
KubeVirt up to v1.9 cannot read it (``metadata.older_readers_note``).

An empty metadata file in a tree (nothing but white space) is the first state of a driver's
deferred metadata, not an error: its request is ``pending`` (``described.pending``) until the
driver writes it. An object that names neither claim nor uid is read as upstream reads it; the
file's place in the tree names the claim (a warning says so).

No I/O here: the caller reads the bytes (or reports why it could not).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Final

from kvdev._records import compared
from kvdev.errors import Problem, SchemaError, Severity
from kvdev.schema import hints as hints_module
from kvdev.schema.configdrive import ConfigDriveMetadata
from kvdev.schema.described import DescribedDevice, describe, pending
from kvdev.schema.fields import base_request
from kvdev.schema.hints import GuestHints
from kvdev.schema.metadata import older_readers_note
from kvdev.schema.reading import DeviceMetadata
from kvdev.schema.stream import (
    DEVICE_METADATA,
    GUEST_HINTS,
    decode_document,
    decode_stream,
    type_metas,
)
from kvdev.schema.tree import CONFIG_DRIVE_NAME, CONFIGMAP_HINTS_KEY, MetadataLocation, Role

AnyDocument = DeviceMetadata | GuestHints | ConfigDriveMetadata


@compared
@dataclass(frozen=True, eq=False, repr=False)
class FileResult:
    """Everything kvdev learned from one file.

    ``document`` is None exactly when ``errors`` is not empty (a file is used or not at all),
    or when the file is ``pending`` (empty: its request waits for the driver).
    ``described`` lists the normalized devices of a DeviceMetadata file, each usable or with
    the ``problems`` that make it unusable (the file stays in use for its other devices).
    """

    source: str
    role: Role
    location: MetadataLocation | None = None
    api_version: str | None = None
    skipped: tuple[str, ...] = ()
    fallback: str = ""  # why newer known versions in the stream were unusable
    document: AnyDocument | None = None
    described: tuple[DescribedDevice, ...] = ()
    errors: tuple[Problem, ...] = ()
    warnings: tuple[Problem, ...] = field(default=())
    pending: bool = False  # an empty metadata file: the driver has not written it yet

    @property
    def ok(self) -> bool:
        """True when the file is valid (it may still carry warnings)."""
        return not self.errors


def sniff_role(name: str, data: bytes) -> Role:
    """Guess the role of a file given by name outside a tree (``kvdev metadata validate F``)."""
    if name.rsplit("/", 1)[-1] == CONFIG_DRIVE_NAME:
        return Role.CONFIG_DRIVE
    head = data[:4096].decode("utf-8", "replace").lstrip()
    # A hints stream starts with a JSON object; anything else (an array, deep nesting whose
    # failure mode differs between Python versions) is read as metadata and judged there.
    if head.startswith("{") and f'"{hints_module.GROUP}/' in head:
        try:  # a hints stream names its group in the first object's apiVersion
            first = json.JSONDecoder().raw_decode(head)[0]
        except RecursionError:
            return Role.DEVICE_METADATA
        except ValueError:  # the head cut a large hints file short
            return Role.GUEST_HINTS
        api = first.get("apiVersion", "") if isinstance(first, dict) else ""
        if str(api).startswith(hints_module.GROUP + "/"):
            return Role.GUEST_HINTS
    return Role.DEVICE_METADATA


HINTS_IN_STREAM: Final = (
    f"a {hints_module.KIND} object in a stream key: on a ConfigMap volume kvdev reads hints only "
    f"from the key {CONFIGMAP_HINTS_KEY}; this key is not used"
)


def check_file(
    source: str,
    role: Role,
    data: bytes,
    location: MetadataLocation | None = None,
    *,
    stream_key: bool = False,
) -> FileResult:
    """Validate one file's bytes as ``role``; never raises for bad input.

    ``stream_key``: the file is a ConfigMap volume's stream key (DeviceMetadata only).
    """
    try:
        if role is Role.DEVICE_METADATA:
            if stream_key and (found := _hints_objects(source, data)):
                return FileResult(source, role, location, errors=found)
            return _metadata(source, data, location)
        if role is Role.GUEST_HINTS:
            read = decode_stream(data, GUEST_HINTS, source=source)
            return FileResult(
                source,
                role,
                None,
                read.api_version,
                read.skipped,
                document=read.document,
                warnings=read.warnings,
            )
        if role is Role.CONFIG_DRIVE:
            doc, warnings = decode_document(data, ConfigDriveMetadata, source=source)
            return FileResult(source, role, document=doc, warnings=warnings)
    except SchemaError as e:
        return FileResult(source, role, location, errors=e.problems)
    return FileResult(source, role, errors=(Problem("not a file kvdev reads", source),))


def _hints_objects(source: str, data: bytes) -> tuple[Problem, ...]:
    """A problem per GuestHints object of a stream (by its group or its kind)."""
    out = []
    for index, api, kind in type_metas(data, source=source):
        of_hints = isinstance(api, str) and api.startswith(hints_module.GROUP + "/")
        if of_hints or kind == hints_module.KIND:
            out.append(
                Problem(HINTS_IN_STREAM, source, index, "apiVersion" if of_hints else "kind")
            )
    return tuple(out)


NO_IDENTITY: Final = (
    "has neither name nor uid (a writer always writes both; upstream's reader does not check): "
    "the claim is the one the file's place names"
)


def _metadata(source: str, data: bytes, location: MetadataLocation | None) -> FileResult:
    if location is not None and not data.strip(b" \t\r\n"):  # deferred: not written yet
        return FileResult(
            source, Role.DEVICE_METADATA, location, described=(pending(location),), pending=True
        )
    read = decode_stream(data, DEVICE_METADATA, source=source)
    doc = read.document
    notes: list[Problem] = []
    if not (doc.claim or (doc.metadata is not None and doc.metadata.uid)):
        notes.append(
            Problem(
                NO_IDENTITY, source, read.index, "metadata", Severity.WARNING, upstream_invalid=True
            )
        )
    described, warned = describe(doc, source=source, index=read.index, location=location)
    if (note := older_readers_note(read.versions)) is not None:
        described = [replace(d, notes=(*d.notes, note)) for d in described]
    warnings = [*read.warnings, *notes, *warned]
    if location is not None:
        warnings.extend(_placement(doc, location, source, read.index))
    fallback = "; ".join(
        f"stream[{p.index}]: {p.path + ': ' if p.path else ''}{p.message}"
        for p in read.fallback[:3]
    )
    return FileResult(
        source,
        Role.DEVICE_METADATA,
        location,
        read.api_version,
        read.skipped,
        fallback,
        doc,
        tuple(described),
        warnings=tuple(warnings),
    )


def _placement(
    doc: DeviceMetadata, loc: MetadataLocation, source: str, index: int
) -> list[Problem]:
    """Where content and path disagree; the path is what consumers look up, so say so."""
    out: list[Problem] = []

    def warn(path: str, message: str) -> None:
        out.append(Problem(message, source, index, path, Severity.WARNING))

    if loc.template:
        if doc.pod_claim_name != loc.claim:
            warn(
                "podClaimName",
                f"is {doc.pod_claim_name!r} but the file is under "
                f"resourceclaimtemplates/{loc.claim}/",
            )
    elif doc.claim != loc.claim:
        warn("metadata.name", f"is {doc.claim!r} but the file is under resourceclaims/{loc.claim}/")
    for r, request in enumerate(doc.requests or []):
        name = (request.name if request else None) or ""
        if base_request(name) != loc.request:
            warn(
                f"requests[{r}].name",
                f"is {name!r} but the file is in the directory of request {loc.request!r}",
            )
        for d, device in enumerate((request.devices if request else None) or []):
            if (device.driver if device else None) != loc.driver:
                warn(
                    f"requests[{r}].devices[{d}].driver",
                    f"is {device.driver if device else None!r} but the file is "
                    f"{loc.driver}-metadata.json",
                )
    return out
