"""Search picks as ``ResourceClaim.status.allocation``, the way upstream writes them.

Owns, per claim: the device results (request or ``request/subrequest``, adminAccess, the
request's tolerations as written, whatever the taint gate says (class J), shareID and
consumedCapacity for multi-allocatable devices, binding conditions copied from the device),
the configuration (each class's config once, for the requests using the class, then the
claim's config entries naming a request or the chosen subrequest; an entry whose requests
cover every request of the claim, class config included, gets ``requests`` cleared, class A),
the node selector (the node's name when a device is node-local or binds to the node, else
one term merging the slices' or per-device selectors).

The models are assembled without validating again (``k8s.model.assemble``): every value
comes from objects that were validated when they were loaded.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from kvdev.host.allocation.features import Features
from kvdev.host.allocation.plans import ClaimPlan, Slot
from kvdev.host.allocation.pools import NodeLike
from kvdev.host.allocation.search import Pick
from kvdev.host.k8s.claim import (
    AllocationResult,
    DeviceAllocationConfiguration,
    DeviceAllocationResult,
    DeviceRequestAllocationResult,
)
from kvdev.host.k8s.common import NodeSelector, NodeSelectorRequirement, NodeSelectorTerm
from kvdev.host.k8s.model import assemble

_SHARE_NAMESPACE = uuid.UUID("6f1d2a9e-4c1b-5b7e-9a55-2f0c3e8d7b10")


def quantity(value: Fraction) -> str:
    """An exact amount as a Kubernetes quantity string."""
    if value.denominator == 1:
        return str(value.numerator)
    milli = value * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    nano = value * 10**9
    return f"{nano.numerator // nano.denominator}n"


def _device(
    plan: ClaimPlan, index: int, pick: Pick, features: Features
) -> DeviceRequestAllocationResult:
    alt, candidate = pick.request, pick.candidate
    driver, pool, device = candidate.id
    dev = candidate.device
    share_id = None
    if pick.shared:
        claim = plan.claim.metadata
        name = f"{claim.namespace}/{claim.name}/{alt.name}/{'/'.join(candidate.id)}/{index}"
        share_id = str(uuid.uuid5(_SHARE_NAMESPACE, name))
    binding = features.DRADeviceBindingConditions
    return assemble(
        DeviceRequestAllocationResult,
        request=alt.name,
        driver=driver,
        pool=pool,
        device=device,
        admin_access=True if alt.admin else None,
        tolerations=list(alt.tolerations) or None,
        binding_conditions=list(dev.binding_conditions or ()) or None if binding else None,
        binding_failure_conditions=(
            list(dev.binding_failure_conditions or ()) or None if binding else None
        ),
        share_id=share_id,
        consumed_capacity=(
            {k: quantity(v) for k, v in pick.consumed.items()}
            if pick.shared and pick.consumed
            else None
        ),
    )


def _merge(
    target: list[NodeSelectorRequirement], reqs: Sequence[NodeSelectorRequirement] | None
) -> None:
    for req in reqs or []:
        values = set(req.values or [])
        if not any(
            d.key == req.key and d.operator == req.operator and set(d.values or []) == values
            for d in target
        ):
            target.append(req)


def node_selector(picks: Sequence[Pick], node: NodeLike) -> NodeSelector | None:
    """The allocation's node selector, or None when the devices are available everywhere."""
    expressions: list[NodeSelectorRequirement] = []
    fields_: list[NodeSelectorRequirement] = []
    for pick in picks:
        dev = pick.candidate.device
        spec = pick.candidate.slice.spec
        if spec.per_device_node_selection:
            name, selector = dev.node_name, dev.node_selector
        else:
            name, selector = spec.node_name, spec.node_selector
        if name is not None or dev.binds_to_node:
            pinned = assemble(
                NodeSelectorRequirement, key="metadata.name", operator="In", values=[node.name]
            )
            term = assemble(NodeSelectorTerm, match_fields=[pinned])
            return assemble(NodeSelector, node_selector_terms=[term])
        if selector is not None and len(selector.node_selector_terms) == 1:
            term = selector.node_selector_terms[0]
            _merge(fields_, term.match_fields)
            _merge(expressions, term.match_expressions)
    if not expressions and not fields_:
        return None
    merged = assemble(
        NodeSelectorTerm, match_expressions=expressions or None, match_fields=fields_ or None
    )
    return assemble(NodeSelector, node_selector_terms=[merged])


def _chosen(slot: Slot) -> str:
    return slot.alternatives[slot.selected if slot.first_available else 0].name


def _covers(requests: Sequence[str], slot: Slot) -> bool:
    return slot.name in requests or (slot.first_available and _chosen(slot) in requests)


def config(plan: ClaimPlan) -> list[DeviceAllocationConfiguration]:
    """``status.allocation.devices.config`` (module docstring)."""
    out = []
    for entry in [*_class_config(plan), *_claim_config(plan)]:
        requests = entry["requests"]
        if requests and all(_covers(requests, s) for s in plan.slots):
            requests = []
        out.append(
            assemble(
                DeviceAllocationConfiguration,
                source=entry["source"],
                requests=requests or None,
                opaque=entry.get("opaque"),
            )
        )
    return out


def _class_config(plan: ClaimPlan) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    by_class: dict[str, tuple[int, int]] = {}
    for slot in plan.slots:
        alt = slot.alternatives[slot.selected if slot.first_available else 0]
        known = by_class.get(alt.class_name)
        if known is not None:
            for i in range(*known):
                out[i]["requests"].append(alt.name)
            continue
        start = len(out)
        out.extend(
            {"source": "FromClass", "requests": [alt.name], "opaque": cfg.opaque}
            for cfg in alt.device_class.spec.config or []
        )
        by_class[alt.class_name] = (start, len(out))
    return out


def _claim_config(plan: ClaimPlan) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    devices = plan.claim.spec.devices
    for claim_cfg in (devices.config if devices else None) or []:
        listed = list(claim_cfg.requests or [])
        if listed and not any(_covers(listed, slot) for slot in plan.slots):
            continue
        out.append({"source": "FromClaim", "requests": listed, "opaque": claim_cfg.opaque})
    return out


def allocation_result(
    plan: ClaimPlan,
    picks: Sequence[Pick],
    node: NodeLike,
    features: Features,
) -> AllocationResult:
    """One claim's ``status.allocation``."""
    devices = assemble(
        DeviceAllocationResult,
        results=[_device(plan, i, p, features) for i, p in enumerate(picks)],
        config=config(plan) or None,
    )
    return assemble(
        AllocationResult,
        devices=devices,
        node_selector=node_selector(picks, node),
    )
