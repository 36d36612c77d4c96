"""A VMI's guest bundle as a ConfigMap, and whether the one stored must change (pure).

``render`` decides, from plain values, what the controller does for one VMI: create, update,
nothing (no write, so no resourceVersion churn), or refuse (a ConfigMap kvdev does not manage or
another object controls, a VMI without a UID, a bundle over a ConfigMap's size or over the keys
the agent reads: never written in part). The ConfigMap holds one KEP-5304 stream per claim
request (a node relay's record of the driver's own file where ``relayed.refusal`` allows it,
else rebuilt from the claim's status and the slices) and the GuestHints of the VMI spec; its
names, labels, keys and limits are ``kvdev.host.contract``'s (docs/reference/controller.md).
"""

from __future__ import annotations

import copy
import enum
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from pydantic import ValidationError

from kvdev.errors import Problem, SchemaError, Severity
from kvdev.host.allocation.taints import allocated_taints, taint_lines
from kvdev.host.contract import (
    CONFIGMAP_BYTES_MAX,
    CONFIGMAP_MAX_KEYS,
    DRIVER,
    HINTS_KEY,
    MANAGED_BY,
    NAME_MAX,
    RECONSTRUCTED,
    SOURCES_ANNOTATION,
    SOURCES_KEY,
    VMI_LABEL,
    configmap_name,
    key_fits,
    record_key,
    stream_key,
    vmi_label,
)
from kvdev.host.contract import CONTROLLER as MANAGER
from kvdev.host.controller.podclaims import pod_claims
from kvdev.host.controller.vmievents import Note, Reason
from kvdev.host.controller.vmihints import vmi_hints, what
from kvdev.host.k8s import Pod, ResourceClaim, ResourceSlice
from kvdev.host.k8s.core import ConfigMap
from kvdev.host.k8s.kubevirt import API_VERSION as VMI_API_VERSION
from kvdev.host.k8s.kubevirt import KIND as VMI_KIND
from kvdev.host.k8s.kubevirt import VirtualMachineInstance
from kvdev.host.publish.files import OnDisk, next_generation
from kvdev.host.publish.metadata import POD_CLAIM_NAME_ANNOTATION, build_metadata, claim_identity
from kvdev.host.publish.relayed import Claim, Record, for_node, refusal
from kvdev.schema.fields import base_request
from kvdev.schema.hints import GuestHints
from kvdev.schema.origins import index_json
from kvdev.schema.stream import DEVICE_METADATA, GUEST_HINTS, Writable, decode_stream, encode_stream

_LABEL_VALUE: Final = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?\Z")
_FINISHED: Final = frozenset({"Succeeded", "Failed"})


class Verb(enum.Enum):
    """What the controller does with the VMI's ConfigMap."""

    CREATE = "create"
    UPDATE = "update"
    NONE = "unchanged"
    REFUSE = "refused"


@dataclass(frozen=True, slots=True)
class Inputs:
    """Everything ``render`` reads for one VMI, as the caches (or the files) hold it.

    ``pods``: the virt-launcher pods the VMI owns; ``claims``: the claims of the VMI's
    namespace it may use, by name; ``slices``: ResourceSlices by driver; ``existing``: the
    ConfigMap named ``kvdev-<vmi>`` as stored (its JSON), if there is one (``partial``: without
    its data, which the caller reads before rendering); ``relayed``: the node relays' records of
    those claims (any node: only the VMI's node's are used).
    """

    vmi: VirtualMachineInstance
    pods: Sequence[Pod] = ()
    claims: Mapping[str, ResourceClaim] = field(default_factory=dict)
    slices: Mapping[str, Sequence[ResourceSlice]] = field(default_factory=dict)
    existing: Mapping[str, Any] | None = None
    relayed: Sequence[Record] = ()
    partial: bool = False  # ``existing`` lacks its data (the cache keeps none): read it again


