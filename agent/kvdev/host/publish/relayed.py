"""What a node relays of the drivers' own metadata files, as ConfigMaps (pure).

The node relay (``kvdev-host relay``) finds each KEP-5304 file a driver wrote on its node (from
the ``<driver>/metadata`` CDI specs) and publishes its bytes, unchanged, in a *relay record*:
one ConfigMap per (node, claim) in the relay's own namespace:

* name ``kvdev-relay-<claimUID>-<10 hex digits of the node name's SHA-256>``;
* labels ``app.kubernetes.io/managed-by: kvdev-host-relay``, ``kvdev.io/claim-uid: <uid>``,
  ``kvdev.io/relay-node: <node name, cut to a label value>``;
* annotation ``kvdev.io/node: <node name>`` (whole: the admission policy compares it with the
  node in the writer's token), ``kvdev.io/cdi-specs``: JSON, key -> the CDI spec it came from;
* data: ``<request>.<driver>-metadata.json`` -> the file's bytes (UTF-8; a driver writes JSON).

The controller is the only writer of a VMI's ``kvdev-<vmi>`` ConfigMap: it copies a record's
bytes to the VMI's key for that claim and request only when the record's node is the VMI's
node, the claim is one the VMI uses (``controller/render``), and ``refusal`` finds nothing: a
relayed file is a DeviceMetadata stream of that claim and request, never anything else (the
guest reads a stream key as DeviceMetadata; a GuestHints document there would speak as the
controller's hints). ``read_record`` turns a stored ConfigMap back into a ``Record``, checking
what the controller relies on.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from kvdev.errors import Problem, SchemaError
from kvdev.host.k8s.names import bounded, digest
from kvdev.schema.fields import base_request
from kvdev.schema.reading import DeviceMetadata
from kvdev.schema.stream import DEVICE_METADATA, decode_every
from kvdev.schema.tree import METADATA_SUFFIX

RELAY_MANAGER: Final = "kvdev-host-relay"
MANAGED_BY: Final = "app.kubernetes.io/managed-by"
CLAIM_UID_LABEL: Final = "kvdev.io/claim-uid"
NODE_LABEL: Final = "kvdev.io/relay-node"
NODE_ANNOTATION: Final = "kvdev.io/node"
SPECS_ANNOTATION: Final = "kvdev.io/cdi-specs"
NAME_PREFIX: Final = "kvdev-relay-"
RECORD_BYTES_MAX: Final = 1024 * 1024 - 64 * 1024  # a ConfigMap's 1 MiB, less room for metadata
_LABEL_MAX: Final = 63
_UID: Final = re.compile(r"[0-9a-fA-F-]{1,64}\Z")
_NAME: Final = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?\Z")


@dataclass(frozen=True, slots=True)
class DriverFile:
    """One metadata file a driver wrote on the node, found through its CDI spec.

    ``claim_uid`` and ``request`` come from the CDI device's name (``<claimUID>_<request>``),
    ``driver`` from the spec's kind (``<driver>/metadata``), ``data`` is the file, unchanged.
    """

    claim_uid: str
    request: str
    driver: str
    data: bytes
    spec: str  # the CDI spec file it came from

    @property
    def key(self) -> str:
        """The record's key: ``<request>.<driver>-metadata.json``."""
        return record_key(self.request, self.driver)


@dataclass(frozen=True, slots=True)
class Record:
    """A relay record as stored: the node, the claim, its files by (request, driver)."""

    node: str
    claim_uid: str
    files: Mapping[tuple[str, str], str] = field(default_factory=dict)
    name: str = ""


def record_key(request: str, driver: str) -> str:
    """``<request>.<driver>-metadata.json``."""
    return f"{request}.{driver}{METADATA_SUFFIX}"


def record_name(node: str, claim_uid: str) -> str:
    """``kvdev-relay-<claimUID>-<hash of the node>``: one per claim and node, a valid name."""
    return f"{NAME_PREFIX}{claim_uid.lower()}-{digest(node)}"


def node_label(node: str) -> str:
    """The node name as a label value (cut, with a hash, when longer than 63)."""
    return bounded(node, _LABEL_MAX)


