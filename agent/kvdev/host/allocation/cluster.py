"""The cluster state the allocator works on, from the objects of the input files (pure).

``cluster_state`` sorts loaded objects into device classes, slices (with every
DeviceTaintRule's taint added to the devices it selects: a missing selector selects none, an
empty one all), the devices and capacity already in use (claims that carry
``status.allocation``: exclusive, or shared capacity when a result has a shareID; admin
access takes nothing), the claims still to allocate, and the node.

Pods (with ``extended_resources``, the ``DRAExtendedResource`` gate): each Pod asking for an
extended resource a DeviceClass maps gets the special claim the scheduler would make
(``extended``), added to the claims to allocate after the input's own. A Pod whose
``spec.nodeName`` names another node is already scheduled there and is skipped; so is a Pod
whose ``status.extendedResourceClaimStatus`` already names its claim (that claim, if given,
is read like any other). A Pod bound to NODE itself, or not bound, is treated as being
scheduled onto NODE. Resources NODE's ``status.allocatable`` lists come from a device plugin
and are not asked of DRA.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from kvdev.errors import UsageError
from kvdev.host.allocation.allocator import NodeInfo
from kvdev.host.allocation.extended import SpecialClaim, synthesize
from kvdev.host.k8s import (
    DeviceClass,
    DeviceTaintRule,
    K8sObject,
    Node,
    Pod,
    ResourceClaim,
    ResourceSlice,
    parse_quantity,
)
from kvdev.host.k8s.claim import AllocationResult


@dataclass(slots=True)
class ClusterState:
    """The objects of the input files, sorted for the allocator."""

    node: NodeInfo
    classes: list[DeviceClass] = field(default_factory=list)
    slices: list[ResourceSlice] = field(default_factory=list)
    pending: list[ResourceClaim] = field(default_factory=list)
    in_use: list[ResourceClaim] = field(default_factory=list)  # claims with status.allocation
    special: list[SpecialClaim] = field(default_factory=list)
    allocated_devices: set[tuple[str, str, str]] = field(default_factory=set)
    allocated_capacity: dict[tuple[str, str, str], dict[str, Fraction]] = field(
        default_factory=dict
    )


def apply_taint_rules(
    slices: Sequence[ResourceSlice], rules: Sequence[DeviceTaintRule]
) -> list[ResourceSlice]:
    """The slices with every DeviceTaintRule's taint added to the devices it selects."""
    if not rules:
        return list(slices)
    out = []
    for s in slices:
        data = s.to_json_dict()
        for device in data["spec"].get("devices") or []:
            for rule in rules:
                sel = rule.spec.device_selector
                if sel is None:  # a missing selector selects nothing (an empty one, all)
                    continue
                if (
                    (sel.driver is not None and sel.driver != s.spec.driver)
                    or (sel.pool is not None and sel.pool != s.spec.pool.name)
                    or (sel.device is not None and sel.device != device["name"])
                ):
                    continue
                device.setdefault("taints", []).append(rule.spec.taint.to_json_dict())
        out.append(ResourceSlice.model_validate(data))
    return out


def _node(name: str, nodes: Sequence[Node]) -> NodeInfo:
    if not nodes:
        return NodeInfo(name, {})
    for n in nodes:
        if n.metadata.name == name:
            return NodeInfo(name, dict(n.metadata.labels or {}))
    known = ", ".join(sorted(n.metadata.name for n in nodes))
    raise UsageError(f"--node {name}: no Node object of that name among the input (have {known})")


def _add_in_use(state: ClusterState, allocation: AllocationResult) -> None:
    for r in (allocation.devices.results if allocation.devices else None) or []:
        ident = (r.driver, r.pool, r.device)
        if r.admin_access:
            continue  # the scheduler's DRA manager: admin access holds nothing
        if r.share_id:
            used = state.allocated_capacity.setdefault(ident, {})
            for k, v in (r.consumed_capacity or {}).items():
                used[k] = used.get(k, Fraction(0)) + parse_quantity(str(v))
        else:
            state.allocated_devices.add(ident)


def _pods_to_schedule(pods: Sequence[Pod], node_name: str) -> list[Pod]:
    return [
        p
        for p in pods
        if p.spec.node_name in (None, node_name)
        and not (p.status and p.status.extended_resource_claim_status)
    ]


def _allocatable(name: str, nodes: Sequence[Node]) -> set[str]:
    for n in nodes:
        if n.metadata.name == name and n.status and n.status.allocatable:
            return set(n.status.allocatable)
    return set()


def cluster_state(
    objects: Iterable[K8sObject], node_name: str, *, extended_resources: bool = True
) -> ClusterState:
    """Split the input objects into the allocator's inputs.

    With ``extended_resources`` the Pods' special claims (module docstring) are pending too.

    Raises:
        UsageError: no Node object named ``node_name`` (when Node objects are given), or two
            claims to allocate share a name.
    """
    objs = list(objects)
    nodes = [o for o in objs if isinstance(o, Node)]
    state = ClusterState(_node(node_name, nodes))
    rules: list[DeviceTaintRule] = []
    slices: list[ResourceSlice] = []
    for obj in objs:
        if isinstance(obj, DeviceClass):
            state.classes.append(obj)
        elif isinstance(obj, ResourceSlice):
            slices.append(obj)
        elif isinstance(obj, DeviceTaintRule):
            rules.append(obj)
        elif isinstance(obj, ResourceClaim):
            allocation = obj.status.allocation if obj.status else None
            if allocation is None:
                state.pending.append(obj)
            else:
                state.in_use.append(obj)
                _add_in_use(state, allocation)
    state.slices = apply_taint_rules(slices, rules)
    if extended_resources:
        pods = _pods_to_schedule([o for o in objs if isinstance(o, Pod)], node_name)
        state.special = synthesize(pods, state.classes, _allocatable(node_name, nodes))
        state.pending.extend(s.claim for s in state.special)
    names = [c.metadata.name for c in state.pending]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise UsageError(
            f"claims to allocate must have distinct names: {', '.join(duplicates)} "
            "appear more than once"
        )
    return state
