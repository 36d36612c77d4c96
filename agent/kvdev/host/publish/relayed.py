"""The node relay's records of the drivers' own metadata files, and reading them back (pure).

A relay record is one ConfigMap per (node, claim) in the relay's namespace holding the bytes of
each KEP-5304 file a driver wrote for that claim on that node, unchanged. Its names, labels,
annotations and limits are ``kvdev.host.contract``'s (described in docs/reference/relay.md).
This module makes records (``records``), trusts one only when its name, node label and node
annotation agree (``read_record``, ``sort_listed``), and says whether a relayed file may stand
for a claim's stream in a VMI's ConfigMap (``refusal``: only a DeviceMetadata stream of that
claim, request and driver).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from kvdev.errors import Problem, SchemaError
from kvdev.host.contract import (
    CLAIM_UID_LABEL,
    LABEL_MAX,
    LEGACY_NAME_PATTERN,
    MANAGED_BY,
    NAME_MAX,
    NODE_ANNOTATION,
    NODE_LABEL,
    NODE_NAME_MAX,
    RECORD_BYTES_MAX,
    RECORD_PREFIX,
    RELAY,
    SPECS_ANNOTATION,
    UID_PATTERN,
    node_label,
    record_key,
    record_name,
)
from kvdev.schema.fields import base_request
from kvdev.schema.reading import DeviceMetadata
from kvdev.schema.stream import DEVICE_METADATA, decode_every
from kvdev.schema.tree import METADATA_SUFFIX

_UID: Final = re.compile(UID_PATTERN, re.IGNORECASE)
_LOWER_UID: Final = re.compile(UID_PATTERN)
_LEGACY_NAME: Final = re.compile(LEGACY_NAME_PATTERN)
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


def node_problem(node: str) -> str | None:
    """Why ``node`` can have no relay records (None: it can)."""
    if len(node) > NODE_NAME_MAX:
        return (
            f"node name {node[:40]!r}... is {len(node)} characters, over {NODE_NAME_MAX}: "
            f"no record name ({RECORD_PREFIX}<claimUID>.<node>) fits {NAME_MAX}, so this node's "
            "files are not relayed (its VMIs get the controller's reconstruction)"
        )
    if not _NAME.match(node):
        return f"node name {node!r} is not a DNS subdomain (a Node's name): nothing is relayed"
    return None


def records(
    node: str, namespace: str, files: Iterable[DriverFile]
) -> tuple[list[dict[str, Any]], list[Problem]]:
    """The relay records (ConfigMap bodies, by name) of one node's files; what was left out.

    A file that is not UTF-8, or a claim whose files together exceed ``RECORD_BYTES_MAX``, is
    left out with a problem naming its spec; the other claims are not affected. A node whose
    name makes no record name (``node_problem``) has no records: one problem says why.
    """
    by_claim: dict[str, dict[str, DriverFile]] = {}
    problems: list[Problem] = []
    files = list(files)
    bad_node = node_problem(node)
    if bad_node is not None:
        return [], [Problem(bad_node, files[0].spec)] if files else []
    for f in files:
        if not _UID.fullmatch(f.claim_uid):
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
                MANAGED_BY: RELAY,
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
    return isinstance(labels, Mapping) and labels.get(MANAGED_BY) == RELAY


def read_record(raw: Mapping[str, Any]) -> Record | None:
    """The record a stored ConfigMap holds; None when it is not a well-formed relay record.

    Checked: the relay's label, a node annotation, a claim UID label (a UUID, lower case), the
    name and node label that node and claim make (``record_name``, ``node_label``: what the
    chart's admission policy binds to the writer's node), and keys of the form
    ``<request>.<driver>-metadata.json`` (request a DNS label, driver a DNS subdomain).
    """
    if not is_record(raw):
        return None
    meta = raw["metadata"]
    node = (meta.get("annotations") or {}).get(NODE_ANNOTATION)
    labels = meta.get("labels") or {}
    uid = labels.get(CLAIM_UID_LABEL)
    data = raw.get("data") or {}
    if not isinstance(node, str) or not node or not isinstance(uid, str):
        return None
    if not _LOWER_UID.fullmatch(uid) or meta.get("name") != record_name(node, uid):
        return None
    if labels.get(NODE_LABEL) != node_label(node) or not isinstance(data, Mapping):
        return None
    files: dict[tuple[str, str], str] = {}
    for key, value in data.items():
        split = split_key(key)
        if split is not None and isinstance(value, str):
            files[split] = value
    return Record(node, uid, files, str(meta["name"]))


def split_key(key: str) -> tuple[str, str] | None:
    """(request, driver) of a record key; None when it has not that form."""
    if not key.endswith(METADATA_SUFFIX):
        return None
    request, dot, driver = key.removesuffix(METADATA_SUFFIX).partition(".")
    if not dot or len(request) > LABEL_MAX or not _NAME.match(request) or "." in request:
        return None
    if len(driver) > NAME_MAX or not _NAME.match(driver):
        return None
    return request, driver


@dataclass(frozen=True, slots=True)
class Listing:
    """A node's relay's listing of the records labelled as its node's, sorted by trust.

    ``own``: its records (``read_record`` accepts them and their node is the relay's), by name;
    ``legacy``: names of its records of the earlier name form (``LEGACY_NAME_PATTERN``, annotated
    with its node), which it deletes; ``foreign``: every other listed ConfigMap, by name, with the
    node its annotation names ('' for none): never written, never deleted, reported.
    """

    own: dict[str, dict[str, Any]] = field(default_factory=dict)
    legacy: list[str] = field(default_factory=list)
    foreign: dict[str, str] = field(default_factory=dict)


def annotated_node(raw: Mapping[str, Any]) -> str:
    """The node a ConfigMap's ``kvdev.io/node`` annotation names ('' for none)."""
    meta = raw.get("metadata")
    notes = meta.get("annotations") if isinstance(meta, Mapping) else None
    node = notes.get(NODE_ANNOTATION) if isinstance(notes, Mapping) else None
    return node if isinstance(node, str) else ""


def sort_listed(node: str, listed: Iterable[Mapping[str, Any]]) -> Listing:
    """``listed`` (the ConfigMaps labelled as ``node``'s records) sorted by trust (``Listing``)."""
    sorted_ = Listing()
    for raw in listed:
        meta = raw.get("metadata")
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if not isinstance(name, str):
            continue
        record = read_record(raw)
        owner = annotated_node(raw)
        if record is not None and record.node == node:
            sorted_.own[name] = dict(raw)
        elif owner == node and is_record(raw) and _LEGACY_NAME.fullmatch(name):
            sorted_.legacy.append(name)
        else:
            sorted_.foreign[name] = owner
    return sorted_


def taken_message(name: str, node: str, owner: str, namespace: str) -> str:
    """What a relay says of a record name of its own that another node's record holds."""
    other = f"node {owner!r}" if owner else "no node (no kvdev.io/node annotation)"
    return (
        f"the name {namespace}/{name} of a record of node {node!r} is taken by a ConfigMap of "
        f"{other}: this claim is not relayed from node {node!r} while it exists "
        f"(it is not this node's to replace or delete; an administrator may delete it)"
    )


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
    "Claim",
    "DriverFile",
    "Listing",
    "Record",
    "annotated_node",
    "for_node",
    "is_record",
    "node_problem",
    "read_record",
    "records",
    "refusal",
    "sort_listed",
    "split_key",
    "taken_message",
]
