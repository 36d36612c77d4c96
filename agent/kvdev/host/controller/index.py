"""The objects the controller knows, and which VMIs a change of one of them concerns (pure).

Owns the six caches (VMIs, virt-launcher pods, ResourceClaims, ResourceSlices, the
controller's own ConfigMaps, the node relays' records), each keyed by ``(namespace, name)``
(slices: ``("", name)``), holding the parsed model, and of a ConfigMap the JSON it came from
(the models of the other kinds are all a sync reads of them: their JSON is not kept); the
parsing of API JSON into kvdev's models (``parse``: list items come without apiVersion and
kind), which keeps of a ConfigMap only what a sync reads (``slim``); and the join:
``affected`` VMIs of a change (a VMI itself; the VMI controlling a pod, in the pod's
namespace; every VMI using a claim, directly or through a pod's
``status.resourceClaimStatuses``; every VMI with a device in a slice's pool; the VMI a
ConfigMap's owner, or the VMI its ``kvdev.io/vmi`` label names; every VMI using the claim a node
relay's record names, by the claim's UID) and ``inputs`` for ``render`` (each driver's slices
as ``IndexedSlices``, kept until one of them changes: a render looks its devices up). Relay
records (``publish/relayed``) are ConfigMaps of their own kind (``Kind.RECORD``), listed and
watched in the relay's namespace (``relay_namespace``) only: a ConfigMap with the relay's label
anywhere else is nobody's record, and never even read.

What a cached ConfigMap keeps (``slim``): its metadata without ``managedFields``; a record's data
(the files a sync copies); the data of the controller's own ConfigMap only where it has the
shape the controller writes (a VMI its controller owner, the name that VMI's) - any other
ConfigMap with the controller's label is cached without its data (``Stored.partial``: a sync
that needs it reads it again). The models hold metadata only: no byte of data is held twice.

The joins (VMI -> its claim names, claim -> its VMIs, driver and pool -> allocated claims,
driver -> slices) are kept as objects change, so no event looks at every cached VMI. An object
that stays the same (same ``resourceVersion``) concerns nobody, so a re-list of an unchanged
cluster queues nothing. Not thread-safe: the live controller holds a lock around it.
Pure: no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from pydantic import ValidationError

from kvdev.errors import Problem, SchemaError
from kvdev.host.contract import VMI_LABEL, configmap_name
from kvdev.host.controller.podclaims import claim_names
from kvdev.host.controller.render import Inputs, uses_dra
from kvdev.host.k8s import Pod, ResourceClaim, ResourceSlice
from kvdev.host.k8s.core import ConfigMap
from kvdev.host.k8s.kubevirt import API_VERSION as VMI_API_VERSION
from kvdev.host.k8s.kubevirt import KIND as VMI_KIND
from kvdev.host.k8s.kubevirt import VirtualMachineInstance
from kvdev.host.k8s.model import Document, forget_unknown, problems_from
from kvdev.host.k8s.resource import API_VERSION as RESOURCE_API_VERSION
from kvdev.host.k8s.resource import IndexedSlices
from kvdev.host.publish.relayed import Record, read_record

Key = tuple[str, str]
"""``(namespace, name)``; cluster-scoped objects have namespace ``""``."""


class Kind(enum.Enum):
    """The kinds the controller watches, with the apiVersion and kind their JSON carries.

    ``CONFIGMAP`` and ``RECORD`` are both core/v1 ConfigMaps: the controller's own (every
    namespace) and the node relays' records (the relay's namespace only).
    """

    VMI = (VMI_API_VERSION, VMI_KIND, "")
    POD = ("v1", "Pod", "")
    CLAIM = (RESOURCE_API_VERSION, "ResourceClaim", "")
    SLICE = (RESOURCE_API_VERSION, "ResourceSlice", "")
    CONFIGMAP = ("v1", "ConfigMap", "own")
    RECORD = ("v1", "ConfigMap", "record")

    @property
    def api_version(self) -> str:
        """The object's ``apiVersion``."""
        return self.value[0]

    @property
    def kind(self) -> str:
        """The object's ``kind``."""
        return self.value[1]