def node_selector(node: str) -> str:
    """The label selector of one node's records."""
    return f"{MANAGED_BY}={RELAY_MANAGER},{NODE_LABEL}={node_label(node)}"


def records(
    node: str, namespace: str, files: Iterable[DriverFile]
) -> tuple[list[dict[str, Any]], list[Problem]]:
    """The relay records (ConfigMap bodies, by name) of one node's files; what was left out.

    A file that is not UTF-8, or a claim whose files together exceed ``RECORD_BYTES_MAX``, is
    left out with a problem naming its spec; the other claims are not affected.
    """
    by_claim: dict[str, dict[str, DriverFile]] = {}
    problems: list[Problem] = []
    for f in files:
        if not _UID.match(f.claim_uid):
            problems.append(Problem(f"claim UID {f.claim_uid!r} is not a UID: skipped", f.spec))
            continue
        try:
            f.data.decode()
        except UnicodeDecodeError:
            problems.append(Problem(f"{f.key}: the file is not UTF-8: not relayed", f.spec))
            continue
        by_claim.setdefault(f.claim_uid, {})[f.key] = f
    bodies = []
    for uid in sorted(by_claim):
        chosen = by_claim[uid]
        size = sum(len(k) + len(f.data) for k, f in chosen.items())
        if size > RECORD_BYTES_MAX:
            spec = next(iter(chosen.values())).spec
            message = f"claim {uid}: {size} bytes of metadata, over {RECORD_BYTES_MAX}: not relayed"
            problems.append(Problem(message, spec))
            continue
        bodies.append(_body(node, namespace, uid, chosen))
    return bodies, problems


def _body(node: str, namespace: str, uid: str, chosen: Mapping[str, DriverFile]) -> dict[str, Any]:
    specs = {k: chosen[k].spec for k in sorted(chosen)}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": record_name(node, uid),
            "namespace": namespace,
            "labels": {
                MANAGED_BY: RELAY_MANAGER,
                CLAIM_UID_LABEL: uid.lower(),
                NODE_LABEL: node_label(node),
            },
            "annotations": {
                NODE_ANNOTATION: node,
                SPECS_ANNOTATION: json.dumps(specs, sort_keys=True, separators=(",", ":")),
            },
        },
        "data": {k: chosen[k].data.decode() for k in sorted(chosen)},
    }


def is_record(raw: Mapping[str, Any]) -> bool:
    """The ConfigMap carries the relay's label."""
    meta = raw.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return isinstance(labels, Mapping) and labels.get(MANAGED_BY) == RELAY_MANAGER


def read_record(raw: Mapping[str, Any]) -> Record | None:
    """The record a stored ConfigMap holds; None when it is not a well-formed relay record.

    Checked: the relay's label, a node annotation, a claim UID label, and keys of the form
    ``<request>.<driver>-metadata.json`` (request a DNS label, driver a DNS subdomain).
    """
    if not is_record(raw):
        return None
    meta = raw["metadata"]
    node = (meta.get("annotations") or {}).get(NODE_ANNOTATION)
    uid = (meta.get("labels") or {}).get(CLAIM_UID_LABEL)
    data = raw.get("data") or {}
    if not isinstance(node, str) or not node or not isinstance(uid, str) or not _UID.match(uid):
        return None
    if not isinstance(data, Mapping):
        return None
    files: dict[tuple[str, str], str] = {}
    for key, value in data.items():
        split = split_key(key)
        if split is not None and isinstance(value, str):
            files[split] = value
    return Record(node, uid.lower(), files, str(meta.get("name", "")))


def split_key(key: str) -> tuple[str, str] | None:
    """(request, driver) of a record key; None when it has not that form."""
    if not key.endswith(METADATA_SUFFIX):
        return None
    request, dot, driver = key.removesuffix(METADATA_SUFFIX).partition(".")
    if not dot or len(request) > _LABEL_MAX or not _NAME.match(request) or "." in request:
        return None
    if len(driver) > 253 or not _NAME.match(driver):
        return None
    return request, driver


@dataclass(frozen=True, slots=True)
class Claim:
    """The claim a relayed file must be for: the one the VMI uses, as the API server has it."""

    namespace: str
    name: str
    uid: str


