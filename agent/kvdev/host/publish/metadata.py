"""Build the KEP-5304 ``DeviceMetadata`` a driver publishes for an allocated ResourceClaim.

Owns: which allocation results belong to a driver, grouping them per (claim, base request),
looking each device up in the ResourceSlices, deriving the standard attributes
(``resource.kubernetes.io/pciBusID``, ``pcieRoot``, ``numaNode``) from driver-specific ones when
the slice lacks them, network data (explicit, else the claim's ``status.devices[]``),
``podClaimName`` from the claim annotation, and the name checks every later path relies on.

Pure: data in, data out. It must not read or write files (``kvdev.host.publish.writer`` does).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from kvdev.errors import Problem, SchemaError
from kvdev.host.k8s import ResourceClaim, ResourceSlice
from kvdev.host.k8s.claim import DeviceRequestAllocationResult
from kvdev.host.k8s.device import DeviceAttribute, NetworkDeviceData
from kvdev.host.k8s.resource import Device as SliceDevice
from kvdev.host.k8s.resource import IndexedSlices
from kvdev.schema.fields import (
    base_request,
    check_dns_label,
    check_dns_subdomain,
    check_driver_name,
    lookup_attribute,
    normalize_pci_address,
)
from kvdev.schema.metadata import (
    ATTRIBUTE_VALUES_MAX,
    ATTRIBUTES_MAX,
    V1BETA1,
    Device,
    DeviceMetadata,
    ObjectMeta,
)
from kvdev.schema.metadata import KIND as METADATA_KIND

POD_CLAIM_NAME_ANNOTATION: Final = "resource.kubernetes.io/pod-claim-name"
# ``<namespace>_<name>`` is a directory name, and ``.<namespace>_<name>.lock`` a file name next
# to it: both must fit NAME_MAX (255 bytes).
CLAIM_DIR_MAX: Final = 255 - len("..lock")
STANDARD: Final = "resource.kubernetes.io"
PCI_BUS_ID: Final = f"{STANDARD}/pciBusID"
PCIE_ROOT: Final = f"{STANDARD}/pcieRoot"
NUMA_NODE: Final = f"{STANDARD}/numaNode"

# Driver-specific attributes a standard one can be derived from, most specific first. An
# unqualified name is in the driver's own domain (NVIDIA publishes ``pcieBusID`` unqualified,
# so under ``gpu.nvidia.com``); dranet qualifies its own (``dra.net/pciAddress``).
DERIVED_FROM: Final[Mapping[str, tuple[str, ...]]] = {
    PCI_BUS_ID: ("dra.net/pciAddress", "gpu.nvidia.com/pcieBusID", "pcieBusID", "pciAddress"),
    PCIE_ROOT: ("gpu.nvidia.com/pcieRoot", "pcieRoot"),
    NUMA_NODE: ("dra.net/numaNode", "gpu.nvidia.com/numa", "numaNode", "numa"),
}

NetworkData = Mapping[tuple[str, str, str], NetworkDeviceData]
"""Network data per (driver, pool, device)."""

_UID: Final = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z"
)
_PCIE_ROOT: Final = re.compile(r"pci[0-9a-f]{4,8}:[0-9a-f]{2}\Z")


@dataclass(frozen=True, slots=True)
class ClaimIdentity:
    """The validated names of a claim, safe to use as path components."""

    namespace: str
    name: str
    uid: str
    pod_claim_name: str | None = None


@dataclass(frozen=True, slots=True)
class RequestMetadata:
    """One file's worth: the metadata of one base request of one claim, for one driver."""

    request: str  # the base request name (a DNS label), as used in paths
    document: DeviceMetadata


def check_uid(value: str) -> str:
    """A Kubernetes object UID: an RFC 4122 UUID (``8-4-4-4-12`` hex digits)."""
    if not _UID.match(value):
        raise ValueError(f"{value!r} is not a UID (8-4-4-4-12 hex digits)")
    return value


def _field(
    problems: list[Problem], what: str, path: str, value: str | None, check: Callable[[str], str]
) -> str:
    if value is None:
        problems.append(Problem("required field is missing", what, path=path))
        return ""
    try:
        checked: str = check(value)
    except ValueError as e:
        problems.append(Problem(str(e), what, path=path))
        return value
    return checked


