"""Extended resources backed by DRA (KEP-5004, gate ``DRAExtendedResource``): the special claim.

A Pod asking for ``example.com/gpu: 1`` in a container's resources gets its devices through
DRA when a DeviceClass maps that name. This module builds, for each such Pod, the one
ResourceClaim the scheduler would synthesize, and the ``status.extendedResourceClaimStatus``
the Pod would record. Pure: objects in, objects out.

The rules, read from upstream (kube-scheduler's dynamicresources plugin,
``extendeddynamicresources.go`` ``createRequestsAndMappings``; the device class cache,
``k8s.io/dynamic-resource-allocation/deviceclass/extendedresourcecache``; KEP-5004's README
and the ``PodExtendedResourceClaimStatus`` / ``ContainerExtendedResourceRequest`` API types):

* Which class. Every DeviceClass maps its implicit name
  ``deviceclass.resource.kubernetes.io/<class>``; a class with ``spec.extendedResourceName``
  also maps that name. When several classes give the same explicit name the newest
  ``metadata.creationTimestamp`` wins, the alphabetically lower name breaking ties (upstream's
  ``betterDeviceClass``). A class without a creationTimestamp counts as the oldest (kvdev's
  choice: input files often omit it). The implicit name always belongs to its own class.
* Which resources. A name no class maps is left to the node's ordinary extended resources
  and ignored here, without error. So is a mapped name the Node lists in
  ``status.allocatable`` (a device plugin provides it there; upstream then asks DRA for
  nothing). Only whole, positive quantities count (upstream skips a quantity whose
  ``AsInt64`` fails, and zero).
* Requests and limits. kvdev reads manifests before the API server's defaulting, so a
  container's effective requests are its limits overlaid with its requests (defaulting copies
  a missing request from the limit; for extended resources the two must be equal).
* Containers. Init containers come first, then containers, and ``i`` is the index in that
  list (ephemeral containers never count). Request ``container-<i>-request-<j>`` asks
  ``ExactCount`` devices of the chosen class, ``count`` the quantity; ``j`` is the resource's
  index among the container's sorted effective request names (cpu and memory included).
* Init containers reuse devices, per resource: a plain init container (not a sidecar with
  ``restartPolicy: Always``) first maps onto the requests of the long-lived containers
  (sidecars and containers) at or after its own index, in index order, until their counts
  cover its quantity; only the shortfall becomes its own request. Of the plain init
  containers' own requests only the largest is kept (the first of equal counts), and the
  others' mappings point to it: init containers run one at a time.
* The claim. One per Pod, in the Pod's namespace (``default`` when unset), its requests
  sorted by name. Upstream creates it with ``generateName: <pod>-extended-resources-``; kvdev
  makes the name deterministic: the base cut to 58 characters (as the API server's name
  generator does) plus five characters of a hash of ``<namespace>/<pod>`` in the generator's
  alphabet. The annotation ``resource.kubernetes.io/extended-resource-claim: "true"`` and the
  Pod owner reference upstream sets are not kept (kvdev's ObjectMeta has neither field).
* The Pod's status records ``extendedResourceClaimStatus: {resourceClaimName,
  requestMappings: [{containerName, resourceName, requestName}]}``; ``status_for`` builds it.

Which Pods: ``cluster_state`` decides (a Pod bound to another node, or one whose status
already names its special claim, is skipped there).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction

from kvdev.host.k8s import DeviceClass, Pod, ResourceClaim, parse_quantity
from kvdev.host.k8s.core import (
    Container,
    ContainerExtendedResourceRequest,
    PodExtendedResourceClaimStatus,
)

IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"  # ResourceDeviceClassPrefix
NAME_SUFFIX = "-extended-resources-"
_MAX_GENERATED_BASE = 58  # 63 - 5: k8s.io/apiserver names.SimpleNameGenerator
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery util/rand
_INT64_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class SpecialClaim:
    """A Pod's synthesized claim and the status the Pod would record for it."""

    pod: Pod
    claim: ResourceClaim
    status: PodExtendedResourceClaimStatus


@dataclass(slots=True)
class _Request:
    name: str
    count: int


def _created(cls: DeviceClass) -> datetime:
    stamp = (cls.metadata.model_extra or {}).get("creationTimestamp")
    if isinstance(stamp, str):
        try:
            parsed = datetime.fromisoformat(stamp)
        except ValueError:
            parsed = None
        if parsed is not None and parsed.tzinfo is not None:
            return parsed
    return datetime.min.replace(tzinfo=UTC)


def class_mapping(classes: Iterable[DeviceClass]) -> dict[str, str]:
    """Extended resource name -> DeviceClass name, upstream's arbitration (module docstring)."""
    explicit: dict[str, DeviceClass] = {}
    implicit: dict[str, str] = {}
    for cls in classes:
        implicit[IMPLICIT_PREFIX + cls.metadata.name] = cls.metadata.name
        name = cls.spec.extended_resource_name
        if not name:
            continue
        best = explicit.get(name)
        if best is None or _better(cls, best):
            explicit[name] = cls
    mapping = {name: cls.metadata.name for name, cls in explicit.items()}
    mapping.update(implicit)
    return mapping


def _better(a: DeviceClass, b: DeviceClass) -> bool:
    ta, tb = _created(a), _created(b)
    if ta != tb:
        return ta > tb
    return a.metadata.name < b.metadata.name