@dataclass(frozen=True, slots=True)
class Rendered:
    """The decision for one VMI: the verb, the request body (create, update) and why."""

    vmi: str  # <namespace>/<name>
    namespace: str
    name: str  # the ConfigMap's name
    verb: Verb
    body: dict[str, Any] | None = None  # what to POST (create) or PUT (update)
    data: Mapping[str, str] = field(default_factory=dict)  # the data that should be stored
    problems: tuple[Problem, ...] = ()
    resource_version: str | None = None  # of the stored object an update replaces
    notes: tuple[Note, ...] = ()  # worth an Event on the VMI (waiting, refused)
    # the documents the render encoded into ``data`` itself, by key (the rebuilt streams and
    # the hints: not a relayed or a kept stream), for readers that would decode them again
    documents: Mapping[str, Writable] = field(default_factory=dict)

    @property
    def errors(self) -> tuple[Problem, ...]:
        """The problems that kept part of the bundle from being rendered."""
        return tuple(p for p in self.problems if p.severity is Severity.ERROR)

    @property
    def streams(self) -> int:
        """How many metadata streams the data holds."""
        return sum(1 for k in self.data if k not in (HINTS_KEY, SOURCES_KEY))


def uses_dra(vmi: VirtualMachineInstance) -> bool:
    """The VMI names DRA claims (``spec.resourceClaims``)."""
    return bool(vmi.spec.resource_claims)