def claim_identity(claim: ResourceClaim) -> ClaimIdentity:
    """The claim's namespace, name, uid and pod claim name, each checked for path safety.

    Raises:
        SchemaError: a name is missing or not a DNS label/subdomain, or the uid is no UUID.
    """
    meta = claim.metadata
    what = f"ResourceClaim/{meta.namespace or '?'}/{meta.name}"
    problems: list[Problem] = []
    namespace = _field(problems, what, "metadata.namespace", meta.namespace, check_dns_label)
    name = _field(problems, what, "metadata.name", meta.name, check_dns_subdomain)
    uid = _field(problems, what, "metadata.uid", meta.uid, check_uid)
    annotation = (meta.annotations or {}).get(POD_CLAIM_NAME_ANNOTATION)
    pod_claim = None
    if annotation is not None:
        path = f'metadata.annotations["{POD_CLAIM_NAME_ANNOTATION}"]'
        pod_claim = _field(problems, what, path, annotation, check_dns_label)
    if not problems and len(namespace) + 1 + len(name) > CLAIM_DIR_MAX:
        msg = (
            f"namespace and name are {len(namespace) + len(name)} characters together; "
            f"at most {CLAIM_DIR_MAX - 1} fit the host directory <namespace>_<name>"
        )
        problems.append(Problem(msg, what, path="metadata.name"))
    if problems:
        raise SchemaError(problems)
    return ClaimIdentity(namespace, name, uid, pod_claim)


def driver_results(claim: ResourceClaim, driver: str) -> list[DeviceRequestAllocationResult]:
    """The allocation results of ``driver``'s devices, in allocation order.

    Raises:
        SchemaError: the claim is not allocated, or the driver name is invalid.
    """
    what = f"ResourceClaim/{claim.metadata.namespace or '?'}/{claim.metadata.name}"
    try:
        check_driver_name(driver)
    except ValueError as e:
        raise SchemaError([Problem(f"driver name: {e}", what)]) from e
    allocation = claim.status.allocation if claim.status is not None else None
    if allocation is None or allocation.devices is None:
        raise SchemaError([Problem("the claim is not allocated", what, path="status.allocation")])
    return [r for r in allocation.devices.results or [] if r.driver == driver]


def find_device(
    slices: Sequence[ResourceSlice], driver: str, pool: str, device: str
) -> SliceDevice | None:
    """The device in the newest generation of its pool, or None (``IndexedSlices.device``)."""
    return IndexedSlices.of(slices).device(driver, pool, device)


def _lookup(attrs: Mapping[str, DeviceAttribute], driver: str, name: str) -> DeviceAttribute | None:
    return lookup_attribute(attrs, driver, name)


def _derive(key: str, raw: DeviceAttribute) -> DeviceAttribute | None:
    value = raw.value
    if key == PCI_BUS_ID and isinstance(value, str):
        try:
            return DeviceAttribute.model_validate({"string": normalize_pci_address(value)})
        except ValueError:
            return None
    if key == PCIE_ROOT and isinstance(value, str) and _PCIE_ROOT.match(value.lower()):
        return DeviceAttribute.model_validate({"string": value.lower()})
    if key == NUMA_NODE and (raw.int_ is not None or raw.ints is not None):
        return raw
    return None


def device_attributes(device: SliceDevice, driver: str) -> dict[str, DeviceAttribute]:
    """The slice's attributes plus the standard ones derived from driver-specific ones.

    A standard attribute the slice already has is kept as is; a ``pciBusID`` is normalized
    to lower-case ``dddd:bb:dd.f``. Keys are sorted, as Go's encoder writes a map.
    """
    attrs = dict(device.attributes or {})
    for key, sources in DERIVED_FROM.items():
        present = attrs.get(key)
        if present is not None:
            if key == PCI_BUS_ID:
                attrs[key] = _derive(key, present) or present
            continue
        for source in sources:
            raw = _lookup(attrs, driver, source)
            derived = _derive(key, raw) if raw is not None else None
            if derived is not None:
                attrs[key] = derived
                break
    return dict(sorted(attrs.items()))


def network_from_status(claim: ResourceClaim) -> dict[tuple[str, str, str], NetworkDeviceData]:
    """The claim's ``status.devices[].networkData``, per (driver, pool, device)."""
    out: dict[tuple[str, str, str], NetworkDeviceData] = {}
    for entry in (claim.status.devices if claim.status is not None else None) or []:
        if entry.network_data is not None:
            out[(entry.driver, entry.pool, entry.device)] = entry.network_data
    return out


