"""Whether one pod fits on one node, as kube-scheduler's DRA and resource-fit plugins decide.

Owns one pod's attempt (``Attempt``: its claims split into allocated and pending, its
requests, its pending claims planned once for all the nodes tried: ``allocator.Allocator``),
the per-node check and its cache. The check, in order:

1. claims already allocated must be reachable: their ``nodeSelector`` matches the node
   ("resourceclaim not available on the node");
2. the pod's own requests fit the node's allocatable ("Insufficient <resource>");
3. the allocator finds devices for all pending claims together on the node (the pod's
   claims, its PodGroup's claims not yet allocated, the extended-resource claim) ("cannot
   allocate all claims"); an allocator error fails the pod, as upstream's Filter error does;
4. the requests plus what the new and the pod's existing devices take through
   ``nodeAllocatableResources`` fit ("Insufficient <resource>").

Cache: each node remembers the pod signatures it rejected, with the reason, until its stamp
(``ClusterView.stamp``: the node's and its pools' versions) changes; meanwhile the same pod
shape gets the same answer without running the allocator again. The signature is everything
the check reads of the pod: its pending claims' specs, its allocated claims, its containers.
Pure.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from kvdev.host.allocation import allocator
from kvdev.host.allocation.allocator import (
    Allocated,
    Allocator,
    Clock,
    Features,
    Selection,
)
from kvdev.host.allocation.extended import SpecialClaim, special_claim
from kvdev.host.allocation.pools import selector_matches
from kvdev.host.k8s import Pod, ResourceClaim
from kvdev.host.k8s.claim import AllocationResult, ResourceClaimSpec
from kvdev.host.k8s.resource import DeviceClass
from kvdev.host.scheduling.accounting import (
    Amounts,
    add_amounts,
    containers,
    device_amounts,
    pod_requests,
    shortfall,
)
from kvdev.host.scheduling.state import ClusterView, NodeState

NOT_REACHABLE = "resourceclaim not available on the node"
CANNOT_ALLOCATE = "cannot allocate all claims"


@dataclass(slots=True)
class Attempt:
    """One pod, ready for filtering (make it with ``NodeFilter.attempt``)."""

    pod: Pod
    allocated: Sequence[ResourceClaim]
    pending: Sequence[ResourceClaim]
    mapping: Mapping[str, str]  # extended resource name -> DeviceClass
    containers: str  # the containers' part of the signature
    memo: dict[tuple[str, frozenset[str]], Amounts]  # requests by (containers, listed)
    spec_key: Callable[[ResourceClaimSpec], str]  # a pending claim's part of the signature
    _special: dict[frozenset[str], SpecialClaim | None] = field(default_factory=dict)
    # the pending claims with the extended claim of ``special``'s key, planned once
    allocators: dict[frozenset[str], Allocator] = field(default_factory=dict)
    _signature: str | None = None

    @property
    def signature(self) -> str:
        """Everything the check reads of the pod (module docstring), made when first asked.

        Only a cache that holds something asks: a pod placed on the first node tried never
        serialises its claims.
        """
        if self._signature is None:
            names = [f"{c.metadata.namespace}/{c.metadata.name}" for c in self.allocated]
            specs = [self.spec_key(c.spec) for c in self.pending]
            self._signature = "\n".join([*specs, *names, self.containers])
        return self._signature

    def special(self, listed: frozenset[str]) -> SpecialClaim | None:
        """The extended-resource claim on a node listing ``listed`` (device plugins win)."""
        key = listed.intersection(self.mapping)
        if key not in self._special:
            self._special[key] = special_claim(self.pod, dict(self.mapping), key)
        return self._special[key]

    def requests(self, listed: frozenset[str]) -> Amounts:
        """Requests and one pod slot, without DRA-backed extended resources not listed."""
        key = (self.containers, listed.intersection(self.mapping))
        found = self.memo.get(key)
        if found is None:
            skip = self.mapping.keys() - key[1]
            found = {**pod_requests(self.pod, skip), "pods": Fraction(1)}
            self.memo[key] = found
        return found


@dataclass(frozen=True, slots=True)
class Fit:
    """The pod fits: the new allocations by claim name, its extended claim, node charges."""

    results: Mapping[str, AllocationResult]
    special: SpecialClaim | None
    charge: Amounts


@dataclass(frozen=True, slots=True)
class Failed:
    """The allocator failed (an error, not "does not fit"): the pod cannot be scheduled."""

    message: str


class NodeFilter:
    """The per-node check of the module docstring, with its rejection cache."""

    def __init__(
        self,
        view: ClusterView,
        classes: Mapping[str, DeviceClass],
        features: Features,
        *,
        selector_cache: bool = True,
        filter_cache: bool = True,
        clock: Clock | None = None,
    ) -> None:
        self.view = view
        self.clock = clock
        self.classes = dict(classes)  # events may change them (``events``)
        self.features = features
        self.selection = Selection(features) if selector_cache else None
        self.filter_cache = filter_cache
        # per node: its stamp and the pod signatures it rejected since then, with the reason
        self._rejected: dict[str, tuple[tuple[int, ...], dict[str, str]]] = {}
        self._specs: dict[int, tuple[ResourceClaimSpec, str]] = {}
        self._requests: dict[tuple[str, frozenset[str]], Amounts] = {}

    def _spec(self, spec: ResourceClaimSpec) -> str:
        # Claims made from one template share its spec object: serialise it once.
        hit = self._specs.get(id(spec))
        if hit is None:
            hit = (spec, json.dumps(spec.to_json_dict(), sort_keys=True))
            self._specs[id(spec)] = hit
        return hit[1]

    def attempt(
        self,
        pod: Pod,
        allocated: Sequence[ResourceClaim],
        pending: Sequence[ResourceClaim],
        mapping: Mapping[str, str],
    ) -> Attempt:
        """Prepare a pod whose claims are split into allocated and pending ones."""
        spec = pod.spec
        box = [c.to_json_dict() for c in (*(spec.init_containers or ()), *spec.containers)]
        containers = json.dumps(box, sort_keys=True)
        return Attempt(pod, allocated, pending, mapping, containers, self._requests, self._spec)

    def check(self, attempt: Attempt, node: NodeState) -> Fit | Failed | str:
        """Fit, Failed, or the reason the node is rejected."""
        for claim in attempt.allocated:
            alloc = claim.status.allocation if claim.status else None
            selector = alloc.node_selector if alloc else None
            if selector is not None and not selector_matches(selector, node.info):
                return NOT_REACHABLE
        if not self.filter_cache:
            return self._check(attempt, node)
        stamp = self.view.stamp(node)
        known = self._rejected.get(node.name)
        if known is None or known[0] != stamp:  # the node changed: forget what it rejected
            known = (stamp, {})
            self._rejected[node.name] = known
        hit = known[1].get(attempt.signature) if known[1] else None
        if hit is not None:
            return hit
        out = self._check(attempt, node)
        if isinstance(out, str):
            known[1][attempt.signature] = out
        return out

    def _check(self, attempt: Attempt, node: NodeState) -> Fit | Failed | str:
        listed = node.listed()
        requests = attempt.requests(listed)
        short = shortfall(node.allocatable, node.used, requests)
        if short:
            return f"Insufficient {', '.join(short)}"
        extended = self.features.DRAExtendedResource
        special = attempt.special(listed) if extended else None
        results: Mapping[str, AllocationResult] = {}
        if attempt.pending or special is not None:
            # Planned once per pod and extended claim, not once per node (upstream's
            # NewAllocator per pod, Allocate per node).
            key = listed.intersection(attempt.mapping) if extended else frozenset()
            planned = attempt.allocators.get(key)
            if planned is None:
                planned = Allocator(
                    [*attempt.pending, *([special.claim] if special else [])],
                    classes=self.classes,
                    features=self.features,
                    selection=self.selection,
                )
                attempt.allocators[key] = planned
            taken, shared = self.view.in_use(node)
            outcome = planned.allocate(
                node.info,
                pools=self.view.pools(node),
                allocated_devices=taken,
                allocated_capacity=shared,
                clock=self.clock,
            )
            if isinstance(outcome, allocator.Failed):
                return Failed(f"{outcome.keyword}: {outcome.message}")
            if not isinstance(outcome, Allocated):
                return CANNOT_ALLOCATE
            results = outcome.results
        charge = dict(requests)
        n = containers(attempt.pod)
        devices = functools.partial(self.view.device, node)
        for result in results.values():
            add_amounts(
                charge, device_amounts(result, devices, mapping=True, pods=1, n_containers=n)
            )
        for claim in attempt.allocated:
            alloc = claim.status.allocation if claim.status else None
            if alloc is not None:
                more = device_amounts(alloc, devices, mapping=False, pods=1, n_containers=n)
                add_amounts(charge, more)
        short = shortfall(node.allocatable, node.used, charge)
        if short:
            return f"Insufficient {', '.join(short)}"
        return Fit(results, special, charge)