def _effective_requests(container: Container) -> dict[str, str]:
    res = container.resources
    if res is None:
        return {}
    return {**(res.limits or {}), **(res.requests or {})}


def _whole(text: str) -> int | None:
    value: Fraction = parse_quantity(text)
    if value.denominator != 1 or not 0 < value <= _INT64_MAX:
        return None
    return int(value)


def _own_request(
    index: int,
    container: Container,
    resource: str,
    reusable: Sequence[_Request | None],
) -> tuple[_Request | None, list[tuple[str, str]]]:
    """The container's request for ``resource`` (None if reuse covers it) and its mappings."""
    requests = _effective_requests(container)
    if resource not in requests:
        return None, []
    wanted = _whole(requests[resource])
    if wanted is None:
        return None, []
    mappings: list[tuple[str, str]] = []
    covered = 0
    for r in reusable:
        if r is None:
            continue
        covered += r.count
        mappings.append((container.name, r.name))
        if covered >= wanted:
            return None, mappings
    name = f"container-{index}-request-{sorted(requests).index(resource)}"
    mappings.append((container.name, name))
    return _Request(name, wanted - covered), mappings


def _requests_for(
    containers: Sequence[Container], n_init: int, resource: str
) -> tuple[list[_Request], list[tuple[str, str]]]:
    long_lived = [
        i for i, c in enumerate(containers) if i >= n_init or c.restart_policy == "Always"
    ]
    short_lived = [i for i in range(len(containers)) if i not in long_lived]
    by_index: list[_Request | None] = [None] * len(containers)
    mappings: list[tuple[str, str]] = []
    for i in long_lived:
        req, maps = _own_request(i, containers[i], resource, ())
        by_index[i] = req
        mappings += maps
    biggest: _Request | None = None
    short_names: set[str] = set()
    short_maps: list[tuple[str, str]] = []
    for i in short_lived:
        req, maps = _own_request(i, containers[i], resource, by_index[i:])
        if req is not None:
            short_names.add(req.name)
            if biggest is None or biggest.count < req.count:
                biggest = req
        short_maps += maps
    if biggest is not None:
        short_names.discard(biggest.name)
        short_maps = [(c, biggest.name if r in short_names else r) for c, r in short_maps]
    out = [r for r in by_index if r is not None]
    if biggest is not None:
        out.append(biggest)
    return out, mappings + short_maps


def claim_name(pod: Pod) -> str:
    """``<pod>-extended-resources-<5 chars>``, deterministic (module docstring)."""
    base = (pod.metadata.name + NAME_SUFFIX)[:_MAX_GENERATED_BASE]
    key = f"{pod.metadata.namespace or 'default'}/{pod.metadata.name}".encode()
    digest = int.from_bytes(hashlib.sha256(key).digest()[:8], "big")
    suffix = ""
    for _ in range(5):
        digest, pick = divmod(digest, len(_ALPHABET))
        suffix += _ALPHABET[pick]
    return base + suffix


def special_claim(
    pod: Pod, mapping: dict[str, str], node_allocatable: Collection[str] = ()
) -> SpecialClaim | None:
    """The Pod's special claim, or None when it asks for no DRA-backed extended resource."""
    containers = [*(pod.spec.init_containers or []), *pod.spec.containers]
    n_init = len(pod.spec.init_containers or [])
    resources = sorted(
        {
            name
            for c in containers
            for name, qty in _effective_requests(c).items()
            if name in mapping and name not in node_allocatable and _whole(qty) is not None
        }
    )
    requests: list[dict[str, object]] = []
    mappings: list[ContainerExtendedResourceRequest] = []
    for resource in resources:
        reqs, maps = _requests_for(containers, n_init, resource)
        requests += [
            {
                "name": r.name,
                "exactly": {
                    "deviceClassName": mapping[resource],
                    "allocationMode": "ExactCount",
                    "count": r.count,
                },
            }
            for r in reqs
        ]
        mappings += [
            ContainerExtendedResourceRequest.model_validate(
                {"containerName": c, "resourceName": resource, "requestName": r}
            )
            for c, r in maps
        ]
    if not requests:
        return None
    requests.sort(key=lambda r: str(r["name"]))
    name = claim_name(pod)
    claim = ResourceClaim.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": pod.metadata.namespace or "default"},
            "spec": {"devices": {"requests": requests}},
        }
    )
    status = PodExtendedResourceClaimStatus.model_validate(
        {"requestMappings": [m.to_json_dict() for m in mappings], "resourceClaimName": name}
    )
    return SpecialClaim(pod, claim, status)


def synthesize(
    pods: Iterable[Pod], classes: Iterable[DeviceClass], node_allocatable: Collection[str] = ()
) -> list[SpecialClaim]:
    """One special claim per Pod that asks for a DRA-backed extended resource, in Pod order."""
    mapping = class_mapping(classes)
    out = []
    for pod in pods:
        special = special_claim(pod, mapping, node_allocatable)
        if special is not None:
            out.append(special)
    return out


def status_for(special: SpecialClaim) -> dict[str, object]:
    """The Pod ``status`` fragment recording the claim, as the API serializes it."""
    return {"extendedResourceClaimStatus": special.status.to_json_dict()}