def owner_reference(vmi: VirtualMachineInstance) -> dict[str, Any]:
    """The ownerReference that makes the VMI the ConfigMap's controller (GC follows it)."""
    return {
        "apiVersion": VMI_API_VERSION,
        "kind": VMI_KIND,
        "name": vmi.metadata.name,
        "uid": vmi.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def labels(vmi: VirtualMachineInstance) -> dict[str, str]:
    """The labels every ConfigMap of the controller carries."""
    return {MANAGED_BY: MANAGER, VMI_LABEL: vmi_label(vmi.metadata.name)}


# --------------------------------------------------------------------------- claims


@dataclass(frozen=True, slots=True)
class _Claim:
    """A VMI claim entry resolved to the ResourceClaim that serves it."""

    entry: str  # spec.resourceClaims[].name
    path: str  # spec.resourceClaims[i]
    claim_name: str | None  # None: not known yet (template claim not generated)
    template: bool


def _launcher(inputs: Inputs) -> list[Pod]:
    """The live virt-launcher pods, those on the VMI's node first when there are several."""
    live = [
        p
        for p in inputs.pods
        if p.metadata.deletion_timestamp is None
        and (p.status is None or p.status.phase not in _FINISHED)
    ]
    node = inputs.vmi.status.node_name if inputs.vmi.status else None
    on_node = [p for p in live if node is not None and p.spec.node_name == node]
    return on_node or live


def _note(reason: Reason, problem: Problem, subject: str) -> Note:
    """The Event's words for a problem: without the VMI (the Event is on it), with the field."""
    message = problem.message.removeprefix(f"{subject}: ")
    return Note(reason, f"{problem.path}: {message}" if problem.path else message)


def _resolve(
    inputs: Inputs, subject: str, problems: list[Problem], notes: list[Note]
) -> list[_Claim]:
    pods = _launcher(inputs)
    out = []
    for i, entry in enumerate(inputs.vmi.spec.resource_claims or []):
        path = f"spec.resourceClaims[{i}]"
        if entry.resource_claim_name is not None:
            out.append(_Claim(entry.name, path, entry.resource_claim_name, template=False))
            continue
        if entry.resource_claim_template_name is None:
            message = f"{subject}: neither resourceClaimName nor resourceClaimTemplateName is set"
            problems.append(Problem(message, path=path, severity=Severity.WARNING))
            continue
        names = {
            s.resource_claim_name
            for p in pods
            for s in (p.status.resource_claim_statuses if p.status else None) or []
            if s.name == entry.name and s.resource_claim_name is not None
        }
        if len(names) > 1:
            message = (
                f"{subject}: the virt-launcher pods name different claims for {entry.name!r} "
                f"({', '.join(sorted(names))}); its keys are kept as they are"
            )
            problems.append(Problem(message, path=path))
            out.append(_Claim(entry.name, path, None, template=True))
            continue
        name = next(iter(names), None)
        if name is None:
            message = (
                f"{subject}: waiting for the claim generated for {entry.name!r} "
                "(the virt-launcher pod's status.resourceClaimStatuses[])"
            )
            problems.append(Problem(message, path=path, severity=Severity.WARNING))
            notes.append(_note(Reason.CLAIM_PENDING, problems[-1], subject))
        out.append(_Claim(entry.name, path, name, template=True))
    found = pod_claims(inputs.vmi, pods)  # the claims KubeVirt makes itself
    out.extend(_Claim(c.entry, c.path, c.claim_name, template=False) for c in found)
    return out


def _old_uid(value: str) -> str | None:
    return OnDisk.read(value.encode()).uid


def _directory(claim: ResourceClaim) -> str:
    """The key's ``<dir>``: the pod's claim name of a generated claim, else the claim's."""
    ident = claim_identity(claim)
    return ident.pod_claim_name or ident.name


def _relayed_streams(
    claim: ResourceClaim, record: Record, problems: list[Problem], notes: list[Note]
) -> dict[str, str]:
    """The driver's own files of the claim, by key: the bytes as the node relayed them.

    Only a DeviceMetadata stream of this claim and request is copied (``relayed.refusal``):
    anything else is left out, with a warning and an Event, and the reconstruction stays. An
    empty file (the first state of a driver's deferred metadata) is left out without a word.
    """
    directory = _directory(claim)
    meta = claim.metadata
    whose = Claim(meta.namespace or "", meta.name or "", meta.uid or "")
    out = {}
    for (request, driver), text in sorted(record.files.items()):
        key = stream_key(directory, request, driver)
        if not key_fits(key):
            message = f"relayed key {key!r} is not a valid key (at most {NAME_MAX} characters)"
            problems.append(Problem(message, f"ConfigMap/{record.name}", severity=Severity.WARNING))
            continue
        if not text.strip(" \t\r\n"):  # deferred metadata: the driver has not written it yet
            continue
        why = refusal(text, whose, request, driver)
        if why is not None:
            message = (
                f"the file node {record.node} relayed for {key} is left out, the stream is the "
                f"reconstruction: {why}"
            )
            where = f"ConfigMap/{record.name}"
            problems.append(
                Problem(message, where, path=record_key(request, driver), severity=Severity.WARNING)
            )
            notes.append(Note(Reason.RELAYED_METADATA_REFUSED, message))
            continue
        out[key] = text
    return out


def _claim_streams(
    claim: ResourceClaim,
    inputs: Inputs,
    old: Mapping[str, str],
    documents: dict[str, Writable],
) -> dict[str, str]:
    """Every stream of the claim, by key, with its generation over the stored value.

    Each stream's document into ``documents`` (only when every stream was built).

    Raises:
        SchemaError: the claim's metadata cannot be built (names, a device in no slice).
    """
    ident = claim_identity(claim)
    directory = _directory(claim)
    allocation = claim.status.allocation if claim.status else None
    results = allocation.devices.results if allocation and allocation.devices else None
    drivers = list(dict.fromkeys(r.driver for r in results or []))
    out: dict[str, str] = {}
    built: dict[str, Writable] = {}
    problems: list[Problem] = []
    for driver in drivers:
        for item in build_metadata(claim, inputs.slices.get(driver, ()), driver):
            key = stream_key(directory, item.request, driver)
            if not key_fits(key):
                message = (
                    f"ConfigMap key {key!r} is not a valid key (at most {NAME_MAX} characters)"
                )
                problems.append(Problem(message, f"ResourceClaim/{ident.namespace}/{ident.name}"))
                continue
            before = old.get(key)
            document = next_generation(item.document, before.encode() if before else None)
            out[key] = encode_stream(document, DEVICE_METADATA).decode()
            built[key] = document
    if problems:
        raise SchemaError(problems)
    documents.update(built)
    return out


def _rebuilt(
    claim: ResourceClaim,
    inputs: Inputs,
    old: Mapping[str, str],
    problems: list[Problem],
    *,
    driven: bool,
    documents: dict[str, Writable],
) -> dict[str, str]:
    """The claim's reconstructed streams; when they cannot be built, the stored ones.

    With the driver's own files (``driven``) what could not be rebuilt is only a warning.
    The rebuilt streams' documents into ``documents`` (none for the stored ones).
    """
    try:
        return _claim_streams(claim, inputs, old, documents)
    except SchemaError as e:
        if driven:
            problems.extend(replace(p, severity=Severity.WARNING) for p in e.problems)
            return {}
        problems.extend(e.problems)
    uid = claim.metadata.uid
    kept = {k: v for k, v in old.items() if k != HINTS_KEY and _old_uid(v) == uid}
    if kept:
        claim_what = f"ResourceClaim/{claim.metadata.namespace}/{claim.metadata.name}"
        message = f"{claim_what}: its {len(kept)} stored key(s) are kept as they are"
        problems.append(Problem(message, severity=Severity.WARNING))
    return kept


def _node(inputs: Inputs) -> str | None:
    """The VMI's node: its status, else its live launcher pod's."""
    node = inputs.vmi.status.node_name if inputs.vmi.status else None
    if node:
        return node
    nodes = {p.spec.node_name for p in _launcher(inputs) if p.spec.node_name}
    return next(iter(nodes)) if len(nodes) == 1 else None


def _streams(
    inputs: Inputs,
    subject: str,
    old: Mapping[str, str],
    problems: list[Problem],
    notes: list[Note],
    sources: dict[str, str],
    documents: dict[str, Writable],
) -> dict[str, str]:
    namespace = inputs.vmi.metadata.namespace
    records = for_node(inputs.relayed, _node(inputs))
    data: dict[str, str] = {}
    for ref in _resolve(inputs, subject, problems, notes):
        if ref.claim_name is None:
            continue
        claim = inputs.claims.get(ref.claim_name)
        claim_what = f"ResourceClaim/{namespace}/{ref.claim_name}"
        if claim is None:
            message = f"{subject}: waiting for {claim_what} (not found)"
            problems.append(Problem(message, path=ref.path, severity=Severity.WARNING))
            notes.append(_note(Reason.CLAIM_PENDING, problems[-1], subject))
            continue
        status = claim.status
        if status is None or status.allocation is None:
            message = f"{subject}: waiting for {claim_what} to be allocated"
            problems.append(Problem(message, path=ref.path, severity=Severity.WARNING))
            notes.append(_note(Reason.CLAIM_PENDING, problems[-1], subject))
            continue
        annotation = (claim.metadata.annotations or {}).get(POD_CLAIM_NAME_ANNOTATION)
        if ref.template and annotation != ref.entry:
            message = (
                f"{claim_what}: annotation {POD_CLAIM_NAME_ANNOTATION} is {annotation!r}, "
                f"not the VMI's claim name {ref.entry!r}: the keys follow the claim"
            )
            problems.append(Problem(message, path=ref.path, severity=Severity.WARNING))
        record = records.get((claim.metadata.uid or "").lower())
        driven = _relayed_streams(claim, record, problems, notes) if record is not None else {}
        built: dict[str, Writable] = {}
        streams = _rebuilt(claim, inputs, old, problems, driven=bool(driven), documents=built)
        for key, value in {**streams, **driven}.items():
            if key in data:
                message = f"{claim_what}: key {key!r} is also another claim's; the first is kept"
                problems.append(Problem(message, path=ref.path))
                continue
            data[key] = value
            sources[key] = DRIVER if key in driven else RECONSTRUCTED
            if key not in driven and key in built:
                documents[key] = built[key]
    return data


# --------------------------------------------------------------------------- hints


def _hints_generation(document: GuestHints, old: str | None) -> GuestHints:
    """The hints' generation over the stored stream: kept when unchanged, else + 1."""
    generation, content = 0, None
    if old is not None:
        try:
            before = decode_stream(old, GUEST_HINTS).document
        except SchemaError:
            generation = OnDisk.read(old.encode()).generation  # whatever its first object says
        else:
            generation = before.metadata.generation
            content = _without_generation(before)
    if content is None or content != _without_generation(document):
        generation += 1
    meta = replace(document.metadata, generation=max(generation, 1))
    return replace(document, metadata=meta)


def _without_generation(document: Writable) -> dict[str, Any]:
    body = document.to_json_dict()
    body.get("metadata", {}).pop("generation", None)
    return body


# --------------------------------------------------------------------------- the object


def _refuse(
    base: dict[str, Any], message: str, path: str = "", reason: Reason | None = None
) -> Rendered:
    problem = Problem(message, path=path)
    notes = (Note(reason, message),) if reason is not None else ()
    return Rendered(**base, verb=Verb.REFUSE, problems=(problem,), notes=notes)


def _stored(existing: Mapping[str, Any], subject: str) -> ConfigMap:
    value = {"apiVersion": "v1", "kind": "ConfigMap", **existing}
    try:
        return ConfigMap.model_validate(value, strict=True)
    except ValidationError as e:
        problem = Problem(
            f"{subject}: the stored ConfigMap does not parse: {e.error_count()} errors"
        )
        raise SchemaError([problem]) from e


def _vmi_refusal(vmi: VirtualMachineInstance, name: str) -> tuple[str, str] | None:
    """Why no ConfigMap can be made for the VMI (message, field), if it cannot."""
    subject = what(vmi)
    if not vmi.metadata.namespace:
        return f"{subject}: metadata.namespace is missing", "metadata.namespace"
    if not vmi.metadata.uid:
        return f"{subject}: metadata.uid is missing: nothing to own the ConfigMap", "metadata.uid"
    if len(name) > NAME_MAX or not _LABEL_VALUE.match(vmi_label(vmi.metadata.name)):
        return f"{subject}: the name makes no ConfigMap name or label value", "metadata.name"
    return None


def _stored_refusal(
    stored: ConfigMap, subject: str, vmi: VirtualMachineInstance
) -> tuple[str, str, Reason] | None:
    """Why the stored ConfigMap must not be touched (message, field, Event), if it must not."""
    controllers = [o for o in stored.metadata.owner_references or [] if o.controller is True]
    if controllers and controllers[0].uid != vmi.metadata.uid:
        owner = controllers[0]
        namespace = stored.metadata.namespace or vmi.metadata.namespace or "?"
        message = (
            f"{subject} is controlled by {owner.kind}/{namespace}/{owner.name} (uid "
            f"{owner.uid}), not by {what(vmi)} (uid {vmi.metadata.uid}): left alone"
        )
        return message, "metadata.ownerReferences", Reason.CONFIGMAP_OTHER_OWNER
    if (stored.metadata.labels or {}).get(MANAGED_BY) != MANAGER:
        message = (
            f"{subject} exists and is not managed by {MANAGER} (label {MANAGED_BY}): left alone"
        )
        return message, f"metadata.labels[{MANAGED_BY!r}]", Reason.CONFIGMAP_NOT_OWNED
    if stored.immutable:
        message = f"{subject} is immutable: it cannot be updated"
        return message, "immutable", Reason.CONFIGMAP_REFUSED
    return None


def _precheck(inputs: Inputs, base: dict[str, Any]) -> Rendered | ConfigMap | None:
    """A decision made before rendering (refuse, leave alone), or the stored ConfigMap."""
    vmi = inputs.vmi
    refusal = _vmi_refusal(vmi, base["name"])
    if refusal is not None:
        return _refuse(base, *refusal)
    stored: ConfigMap | None = None
    if inputs.existing is not None:
        subject = f"ConfigMap/{base['namespace']}/{base['name']}"
        try:
            stored = _stored(inputs.existing, subject)
        except SchemaError as e:
            notes = tuple(_note(Reason.CONFIGMAP_REFUSED, p, "") for p in e.problems)
            return Rendered(**base, verb=Verb.REFUSE, problems=e.problems, notes=notes)
        stored_refusal = _stored_refusal(stored, subject, vmi)
        if stored_refusal is not None:
            return _refuse(base, *stored_refusal)
    finished = vmi.status is not None and vmi.status.phase in _FINISHED
    if vmi.metadata.deletion_timestamp is not None or finished:
        message = f"{what(vmi)}: finished or deleting; its ConfigMap is left as it is"
        note = Problem(message, severity=Severity.WARNING)
        return Rendered(**base, verb=Verb.NONE, problems=(note,))
    return stored


def sources_annotation(sources: Mapping[str, str]) -> str:
    """The ``kvdev.io/sources`` annotation: JSON, each stream's key -> driver | reconstructed."""
    return json.dumps(dict(sorted(sources.items())), separators=(",", ":"))


def stream_taints(inputs: Inputs) -> dict[tuple[str, str, str], tuple[str, ...]]:
    """The taints of the VMI's allocated devices, by (stream key, pool, device): for the guest.

    Each driver's slices are looked at on their own (the controller's are indexed per driver).
    """
    out = {}
    for claim in inputs.claims.values():
        for slices in inputs.slices.values():
            for d in allocated_taints([claim], slices):
                key = stream_key(_directory(claim), base_request(d.request), d.driver)
                out[(key, d.pool, d.name)] = taint_lines(d)
    return out


def _data(
    inputs: Inputs,
    old: Mapping[str, str],
    problems: list[Problem],
    notes: list[Note],
    sources: dict[str, str],
    documents: dict[str, Writable],
) -> dict[str, str]:
    """Every key the ConfigMap should hold, sorted; each stream's source into ``sources``.

    The documents the render encoded itself into ``documents``, by key.
    """
    subject = what(inputs.vmi)
    data = _streams(inputs, subject, old, problems, notes, sources, documents)
    hints, warnings = vmi_hints(inputs.vmi)
    problems.extend(warnings)
    notes.extend(_note(Reason.HINT_REFUSED, w, subject) for w in warnings)
    hints = _hints_generation(hints, old.get(HINTS_KEY))
    data[HINTS_KEY] = encode_stream(hints, GUEST_HINTS).decode()
    documents[HINTS_KEY] = hints
    taints = stream_taints(inputs)
    # only then: an agent older than the index never sees it
    if DRIVER in sources.values() or taints:
        data[SOURCES_KEY] = index_json(sources, taints)
    return {k: data[k] for k in sorted(data)}


def render(inputs: Inputs) -> Rendered:
    """What to do with the VMI's ConfigMap (see the module docstring)."""
    vmi = inputs.vmi
    namespace = vmi.metadata.namespace or ""
    name = configmap_name(vmi.metadata.name)
    base: dict[str, Any] = {
        "vmi": f"{namespace}/{vmi.metadata.name}",
        "namespace": namespace,
        "name": name,
    }
    if not (uses_dra(vmi) or pod_claims(vmi, _launcher(inputs))):
        return Rendered(**base, verb=Verb.NONE)
    checked = _precheck(inputs, base)
    if isinstance(checked, Rendered):
        return checked
    stored = checked
    old = dict(stored.data or {}) if stored is not None else {}
    problems: list[Problem] = []
    notes: list[Note] = []
    sources: dict[str, str] = {}
    documents: dict[str, Writable] = {}
    data = _data(inputs, old, problems, notes, sources, documents)
    annotations = {SOURCES_ANNOTATION: sources_annotation(sources)}
    size = sum(len(k.encode()) + len(v.encode()) for k, v in data.items())
    too_big = None
    if size > CONFIGMAP_BYTES_MAX:
        too_big = (
            f"{what(vmi)}: the bundle is {size} bytes, over a ConfigMap's {CONFIGMAP_BYTES_MAX}"
        )
    elif len(data) > CONFIGMAP_MAX_KEYS:
        too_big = (
            f"{what(vmi)}: the bundle is {len(data)} keys (one per claim request, and the hints), "
            f"over the {CONFIGMAP_MAX_KEYS} keys kvdev-agent reads from a ConfigMap volume: not "
            "written, the stored ConfigMap is left as it is (use fewer requests per VMI)"
        )
    if too_big is not None:
        problem = Problem(too_big)
        notes.append(_note(Reason.CONFIGMAP_REFUSED, problem, what(vmi)))
        return Rendered(
            **base,
            verb=Verb.REFUSE,
            data=data,
            problems=(*problems, problem),
            notes=tuple(notes),
        )
    result = {
        **base,
        "data": data,
        "problems": tuple(problems),
        "notes": tuple(notes),
        "documents": documents,
    }
    if inputs.existing is None or stored is None:
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": labels(vmi),
                "annotations": annotations,
                "ownerReferences": [owner_reference(vmi)],
            },
            "data": data,
        }
        return Rendered(**result, verb=Verb.CREATE, body=body)
    version = stored.metadata.resource_version
    return _update(inputs.existing, vmi, old, (result, annotations), version)