MODELS: Final[Mapping[Kind, type[Document]]] = {
    Kind.VMI: VirtualMachineInstance,
    Kind.POD: Pod,
    Kind.CLAIM: ResourceClaim,
    Kind.SLICE: ResourceSlice,
    Kind.CONFIGMAP: ConfigMap,
    Kind.RECORD: ConfigMap,
}
CONFIGMAPS: Final = (Kind.CONFIGMAP, Kind.RECORD)
_NO_JSON: Final[Mapping[str, Any]] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Stored:
    """One cached object: its model, and a ConfigMap's JSON (``slim``; other kinds: empty).

    ``partial``: the JSON lacks data a sync reads (a ConfigMap not of the controller's shape).
    """

    model: Any  # the kind's model (see MODELS)
    raw: Mapping[str, Any] = field(default_factory=lambda: _NO_JSON)  # shared, read-only
    partial: bool = False

    @property
    def key(self) -> Key:
        """``(namespace, name)``."""
        meta = self.model.metadata
        return (meta.namespace or "", meta.name)

    @property
    def version(self) -> str | None:
        """``metadata.resourceVersion``."""
        version: str | None = self.model.metadata.resource_version
        return version


def slim(kind: Kind, raw: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """What the cache keeps of a ConfigMap's JSON, and whether data a sync reads was left out.

    Metadata without ``managedFields``, ``immutable``, and the data (``data``, ``binaryData``)
    of a record or of a ConfigMap of the controller's shape (its controller owner a VMI, its
    name that VMI's ``configmap_name``); any other ConfigMap's data is left out.
    """
    found = raw.get("metadata")
    meta: dict[str, Any] = (
        {k: v for k, v in found.items() if k != "managedFields"}
        if isinstance(found, Mapping)
        else {}
    )
    out: dict[str, Any] = {"metadata": meta if isinstance(found, Mapping) else found}
    if "immutable" in raw:
        out["immutable"] = raw["immutable"]
    data_keys = [k for k in ("data", "binaryData") if k in raw]
    if kind is Kind.RECORD or _shaped(meta):
        out.update({k: raw[k] for k in data_keys})
        return out, False
    return out, bool(data_keys)


def _shaped(meta: Mapping[str, Any]) -> bool:
    """The ConfigMap is as the controller writes one: a VMI controls it, and has its name."""
    owners = meta.get("ownerReferences")
    if not isinstance(owners, list):
        return False
    controllers = [o for o in owners if isinstance(o, Mapping) and o.get("controller") is True]
    if len(controllers) != 1:
        return False
    owner = controllers[0]
    name = owner.get("name")
    return (
        owner.get("kind") == VMI_KIND
        and owner.get("apiVersion") == VMI_API_VERSION
        and isinstance(name, str)
        and meta.get("name") == configmap_name(name)
    )


def parse(kind: Kind, raw: Mapping[str, Any], source: str = "apiserver") -> Stored:
    """Validate API JSON as ``kind`` (apiVersion and kind filled in when absent).

    A ConfigMap keeps only what ``slim`` keeps; its model, metadata alone. Another kind keeps
    its model only (what a sync reads of it). No model keeps its unknown fields
    (``forget_unknown``: a pod's containers, a VMI's status, ``managedFields``).

    Raises:
        SchemaError: the object breaks kvdev's model (the object and field are named).
    """
    partial = False
    if kind in CONFIGMAPS:
        kept, partial = slim(kind, raw)
        checked = {k: v for k, v in kept.items() if k not in ("data", "binaryData")}
        stored = _validated(kind, checked, source)
        return Stored(stored, kept, partial)
    return Stored(_validated(kind, raw, source))


def _validated(kind: Kind, raw: Mapping[str, Any], source: str) -> Any:  # noqa: ANN401 - MODELS
    value = {"apiVersion": kind.api_version, "kind": kind.kind, **raw}
    try:
        model = MODELS[kind].model_validate(value, strict=True)
        forget_unknown(model)  # what kvdev's models do not declare, no sync reads
    except ValidationError as e:
        meta = raw.get("metadata")
        name = meta.get("name", "?") if isinstance(meta, Mapping) else "?"
        namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
        subject = f"{kind.kind}/{namespace}/{name}" if namespace else f"{kind.kind}/{name}"
        raise SchemaError(
            [
                Problem(f"{subject}: {p.message}", p.source, None, p.path)
                for p in problems_from(e, source=source, index=None)
            ]
        ) from e
    return model


class Index:
    """The caches, and the join from a changed object to the VMIs it concerns."""

    def __init__(self, relay_namespace: str | None = None) -> None:
        self.relay_namespace = relay_namespace
        self._objects: dict[Kind, dict[Key, Stored]] = {kind: {} for kind in Kind}
        self._claim_by_uid: dict[str, Key] = {}  # claim UID -> the claim's key
        self._records_of: dict[str, dict[Key, Record]] = {}  # claim UID -> relay records
        # The joins, kept as objects change, so that no event scans every VMI:
        self._pods_of: dict[Key, set[Key]] = {}  # (namespace, VMI uid) -> its pods' keys
        self._claims_of: dict[Key, set[str]] = {}  # VMI -> the claim names it uses
        self._users_of: dict[Key, set[Key]] = {}  # (namespace, claim name) -> its VMIs
        self._claims_in: dict[tuple[str, str], set[Key]] = {}  # (driver, pool) -> claims
        self._slices_of: dict[str, dict[Key, None]] = {}  # driver -> its slices, in order
        # driver -> its slices with their devices indexed, made at the first render after a
        # change of one of them (renders look devices up, never scan the slices)
        self._indexed: dict[str, IndexedSlices] = {}
        self.synced: set[Kind] = set()

    # ------------------------------------------------------------------ changes

    def upsert(self, kind: Kind, stored: Stored) -> set[Key]:
        """Add or replace an object; the VMIs concerned (before and after the change)."""
        objects = self._objects[kind]
        before = objects.get(stored.key)
        if before is not None and before.version is not None and before.version == stored.version:
            return set()
        touched = self._concerns(kind, before) if before is not None else set()
        objects[stored.key] = stored
        self._relink(kind, before, stored)
        return touched | self._concerns(kind, stored)

    def remove(self, kind: Kind, key: Key) -> set[Key]:
        """Forget an object; the VMIs it concerned."""
        before = self._objects[kind].pop(key, None)
        if before is None:
            return set()
        touched = self._concerns(kind, before)
        self._relink(kind, before, None)
        return touched

    def replace(self, kind: Kind, items: Iterable[Stored]) -> set[Key]:
        """A fresh list: what is gone is removed, what changed replaced."""
        fresh = {s.key: s for s in items}
        touched: set[Key] = set()
        for key in [k for k in self._objects[kind] if k not in fresh]:
            touched |= self.remove(kind, key)
        for stored in fresh.values():
            touched |= self.upsert(kind, stored)
        self.synced.add(kind)
        return touched

    # ------------------------------------------------------------------ reads

    def get(self, kind: Kind, key: Key) -> Stored | None:
        """The cached object, if any."""
        return self._objects[kind].get(key)

    def count(self, kind: Kind) -> int:
        """How many objects of ``kind`` are cached."""
        return len(self._objects[kind])

    def vmis(self) -> list[Key]:
        """Every cached VMI that uses DRA, sorted."""
        return sorted(
            k
            for k, s in self._objects[Kind.VMI].items()
            if uses_dra(s.model) or self._claims_of.get(k)
        )

    def inputs(self, key: Key) -> Inputs | None:
        """What ``render`` needs for the VMI ``key`` (None: no such VMI)."""
        found = self._objects[Kind.VMI].get(key)
        if found is None:
            return None
        vmi: VirtualMachineInstance = found.model
        namespace = key[0]
        pods = self._pods(key, vmi)
        claims: dict[str, ResourceClaim] = {}
        for name in self._claim_names(vmi, pods):
            claim = self._objects[Kind.CLAIM].get((namespace, name))
            if claim is not None:
                claims[name] = claim.model
        drivers = {r.driver for c in claims.values() for r in _results(c)}
        existing = self._objects[Kind.CONFIGMAP].get((namespace, configmap_name(key[1])))
        relayed = [
            r
            for c in claims.values()
            for _, r in sorted(self._records_of.get((c.metadata.uid or "").lower(), {}).items())
        ]
        return Inputs(
            vmi=vmi,
            pods=tuple(pods),
            claims=claims,
            slices={d: self._indexed_slices(d) for d in sorted(drivers)},
            existing=existing.raw if existing is not None else None,
            relayed=tuple(relayed),
            partial=existing is not None and existing.partial,
        )

    def _indexed_slices(self, driver: str) -> IndexedSlices:
        """The driver's slices, in order, indexed (kept until one of them changes)."""
        found = self._indexed.get(driver)
        if found is None:
            slices = self._objects[Kind.SLICE]
            models: list[ResourceSlice] = [slices[k].model for k in self._slices_of.get(driver, {})]
            found = self._indexed[driver] = IndexedSlices(models)
        return found

    def record(self, stored: Stored) -> Record | None:
        """The relay record a cached ``Kind.RECORD`` is (only in the relay's namespace)."""
        if self.relay_namespace is None or stored.key[0] != self.relay_namespace:
            return None
        return read_record(stored.raw)

    # ------------------------------------------------------------------ the join

    def _concerns(self, kind: Kind, stored: Stored) -> set[Key]:
        namespace, name = stored.key
        if kind is Kind.VMI:
            return (
                {stored.key} if uses_dra(stored.model) or self._claims_of.get(stored.key) else set()
            )
        if kind is Kind.POD:
            return {(namespace, o.name) for o in _vmi_owners(stored.model)}
        if kind is Kind.RECORD:
            record = self.record(stored)
            claim = self._claim_by_uid.get(record.claim_uid) if record is not None else None
            return set(self._users_of.get(claim, ())) if claim is not None else set()
        if kind is Kind.CONFIGMAP:
            # the owner's name: the label holds a cut name for a VMI name longer than 63
            owners = {(namespace, o.name) for o in _vmi_owners(stored.model)}
            vmi = (stored.model.metadata.labels or {}).get(VMI_LABEL)
            return owners or ({(namespace, vmi)} if vmi else set())
        if kind is Kind.CLAIM:
            return set(self._users_of.get((namespace, name), ()))
        spec = stored.model.spec
        out: set[Key] = set()
        for claim in self._claims_in.get((spec.driver, spec.pool.name), ()):
            out |= self._users_of.get(claim, set())
        return out

    # ------------------------------------------------------------------ the joins kept

    def _relink(self, kind: Kind, before: Stored | None, after: Stored | None) -> None:
        """Keep the joins true after ``before`` became ``after`` (None: absent)."""
        either = after or before
        if either is None:
            return
        if kind is Kind.POD:
            self._unlink_pod(before)
            if after is not None:
                self._link_pod(after)
            owners = {
                (s.key[0], o.name) for s in (before, after) if s for o in _vmi_owners(s.model)
            }
            for key in owners:
                self._link_vmi(key)
        elif kind is Kind.VMI:
            self._link_vmi(either.key)
        elif kind is Kind.CLAIM:
            self._pool_claims(before, add=False)
            self._pool_claims(after, add=True)
            self._claim_uid(before, after)
        elif kind is Kind.RECORD:
            self._relink_record(before, after)
        elif kind is Kind.SLICE:
            self._driver_slices(before, after)

    def _claim_uid(self, before: Stored | None, after: Stored | None) -> None:
        if before is not None:
            self._claim_by_uid.pop((before.model.metadata.uid or "").lower(), None)
        if after is not None and after.model.metadata.uid:
            self._claim_by_uid[after.model.metadata.uid.lower()] = after.key

    def _relink_record(self, before: Stored | None, after: Stored | None) -> None:
        old = self.record(before) if before is not None else None
        if old is not None and before is not None:
            records = self._records_of.get(old.claim_uid, {})
            records.pop(before.key, None)
            if not records:
                self._records_of.pop(old.claim_uid, None)
        new = self.record(after) if after is not None else None
        if new is not None and after is not None:
            self._records_of.setdefault(new.claim_uid, {})[after.key] = new

    def _pool_claims(self, claim: Stored | None, *, add: bool) -> None:
        if claim is None:
            return
        for r in _results(claim.model):
            pool = (r.driver, r.pool)
            claims = self._claims_in.setdefault(pool, set())
            if add:
                claims.add(claim.key)
                continue
            claims.discard(claim.key)
            if not claims:
                del self._claims_in[pool]

    def _driver_slices(self, before: Stored | None, after: Stored | None) -> None:
        new: str | None = after.model.spec.driver if after is not None else None
        for stored in (before, after):
            if stored is not None:
                self._indexed.pop(stored.model.spec.driver, None)
        if before is not None:
            old: str = before.model.spec.driver
            if old != new:
                self._slices_of[old].pop(before.key, None)
                if not self._slices_of[old]:
                    del self._slices_of[old]
        if after is not None and new is not None:
            self._slices_of.setdefault(new, {})[after.key] = None

    def _link_vmi(self, key: Key) -> None:
        """The claim names VMI ``key`` uses, now (its spec and its pods' claim statuses)."""
        for name in self._claims_of.pop(key, set()):
            users = self._users_of.get((key[0], name))
            if users is not None:
                users.discard(key)
                if not users:
                    del self._users_of[(key[0], name)]
        found = self._objects[Kind.VMI].get(key)
        if found is None:
            return
        names = self._claim_names(found.model, self._pods(key, found.model))
        if names:
            self._claims_of[key] = names
            for name in names:
                self._users_of.setdefault((key[0], name), set()).add(key)

    def _pods(self, key: Key, vmi: VirtualMachineInstance) -> list[Pod]:
        """The pods of ``key``'s namespace that ``vmi`` controls."""
        keys = sorted(self._pods_of.get((key[0], vmi.metadata.uid or ""), ()))
        return [self._objects[Kind.POD][k].model for k in keys if k in self._objects[Kind.POD]]

    @staticmethod
    def _claim_names(vmi: VirtualMachineInstance, pods: Sequence[Pod]) -> set[str]:
        names = {e.resource_claim_name for e in vmi.spec.resource_claims or []}
        names.discard(None)
        return {n for n in names if n is not None} | claim_names(pods)

    def _link_pod(self, stored: Stored) -> None:
        for owner in _vmi_owners(stored.model):
            self._pods_of.setdefault((stored.key[0], owner.uid), set()).add(stored.key)

    def _unlink_pod(self, stored: Stored | None) -> None:
        if stored is None:
            return
        for owner in _vmi_owners(stored.model):
            link = (stored.key[0], owner.uid)
            keys = self._pods_of.get(link)
            if keys is not None:
                keys.discard(stored.key)
                if not keys:
                    del self._pods_of[link]


def _vmi_owners(obj: Pod | ConfigMap) -> list[Any]:
    """The VMI that controls ``obj`` (its ``controller: true`` owner reference), if any.

    As KubeVirt and Kubernetes read ownership (``metav1.GetControllerOf``): only the controller
    reference counts, and owner references never cross namespaces, so a pod is joined only to
    a VMI of its own namespace (``_link_pod`` keys by the pod's namespace and the owner's uid).
    A pod elsewhere naming a VMI's uid, or a non-controller reference, concerns no VMI.
    """
    return [
        o
        for o in obj.metadata.owner_references or []
        if o.kind == VMI_KIND and o.api_version == VMI_API_VERSION and o.controller is True
    ][:1]


def _results(claim: ResourceClaim) -> list[Any]:
    allocation = claim.status.allocation if claim.status else None
    if allocation is None or allocation.devices is None:
        return []
    return list(allocation.devices.results or [])


__all__ = ["CONFIGMAPS", "MODELS", "Index", "Key", "Kind", "Stored", "parse", "slim"]
