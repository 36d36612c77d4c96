"""Why each device was or was not usable for each request: ``kvdev-host allocate --explain``.

A separate pass next to the search, never part of it: for every claim, request and
firstAvailable alternative it walks the devices of every slice and reports the first check that
rejects each one, in the search's own order and with its own checks (``Search.verdict``) and
the same pool and node rules. Each device is judged on its own against the devices already in
use by existing claims, not against the other picks of the same run; a device reported as
fitting may still lose to another claim's or request's pick, and constraints are judged
against an empty memory (a missing attribute shows, a mismatch between two picks does not).
What only the search itself can tell (that it stopped early, proven hopeless) comes with the
outcome as ``notes``; the command prints both.

Pure: data in, data out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from kvdev.host.allocation.cel import interruptible
from kvdev.host.allocation.features import Features
from kvdev.host.allocation.plans import AllocationFailedError, Selection
from kvdev.host.allocation.pools import (
    DeviceID,
    NodeLike,
    Pool,
    device_visible,
    gather_pools,
    slice_visible,
)
from kvdev.host.allocation.search import Clock, Search
from kvdev.host.k8s.claim import ResourceClaim
from kvdev.host.k8s.quantity import parse_quantity
from kvdev.host.k8s.resource import DeviceClass, ResourceSlice

__all__ = ["REASONS", "DeviceVerdict", "RequestReport", "explain"]

#: Every reason a device can be rejected for, with its wording for people.
REASONS: Mapping[str, str] = {
    "other-node": "not available on this node",
    "pool-incomplete": "its pool is being updated (not all slices seen)",
    "pool-invalid": "its pool is invalid",
    "pool-obsolete": "its pool has a newer generation",
    "in-use": "in use (allocated to another claim)",
    "gated": "needs a feature that is disabled",
    "selector": "a selector expression is false",
    "selector-error": "a selector expression failed",
    "capacity": "not enough capacity",
    "counters": "not enough shared counters",
    "compatibility-group": "its compatibility groups do not go with the device's other partitions",
    "taint": "a taint is not tolerated",
    "constraint": "a claim constraint is not satisfied",
}


@dataclass(frozen=True, slots=True)
class DeviceVerdict:
    """One device for one request alternative: ``reason`` None means it fits on its own."""

    device: str  # driver/pool/device
    reason: str | None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class RequestReport:
    """The devices considered for one request alternative of one claim."""

    claim: str
    request: str  # ``req`` or ``req/sub``
    wanted: int | None  # devices wanted; None for allocationMode All
    devices: tuple[DeviceVerdict, ...]

    @property
    def fitting(self) -> int:
        """How many devices fit on their own."""
        return sum(1 for d in self.devices if d.reason is None)

    @property
    def satisfiable(self) -> bool:
        """Enough devices fit on their own (All: at least one)."""
        return self.fitting >= (self.wanted or 1)


def explain(  # noqa: PLR0913 - allocate()'s inputs, keyword-only
    node: NodeLike,
    claims: Sequence[ResourceClaim],
    *,
    classes: Iterable[DeviceClass],
    slices: Sequence[ResourceSlice],
    allocated_devices: Iterable[DeviceID] = (),
    allocated_capacity: Mapping[DeviceID, Mapping[str, str | Fraction]] | None = None,
    features: Features | None = None,
    clock: Clock | None = None,
) -> list[RequestReport]:
    """One report per claim and request alternative, in claim and request order.

    ``clock``: the filter timeout of each claim's pass (inside every CEL evaluation too); a
    device judged past it is a ``selector-error`` naming the timeout.

    Claims that cannot be planned (unknown class, invalid constraint, an ``All`` request
    meeting an incomplete pool...) are skipped: the allocator reports those as errors.
    """
    feats = features or Features()
    by_name = {c.metadata.name: c for c in classes}
    pools = gather_pools(node, slices, feats)
    selection = Selection(feats)
    held = frozenset(allocated_devices)
    shared = {
        dev: {k: v if isinstance(v, Fraction) else parse_quantity(v) for k, v in m.items()}
        for dev, m in (allocated_capacity or {}).items()
    }
    rejected = _not_searched(node, slices, pools, feats)
    reports: list[RequestReport] = []
    for claim in claims:
        search = Search(
            pools=pools,
            allocated=held,
            allocated_capacity=shared,
            features=feats,
            selection=selection,
            node=node.name,
            clock=clock,
        )
        with interruptible(search.check_deadline):
            reports += _claim_reports(search, claim, by_name=by_name, rejected=rejected)
    return reports


def _claim_reports(
    search: Search,
    claim: ResourceClaim,
    *,
    by_name: Mapping[str, DeviceClass],
    rejected: list[DeviceVerdict],
) -> list[RequestReport]:
    """The reports of one claim (none when it cannot be planned)."""
    reports: list[RequestReport] = []
    try:
        search.prepare([claim], by_name)
    except AllocationFailedError:
        return reports
    for slot in search.plans[0].slots:
        for alt in slot.alternatives:
            verdicts = [
                *(_verdict(search, alt, pos) for pos in range(len(search.candidates))),
                *rejected,
            ]
            reports.append(
                RequestReport(
                    claim=claim.metadata.name,
                    request=alt.name,
                    wanted=None if alt.all_mode else alt.count,
                    devices=tuple(verdicts),
                )
            )
    return reports


def _verdict(search: Search, alt: object, pos: int) -> DeviceVerdict:
    candidate = search.candidates[pos]
    name = "/".join(candidate.id)
    try:
        reason = search.verdict(alt, pos)  # type: ignore[arg-type]
    except AllocationFailedError as e:
        return DeviceVerdict(name, "selector-error", e.message)
    if reason == "gated" and candidate.binding:
        return DeviceVerdict(name, reason, "binding conditions (DRADeviceBindingConditions)")
    if reason == "gated":
        return DeviceVerdict(name, reason, "shared counters (DRAPartitionableDevices)")
    return DeviceVerdict(name, reason)


def _not_searched(
    node: NodeLike, slices: Sequence[ResourceSlice], pools: Sequence[Pool], features: Features
) -> list[DeviceVerdict]:
    """Devices the search never looks at, each with why (same reason for every request)."""
    by_pool = {p.id: p for p in pools}
    searched = {c.id for p in pools if p.usable for c in p.candidates}
    out: list[DeviceVerdict] = []
    seen: set[str] = set()
    for s in sorted(slices, key=lambda x: (x.spec.driver, x.spec.pool.name, x.metadata.name)):
        pool_id = (s.spec.driver, s.spec.pool.name)
        pool = by_pool.get(pool_id)
        for d in s.spec.devices or []:
            ident = (*pool_id, d.name)
            name = "/".join(ident)
            if name in seen or ident in searched:
                continue
            reason: str | None = None
            if not features.DRAPartitionableDevices and (
                s.spec.per_device_node_selection is not None or s.spec.shared_counters
            ):
                reason = "gated"  # such slices are skipped with DRAPartitionableDevices off
            elif not slice_visible(s, node) or (
                s.spec.per_device_node_selection and not device_visible(d, node)
            ):
                reason = "other-node"
            elif pool is None or s.spec.pool.generation != pool.generation:
                reason = "pool-obsolete"
            elif pool.invalid:
                reason = "pool-invalid"
            elif pool.incomplete:
                reason = "pool-incomplete"
            if reason is not None:
                seen.add(name)
                out.append(DeviceVerdict(name, reason))
    return out