def _update(
    existing: Mapping[str, Any],
    vmi: VirtualMachineInstance,
    old: Mapping[str, str],
    wanted: tuple[dict[str, Any], Mapping[str, str]],
    version: str | None,
) -> Rendered:
    """Nothing when the stored object already says it all; else the stored object, updated."""
    result, annotations = wanted
    data = result["data"]
    meta = existing.get("metadata") or {}
    current_labels = dict(meta.get("labels") or {})
    current_annotations = dict(meta.get("annotations") or {})
    same = (
        old == data
        and all(current_annotations.get(k) == v for k, v in annotations.items())
        and not existing.get("binaryData")
        and all(current_labels.get(k) == v for k, v in labels(vmi).items())
        and list(meta.get("ownerReferences") or []) == [owner_reference(vmi)]
    )
    if same:
        return Rendered(**result, verb=Verb.NONE, resource_version=version)
    body = copy.deepcopy(dict(existing))
    body.update({"apiVersion": "v1", "kind": "ConfigMap", "data": data})
    body.pop("binaryData", None)
    body["metadata"] = {
        **copy.deepcopy(dict(meta)),
        "labels": {**current_labels, **labels(vmi)},
        "annotations": {**current_annotations, **annotations},
        "ownerReferences": [owner_reference(vmi)],
    }
    return Rendered(**result, verb=Verb.UPDATE, body=body, resource_version=version)


__all__ = [
    "Inputs",
    "Rendered",
    "Verb",
    "labels",
    "owner_reference",
    "render",
    "sources_annotation",
    "uses_dra",
]