def _device(
    result: DeviceRequestAllocationResult,
    slices: Sequence[ResourceSlice],
    network: NetworkData,
    what: str,
    index: int,
) -> Device:
    found = find_device(slices, result.driver, result.pool, result.device)
    path = f"status.allocation.devices.results[{index}]"
    if found is None:
        msg = (
            f"device {result.driver}/{result.pool}/{result.device} is in none of the "
            "ResourceSlices given"
        )
        raise SchemaError([Problem(msg, what, path=path)])
    attrs = device_attributes(found, result.driver)
    if len(attrs) > ATTRIBUTES_MAX or sum(a.size() for a in attrs.values()) > ATTRIBUTE_VALUES_MAX:
        msg = (
            f"device {result.pool}/{result.device}: with the derived standard attributes it "
            f"has more than {ATTRIBUTES_MAX} attributes or {ATTRIBUTE_VALUES_MAX} values, the "
            "DeviceMetadata limit"
        )
        raise SchemaError([Problem(msg, what, path=path)])
    body: dict[str, object] = {
        "driver": result.driver,
        "pool": result.pool,
        "name": result.device,
        "attributes": {k: v.to_json_dict() for k, v in attrs.items()} or None,
    }
    net = network.get((result.driver, result.pool, result.device))
    if net is not None:
        body["networkData"] = net.to_json_dict()
    try:
        return Device.parse({k: v for k, v in body.items() if v is not None})
    except ValueError as e:
        raise SchemaError([Problem(f"device {result.device}: {e}", what, path=path)]) from e


def build_metadata(
    claim: ResourceClaim,
    slices: Sequence[ResourceSlice],
    driver: str,
    *,
    network_data: NetworkData | None = None,
    generation: int = 1,
) -> tuple[RequestMetadata, ...]:
    """The DeviceMetadata of ``driver``'s devices, one per base request, in allocation order.

    Network data comes from ``network_data`` when given, else from the claim's
    ``status.devices[]``. Subrequest names (``nic/sriov``) are kept inside the document.

    Raises:
        SchemaError: a name is unsafe, the claim is not allocated, or a device is missing
            from the slices.
    """
    ident = claim_identity(claim)
    what = f"ResourceClaim/{ident.namespace}/{ident.name}"
    driver_results(claim, driver)  # raises unless allocated and the driver name is valid
    network = network_data if network_data is not None else network_from_status(claim)
    grouped: dict[str, dict[str, list[Device]]] = {}
    slices = IndexedSlices.of(slices)  # once per call: each result is a lookup
    for index, result in enumerate(claim.status.allocation.devices.results or []):  # type: ignore[union-attr]
        if result.driver != driver:
            continue
        device = _device(result, slices, network, what, index)
        per_request = grouped.setdefault(base_request(result.request), {})
        per_request.setdefault(result.request, []).append(device)
    meta = ObjectMeta.parse(
        {
            "name": ident.name,
            "namespace": ident.namespace,
            "uid": ident.uid,
            "generation": generation,
        }
    )
    out = []
    for base, requests in grouped.items():
        document = DeviceMetadata.parse(
            {
                "apiVersion": V1BETA1,
                "kind": METADATA_KIND,
                "metadata": meta.to_json_dict(),
                **({"podClaimName": ident.pod_claim_name} if ident.pod_claim_name else {}),
                "requests": [
                    {"name": name, "devices": [d.to_json_dict() for d in devices]}
                    for name, devices in requests.items()
                ],
            }
        )
        out.append(RequestMetadata(base, document))
    return tuple(out)


def with_generation(document: DeviceMetadata, generation: int) -> DeviceMetadata:
    """The same document with ``metadata.generation`` set."""
    return replace(document, metadata=replace(document.metadata, generation=generation))


__all__ = [
    "DERIVED_FROM",
    "NUMA_NODE",
    "PCIE_ROOT",
    "PCI_BUS_ID",
    "POD_CLAIM_NAME_ANNOTATION",
    "ClaimIdentity",
    "NetworkData",
    "RequestMetadata",
    "build_metadata",
    "check_uid",
    "claim_identity",
    "device_attributes",
    "driver_results",
    "find_device",
    "network_from_status",
    "with_generation",
]