_VERDICTS: dict[tuple[bytes, Claim, str, str], str | None] = {}
_UNKNOWN: Final = object()
VERDICTS_MAX: Final = 4096  # remembered verdicts (a digest and a short reason each)


def refusal(text: str, claim: Claim, request: str, driver: str) -> str | None:
    """Why a relayed file may not be copied to the VMI's key of ``claim`` and ``request``.

    None when it may: every object in it is a DeviceMetadata of a version the guest's reader
    knows (``kvdev.schema.stream.decode_every``: the same reader, never a second parser), that
    decodes, and is for that claim (its ``metadata.uid`` or ``metadata.name``, one of them at
    least, and its namespace where given), that request (every ``requests[].name``, a
    subrequest of it counting as it) and that driver (every ``devices[].driver`` given).

    A verdict is a function of its inputs: it is remembered by the text's digest (a VMI is
    rendered again on every change of its pods, and a record's file is up to 960 KiB).
    """
    key = (hashlib.blake2b(text.encode(), digest_size=16).digest(), claim, request, driver)
    found = _VERDICTS.get(key, _UNKNOWN)  # one lookup: the workers share it (under the GIL)
    if found is not _UNKNOWN:
        return found if isinstance(found, str) else None
    if len(_VERDICTS) >= VERDICTS_MAX:
        _VERDICTS.clear()
    verdict = _VERDICTS[key] = _judged(text, claim, request, driver)
    return verdict


def _judged(text: str, claim: Claim, request: str, driver: str) -> str | None:
    try:
        documents = decode_every(text, DEVICE_METADATA)
    except SchemaError as e:
        first = e.problems[0]
        where = f"stream[{first.index}]" if first.index is not None else ""
        at = ".".join(x for x in (where, first.path) if x)
        return f"not a {DEVICE_METADATA.kind} stream: {at + ': ' if at else ''}{first.message}"
    for index, doc in enumerate(documents):
        why = _not_for(doc, claim, request, driver)
        if why is not None:
            return f"stream[{index}]: {why}"
    return None


def _not_for(doc: DeviceMetadata, claim: Claim, request: str, driver: str) -> str | None:
    return _not_of_claim(doc, claim) or _not_of_request(doc, request, driver)


def _not_of_claim(doc: DeviceMetadata, claim: Claim) -> str | None:
    meta = doc.metadata
    if meta is None or not (meta.uid or meta.name):
        return "metadata names no claim (neither uid nor name)"
    given = (
        ("uid", (meta.uid or "").lower(), claim.uid.lower()),  # a UID's hex in either case
        ("name", meta.name, claim.name),
        ("namespace", meta.namespace, claim.namespace),
    )
    for field_name, value, wanted in given:
        if value and value != wanted:
            return f"metadata.{field_name} is {value[:64]!r}, not the claim's {wanted!r}"
    return None


def _not_of_request(doc: DeviceMetadata, request: str, driver: str) -> str | None:
    if not doc.requests:
        return f"no request: the record's key is request {request!r}"
    for r, entry in enumerate(doc.requests):
        named = (entry.name if entry else None) or ""
        if base_request(named) != request:
            return f"requests[{r}].name is {named[:64]!r}, not the record's request {request!r}"
        for d, device in enumerate((entry.devices if entry else None) or []):
            if device is not None and device.driver and device.driver != driver:
                return (
                    f"requests[{r}].devices[{d}].driver is {device.driver[:64]!r}, not the "
                    f"record's driver {driver!r}"
                )
    return None


def for_node(found: Sequence[Record], node: str | None) -> dict[str, Record]:
    """The records of ``node``, by claim UID (none without a node)."""
    if not node:
        return {}
    return {r.claim_uid: r for r in found if r.node == node}


__all__ = [
    "CLAIM_UID_LABEL",
    "NODE_ANNOTATION",
    "NODE_LABEL",
    "RELAY_MANAGER",
    "SPECS_ANNOTATION",
    "Claim",
    "DriverFile",
    "Record",
    "for_node",
    "is_record",
    "node_label",
    "node_selector",
    "read_record",
    "record_key",
    "record_name",
    "records",
    "refusal",
    "split_key",
]
