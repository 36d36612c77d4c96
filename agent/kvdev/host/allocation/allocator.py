"""The allocator's public entry: ``allocate`` and its ``Outcome``.

Owns the run's orchestration (pools, claim plans, All device lists, the search, the final
invalid-pool rule) and turning search picks into ``AllocationResult`` models as upstream
writes them: device results (shareID, consumedCapacity, tolerations, binding conditions),
class and claim configuration, the result node selector and the compatibility groups.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from kvdev.host.allocation.features import Features
from kvdev.host.allocation.groups import GroupKey
from kvdev.host.allocation.plans import (
    AllocationFailedError,
    ClaimPlan,
    Selection,
    check_limit,
    plan_claim,
)
from kvdev.host.allocation.pools import (
    DeviceID,
    NodeInfo,
    NodeLike,
    Pool,
    PoolIndex,
    gather_pools,
)
from kvdev.host.allocation.search import Pick, Search
from kvdev.host.k8s.claim import AllocationResult, ResourceClaim
from kvdev.host.k8s.common import NodeSelectorRequirement
from kvdev.host.k8s.quantity import parse_quantity
from kvdev.host.k8s.resource import DeviceClass, ResourceSlice

__all__ = [
    "Allocated",
    "Failed",
    "Features",
    "NodeInfo",
    "Outcome",
    "Pool",
    "PoolIndex",
    "Selection",
    "Unschedulable",
    "allocate",
]

_SHARE_NAMESPACE = uuid.UUID("6f1d2a9e-4c1b-5b7e-9a55-2f0c3e8d7b10")


@dataclass(frozen=True, slots=True)
class Allocated:
    """Every claim fits: one allocation result per claim name."""

    results: Mapping[str, AllocationResult] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Unschedulable:
    """The claims do not fit on this node (not an error)."""


@dataclass(frozen=True, slots=True)
class Failed:
    """The allocator could not answer (invalid input, a CEL error, a limit): a keyword and why.

    An outcome, not an exception: ``allocate`` returns it. The keyword is one of the fixture
    README's (``invalid-pool``, ``cel-runtime`` ...).
    """

    keyword: str
    message: str


Outcome = Allocated | Unschedulable | Failed


def allocate(  # noqa: PLR0913 - keyword-only inputs of the public entry
    node: NodeLike,
    claims: Sequence[ResourceClaim],
    *,
    classes: Iterable[DeviceClass] | Mapping[str, DeviceClass],
    slices: Sequence[ResourceSlice] = (),
    allocated_devices: Iterable[DeviceID] = (),
    allocated_capacity: Mapping[DeviceID, Mapping[str, str | Fraction]] | None = None,
    features: Features | None = None,
    pools: Sequence[Pool] | None = None,
    selection: Selection | None = None,
) -> Outcome:
    """Allocate all ``claims`` together on ``node``, first fit in upstream search order.

    ``pools``: the node's pools when the caller already has them (``PoolIndex.pools_for``;
    ``slices`` is then not read). ``selection``: a selector cache shared across calls (made
    for the same ``features``); without it each call evaluates selectors afresh.

    Raises:
        ValueError: ``selection`` was made for other features.
    """
    feats = features or Features()
    if selection is not None and selection.features != feats:
        raise ValueError("allocate: the selection cache was made for other features")
    try:
        return _allocate(
            node,
            claims,
            classes=classes
            if isinstance(classes, Mapping)
            else {c.metadata.name: c for c in classes},
            pools=list(pools) if pools is not None else gather_pools(node, slices),
            allocated=frozenset(allocated_devices),
            allocated_capacity={
                dev: {k: v if isinstance(v, Fraction) else parse_quantity(v) for k, v in m.items()}
                for dev, m in (allocated_capacity or {}).items()
            },
            features=feats,
            selection=selection or Selection(feats),
        )
    except AllocationFailedError as e:
        return Failed(e.keyword, e.message)


def _allocate(  # noqa: PLR0913 - the public entry's inputs, resolved
    node: NodeLike,
    claims: Sequence[ResourceClaim],
    *,
    classes: Mapping[str, DeviceClass],
    pools: list[Pool],
    allocated: frozenset[DeviceID],
    allocated_capacity: Mapping[DeviceID, Mapping[str, Fraction]],
    features: Features,
    selection: Selection,
) -> Outcome:
    search = Search(
        plans=(),
        pools=pools,
        allocated=allocated,
        allocated_capacity=allocated_capacity,
        features=features,
        selection=selection,
    )
    plans = []
    for claim in claims:
        plan = _with_all_devices(plan_claim(claim, classes, features), pools, search)
        check_limit(plan)
        plans.append(plan)
    search.plans = plans
    picks = search.run()
    if picks is None:
        if any(p.invalid for p in pools):
            raise AllocationFailedError("invalid-pool", "invalid resource pools were encountered")
        return Unschedulable()
    groups = search.final_groups()
    return Allocated(
        {
            plan.claim.metadata.name: _result(plan, claim_picks, node, features, groups)
            for plan, claim_picks in zip(plans, picks, strict=True)
        }
    )


def _with_all_devices(plan: ClaimPlan, pools: Sequence[Pool], search: Search) -> ClaimPlan:
    if not any(alt.all_mode for alts in plan.requests for alt in alts):
        return plan
    for pool in pools:
        state = "invalid" if pool.invalid else None if pool.complete else "incomplete"
        if state is not None:
            raise AllocationFailedError(
                f"pool-{state}",
                f"claim {plan.claim.metadata.name}: asks for all devices, but resource pool "
                f"{pool.driver}/{pool.name} is currently "
                + ("being updated" if state == "incomplete" else "invalid"),
            )
    requests = tuple(
        tuple(
            replace(
                alt,
                all_devices=tuple(c for c in search.candidates if search.static_usable(alt, c)),
            )
            if alt.all_mode
            else alt
            for alt in alts
        )
        for alts in plan.requests
    )
    return replace(plan, requests=requests)


# --------------------------------------------------------------------------- results


def _quantity(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    milli = value * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    nano = value * 10**9
    return f"{nano.numerator // nano.denominator}n"


def _device_result(
    claim: ResourceClaim, index: int, pick: Pick, features: Features
) -> dict[str, Any]:
    request, candidate = pick.request, pick.candidate
    driver, pool, device = candidate.id
    out: dict[str, Any] = {"request": request.name, "driver": driver, "pool": pool}
    out["device"] = device
    if request.admin:
        out["adminAccess"] = True
    if request.tolerations:
        out["tolerations"] = [
            t.model_dump(by_alias=True, exclude_none=True) for t in request.tolerations
        ]
    dev = candidate.device
    if features.DRADeviceBindingConditions and dev.binding_conditions:
        out["bindingConditions"] = list(dev.binding_conditions)
        out["bindingFailureConditions"] = list(dev.binding_failure_conditions or [])
    if pick.consumed is not None:
        name = f"{claim.metadata.namespace}/{claim.metadata.name}/{request.name}/"
        name += f"{'/'.join(candidate.id)}/{index}"
        out["shareID"] = str(uuid.uuid5(_SHARE_NAMESPACE, name))
        if pick.consumed:
            out["consumedCapacity"] = {k: _quantity(v) for k, v in pick.consumed.items()}
    return out


def _merge(target: list[dict[str, Any]], reqs: Sequence[NodeSelectorRequirement] | None) -> None:
    for req in reqs or []:
        dumped = req.model_dump(by_alias=True, exclude_none=True)
        if dumped not in target:
            target.append(dumped)


def _node_selector(picks: Sequence[Pick], node: NodeLike) -> dict[str, Any] | None:
    pinned = False
    expressions: list[dict[str, Any]] = []
    fields_: list[dict[str, Any]] = []
    for pick in picks:
        dev = pick.candidate.device
        spec = pick.candidate.slice.spec
        if spec.node_name or dev.node_name or dev.binds_to_node:
            pinned = True
            continue
        selector = spec.node_selector or dev.node_selector
        if selector is None:
            continue
        term = selector.node_selector_terms[0]
        _merge(expressions, term.match_expressions)
        _merge(fields_, term.match_fields)
    if pinned:
        names = {"key": "metadata.name", "operator": "In", "values": [node.name]}
        return {"nodeSelectorTerms": [{"matchFields": [names]}]}
    if not expressions and not fields_:
        return None
    term_out: dict[str, Any] = {}
    if expressions:
        term_out["matchExpressions"] = expressions
    if fields_:
        term_out["matchFields"] = fields_
    return {"nodeSelectorTerms": [term_out]}


def _config(plan: ClaimPlan, picks: Sequence[Pick]) -> list[dict[str, Any]]:
    chosen: dict[str, str] = {}  # parent request -> reported name
    by_class: dict[str, list[str]] = {}
    classes: dict[str, DeviceClass] = {}
    for pick in picks:
        req = pick.request
        if req.parent in chosen:
            continue
        chosen[req.parent] = req.name
        by_class.setdefault(req.class_name, []).append(req.name)
        classes[req.class_name] = req.device_class
    out: list[dict[str, Any]] = []
    for class_name, names in by_class.items():
        for cfg in classes[class_name].spec.config or []:
            entry: dict[str, Any] = {"source": "FromClass", "requests": names}
            if cfg.opaque is not None:
                entry["opaque"] = cfg.opaque.model_dump(by_alias=True, exclude_none=True)
            out.append(entry)
    devices = plan.claim.spec.devices
    for claim_cfg in (devices.config if devices else None) or []:
        listed = list(claim_cfg.requests or [])
        if listed and all(parent in listed or name in listed for parent, name in chosen.items()):
            listed = []
        entry = {"source": "FromClaim"}
        if listed:
            entry["requests"] = listed
        if claim_cfg.opaque is not None:
            entry["opaque"] = claim_cfg.opaque.model_dump(by_alias=True, exclude_none=True)
        out.append(entry)
    return out


def _compatibility_groups(
    picks: Sequence[Pick], groups: Mapping[GroupKey, frozenset[str]]
) -> dict[str, list[str]]:
    """KEP-5963 result field: the groups shared on each counter set the claim draws from.

    Only counter sets with grouped devices appear; the value is what every device on the set
    (allocated before or in this run) still has in common, sorted. Keyed
    ``<driver>/<pool>/<counterSet>``: counter sets are scoped to a (driver, pool) and two
    drivers may well use the same pool name (often the node's).
    """
    out: dict[str, list[str]] = {}
    for pick in picks:
        driver, pool, _ = pick.candidate.id
        for use in pick.candidate.device.consumes_counters or []:
            key = (driver, pool, use.counter_set)
            if key in groups:
                out["/".join(key)] = sorted(groups[key])
    return dict(sorted(out.items()))


def _result(
    plan: ClaimPlan,
    picks: Sequence[Pick],
    node: NodeLike,
    features: Features,
    groups: Mapping[GroupKey, frozenset[str]],
) -> AllocationResult:
    devices: dict[str, Any] = {
        "results": [_device_result(plan.claim, i, p, features) for i, p in enumerate(picks)]
    }
    config = _config(plan, picks)
    if config:
        devices["config"] = config
    data: dict[str, Any] = {"devices": devices}
    selector = _node_selector(picks, node)
    if selector is not None:
        data["nodeSelector"] = selector
    compatibility = _compatibility_groups(picks, groups)
    if compatibility:
        data["compatibilityGroups"] = compatibility
    return AllocationResult.model_validate(data)
