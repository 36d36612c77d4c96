"""The allocator's public entry: ``allocate`` and its ``Outcome``.

Owns the run's orchestration (``Allocator``: the claims planned once, then one call per node
tried): the node's pools, the search (``search.Search``: planning in
upstream's order, then the first-fit search), the final invalid-pool rule (claims that do not
fit on a node where some pool is invalid are an error, not "unschedulable") and turning the
picks into ``AllocationResult`` models (``results``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from kvdev.host.allocation.cel import interruptible
from kvdev.host.allocation.features import Features
from kvdev.host.allocation.plans import AllocationFailedError, Selection, plan_claims
from kvdev.host.allocation.pools import (
    DeviceID,
    NodeInfo,
    NodeLike,
    Pool,
    PoolIndex,
)
from kvdev.host.allocation.results import allocation_result
from kvdev.host.allocation.search import Clock, Search
from kvdev.host.k8s.claim import AllocationResult, ResourceClaim
from kvdev.host.k8s.quantity import parse_quantity
from kvdev.host.k8s.resource import DeviceClass, ResourceSlice

__all__ = [
    "DEFAULT_FILTER_TIMEOUT",
    "Allocated",
    "Allocator",
    "Clock",
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

DEFAULT_FILTER_TIMEOUT = 10.0  # seconds: kube-scheduler's DynamicResources filterTimeout


@dataclass(frozen=True, slots=True)
class Allocated:
    """Every claim fits: one allocation result per claim name."""

    results: Mapping[str, AllocationResult] = field(default_factory=dict)
    notes: tuple[str, ...] = field(default=(), compare=False)


@dataclass(frozen=True, slots=True)
class Unschedulable:
    """The claims do not fit on this node (not an error).

    ``stopped``: why the search stopped before trying everything upstream's would, when it
    proved that nothing fits (``hopeless``).
    """

    notes: tuple[str, ...] = field(default=(), compare=False)
    stopped: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class Failed:
    """The allocator could not answer (invalid input, a CEL error, a limit): a keyword and why.

    An outcome, not an exception: ``allocate`` returns it. The keyword is one of the fixture
    README's (``invalid-pool``, ``cel-runtime-error`` ...) or ``filter-timeout``.
    """

    keyword: str
    message: str
    notes: tuple[str, ...] = field(default=(), compare=False)


Outcome = Allocated | Unschedulable | Failed


class Allocator:
    """Claims planned once, allocated on one node per call (upstream's NewAllocator/Allocate).

    What does not depend on the node (the claims' plans, ``plans.plan_claims``) is made
    here; ``allocate`` does the rest on each node. One call at a time: the calls share the
    plans.

    ``selection``: a selector cache shared across calls (made for the same ``features``);
    without it each call evaluates selectors afresh. ``shortcuts``: skip work that cannot
    change the answer (candidates refused with no trace left, searches proven hopeless); off,
    the search walks every step upstream's does (for comparison).

    Raises:
        ValueError: ``selection`` was made for other features.
    """

    __slots__ = ("_planned", "features", "selection", "shortcuts")

    def __init__(
        self,
        claims: Sequence[ResourceClaim],
        *,
        classes: Iterable[DeviceClass] | Mapping[str, DeviceClass],
        features: Features | None = None,
        selection: Selection | None = None,
        shortcuts: bool = True,
    ) -> None:
        feats = features or Features()
        if selection is not None and selection.features != feats:
            raise ValueError("allocate: the selection cache was made for other features")
        self.features = feats
        self.selection = selection
        self.shortcuts = shortcuts
        by_name = classes if isinstance(classes, Mapping) else {c.metadata.name: c for c in classes}
        self._planned = plan_claims(claims, by_name, feats)

    def allocate(
        self,
        node: NodeLike,
        *,
        slices: Sequence[ResourceSlice] = (),
        allocated_devices: Iterable[DeviceID] = (),
        allocated_capacity: Mapping[DeviceID, Mapping[str, str | Fraction]] | None = None,
        pools: Sequence[Pool] | None = None,
        clock: Clock | None = None,
    ) -> Outcome:
        """Allocate all the claims together on ``node``, first fit in upstream search order.

        ``pools``: the node's pools when the caller already has them (``PoolIndex.pools_for``;
        ``slices`` is then not read). ``clock``: the filter timeout (without one the search
        is not limited in time).
        """
        feats = self.features
        # A set is read as it is (only during this call); anything else is copied once.
        held = (
            allocated_devices
            if isinstance(allocated_devices, set | frozenset)
            else frozenset(allocated_devices)
        )
        node_pools = pools if pools is not None else PoolIndex.of(slices, feats).pools_for(node)
        search = Search(
            pools=node_pools,
            allocated=held,
            allocated_capacity={
                dev: {k: v if isinstance(v, Fraction) else parse_quantity(v) for k, v in m.items()}
                for dev, m in allocated_capacity.items()
            }
            if allocated_capacity
            else {},
            features=feats,
            selection=self.selection or Selection(feats),
            clock=clock,
            node=node.name,
            shortcuts=self.shortcuts,
        )
        try:
            # The filter timeout holds inside one CEL evaluation too (cel.interruptible).
            with interruptible(search.check_deadline):
                search.start(self._planned)
                found = search.run()
        except AllocationFailedError as e:
            return Failed(e.keyword, e.message, tuple(search.notes))
        notes = tuple(search.notes)
        if not found:
            if any(p.invalid for p in node_pools):
                return Failed("invalid-pool", "invalid resource pools were encountered", notes)
            return Unschedulable(notes, search.stopped)
        return Allocated(
            {
                plan.claim.metadata.name: allocation_result(plan, picks, node, feats)
                for plan, picks in zip(search.plans, search.results, strict=True)
            },
            notes,
        )


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
    clock: Clock | None = None,
    shortcuts: bool = True,
) -> Outcome:
    """Allocate all ``claims`` together on ``node``: one ``Allocator`` call (its doc).

    Raises:
        ValueError: ``selection`` was made for other features.
    """
    return Allocator(
        claims, classes=classes, features=features, selection=selection, shortcuts=shortcuts
    ).allocate(
        node,
        slices=slices,
        allocated_devices=allocated_devices,
        allocated_capacity=allocated_capacity,
        pools=pools,
        clock=clock,
    )
