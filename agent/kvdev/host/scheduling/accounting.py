"""Node-allocatable accounting: pod requests plus what devices declare (KEP-5517).

Owns a pod's effective requests, the amounts allocated devices take from the node through
``nodeAllocatableResources``, and the fit check against ``Node.status.allocatable``. Pure.

kvdev's reading (the API shape is ``{mapping?: {capacityKey?, capacityMultiplier?,
deviceMultiplier?}, overhead?: {perPod?, perContainer?}}`` per resource name):

* Pod requests: per container its limits overlaid with its requests (API defaulting copies a
  missing request from the limit); the pod needs the larger of the sum over long-lived
  containers (containers and sidecar init containers) and, for each plain init container,
  its own requests plus those of the sidecars started before it. ``spec.overhead`` is not read.
* ``mapping`` is charged once per allocated device when its claim is allocated, to the node
  the allocating pod lands on: ``capacityKey`` takes the consumed share of that capacity
  (``consumedCapacity`` of a shared device) or the whole capacity (an exclusive device),
  times ``capacityMultiplier`` (default 1); without ``capacityKey`` it is
  ``deviceMultiplier`` (default 1) per device.
* ``overhead`` is charged for every pod that uses the device (a claim shared by several pods
  charges each of them): ``perPod`` once, ``perContainer`` once per container of the pod
  (containers and init containers).
* Fit: a node without ``status.allocatable`` is not accounted. Otherwise every resource the
  pod and its devices need must fit in what the node lists minus what its pods already use;
  a resource the node does not list has nothing allocatable, except ``pods`` (counted, one
  per pod, only when listed) and extended resources a DeviceClass maps (their DRA claim
  stands for them, KEP-5004).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from fractions import Fraction

from kvdev.host.k8s import Pod, parse_quantity
from kvdev.host.k8s.claim import AllocationResult
from kvdev.host.k8s.core import Container
from kvdev.host.k8s.resource import Device

Amounts = dict[str, Fraction]


def _container(c: Container) -> Amounts:
    res = c.resources
    if res is None:
        return {}
    merged = {**(res.limits or {}), **(res.requests or {})}
    return {k: parse_quantity(v) for k, v in merged.items()}


def add_amounts(into: Amounts, more: Mapping[str, Fraction]) -> None:
    """Add ``more`` to ``into``, name by name."""
    for k, v in more.items():
        have = into.get(k)
        into[k] = v if have is None else have + v


def pod_requests(pod: Pod, skip: Collection[str] = ()) -> Amounts:
    """The pod's effective requests (module docstring), without the names in ``skip``."""
    long: Amounts = {}
    peak: Amounts = {}
    sidecars: Amounts = {}
    for c in pod.spec.init_containers or []:
        mine = _container(c)
        if c.restart_policy == "Always":
            add_amounts(sidecars, mine)
            add_amounts(long, mine)
            continue
        during = dict(sidecars)
        add_amounts(during, mine)
        for k, v in during.items():
            peak[k] = max(peak.get(k, Fraction(0)), v)
    for c in pod.spec.containers:
        add_amounts(long, _container(c))
    out = {k: max(long.get(k, Fraction(0)), peak.get(k, Fraction(0))) for k in {*long, *peak}}
    return {k: v for k, v in sorted(out.items()) if v and k not in skip}


def containers(pod: Pod) -> int:
    """How many containers the pod has (init containers included)."""
    return len(pod.spec.containers) + len(pod.spec.init_containers or [])


def _capacity(device: Device, key: str, driver: str, consumed: Mapping[str, str] | None) -> str:
    names = [key]
    if key.startswith(driver + "/"):
        names.append(key[len(driver) + 1 :])
    elif "/" not in key:
        names.append(f"{driver}/{key}")
    for name in names:
        if consumed is not None and name in consumed:
            return consumed[name]
    for name in names:
        cap = (device.capacity or {}).get(name)
        if cap is not None:
            return cap.value
    return "0"


def device_amounts(
    allocation: AllocationResult,
    device_of: Callable[[tuple[str, str, str]], Device | None],
    *,
    mapping: bool,
    pods: int,
    n_containers: int,
) -> Amounts:
    """What the allocation's devices take from the node.

    ``mapping``: include the per-device mapping (the claim is being allocated now).
    ``pods`` / ``n_containers``: overhead is charged for that many pods with that many
    containers each (0 pods: no overhead).
    """
    out: Amounts = {}
    for r in (allocation.devices.results if allocation.devices else None) or []:
        device = device_of((r.driver, r.pool, r.device))
        if device is None or not device.node_allocatable_resources:
            continue
        for name, spec in device.node_allocatable_resources.items():
            amount = Fraction(0)
            if mapping and spec.mapping is not None:
                m = spec.mapping
                if m.capacity_key is not None:
                    consumed = r.consumed_capacity if r.share_id else None
                    value = parse_quantity(_capacity(device, m.capacity_key, r.driver, consumed))
                    amount += value * parse_quantity(m.capacity_multiplier or "1")
                else:
                    amount += parse_quantity(m.device_multiplier or "1")
            if pods and spec.overhead is not None:
                o = spec.overhead
                amount += parse_quantity(o.per_pod or "0") * pods
                amount += parse_quantity(o.per_container or "0") * pods * n_containers
            if amount:
                out[name] = out.get(name, Fraction(0)) + amount
    return out


def shortfall(
    allocatable: Mapping[str, Fraction] | None,
    used: Mapping[str, Fraction],
    need: Mapping[str, Fraction],
) -> list[str]:
    """The resources of ``need`` that do not fit (sorted), empty when everything fits."""
    if allocatable is None:
        return []
    short = []
    for name, amount in need.items():
        have = allocatable.get(name)
        if have is None:
            if name != "pods":
                short.append(name)
            continue
        already = used.get(name)
        if (amount if already is None else already + amount) > have:
            short.append(name)
    return sorted(short)
