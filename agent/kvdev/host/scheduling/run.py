"""``schedule``: place pods in input order over the nodes, writing allocations back.

Owns the scheduling loop: resolve each pod's claims, check the ``reservedFor`` limit, scan
the nodes, commit the first node that fits (claims' ``status.allocation`` and
``reservedFor``, devices and capacity in use, node usage), and summarise why pods did not
fit. Pure: objects in, result out; timing and printing belong to the command.

Node choice: kube-scheduler filters nodes from a start index that rotates across pods
(``nextStartNodeIndex``), stops after "enough" feasible nodes and scores them. kvdev takes
the first feasible node of the same rotating scan (the start moves past every node examined),
which is deterministic and spreads pods over nodes in input order; it does not score.

Pods that already have ``spec.nodeName`` are bound: their requests count against that node
and they are not output. PodGroup claims are allocated with the first member placed and
reserved for the group once, so the 256-entry ``reservedFor`` limit counts the group as one
consumer; later members are filtered to where that allocation is reachable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TypeVar

from kvdev.host.allocation.allocator import Clock
from kvdev.host.allocation.cluster import apply_taint_rules
from kvdev.host.allocation.extended import SpecialClaim, class_mapping
from kvdev.host.allocation.features import Features
from kvdev.host.k8s import (
    DeviceClass,
    DeviceTaintRule,
    K8sObject,
    Node,
    Pod,
    PodGroup,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)
from kvdev.host.k8s.claim import (
    RESERVED_FOR_MAX,
    AllocationResult,
    ResourceClaimConsumerReference,
    ResourceClaimStatus,
)
from kvdev.host.scheduling.accounting import pod_requests
from kvdev.host.scheduling.claims import ClaimBook, ClaimKey, PodClaims
from kvdev.host.scheduling.nodefilter import Failed, Fit, NodeFilter
from kvdev.host.scheduling.state import ClusterView

Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class Placement:
    """A placed pod: its node, generated claim names and extended-resource claim."""

    pod: Pod
    node: str
    claim_statuses: tuple[tuple[str, str], ...]  # (pod claim name, claim name), templates
    special: SpecialClaim | None


@dataclass(frozen=True, slots=True)
class Bound:
    """What a placed pod holds: its node, what it charged there, the claims it reserved.

    ``claims``: those reserved for the pod itself (not for its PodGroup); ``me``: its
    consumer reference. An event deleting the pod gives all of it back (``events``).
    """

    node: str
    charge: dict[str, Fraction]
    claims: tuple[ClaimKey, ...]
    me: ResourceClaimConsumerReference | None


@dataclass(frozen=True, slots=True)
class Unplaced:
    """A pod that could not be placed, and why."""

    pod: Pod
    reason: str


@dataclass(slots=True)
class ScheduleResult:
    """Placed and unplaced pods in input order, and the claims the run changed."""

    placed: list[Placement] = field(default_factory=list)
    unplaced: list[Unplaced] = field(default_factory=list)
    claims: list[ResourceClaim] = field(default_factory=list)
    allocated_claims: int = 0

    def reasons(self) -> dict[str, int]:
        """Unplaced pods per reason, most frequent first."""
        counts: dict[str, int] = {}
        for u in self.unplaced:
            counts[u.reason] = counts.get(u.reason, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _summary(rejections: dict[str, int], nodes: int) -> str:
    """Upstream's "0/N nodes are available: ..." message (reasons sorted by name)."""
    if not nodes:
        return "no nodes available to schedule pods"
    parts = ", ".join(f"{n} {reason}" for reason, n in sorted(rejections.items()))
    return f"0/{nodes} nodes are available: {parts}."


_K = TypeVar("_K", bound=K8sObject)


def _of(objs: list[K8sObject], kinds: Mapping[type, list[K8sObject]], kind: type[_K]) -> list[_K]:
    """The objects of one kind (subclasses included), in input order; ``kinds``: by class."""
    classes = [t for t in kinds if issubclass(t, kind)]
    if len(classes) > 1:
        return [o for o in objs if isinstance(o, kind)]
    return list(kinds[classes[0]]) if classes else []  # type: ignore[arg-type]


class Scheduler:
    """One run's state: the cluster view, the claims, the pods, the caches (module docstring)."""

    def __init__(
        self,
        objects: Iterable[K8sObject],
        features: Features,
        *,
        selector_cache: bool,
        filter_cache: bool,
        clock: Clock | None,
    ) -> None:
        objs = list(objects)
        kinds: dict[type, list[K8sObject]] = {}  # by class, in input order: one pass
        for o in objs:
            kinds.setdefault(type(o), []).append(o)
        classes = _of(objs, kinds, DeviceClass)
        self.rules = _of(objs, kinds, DeviceTaintRule)
        slices = apply_taint_rules(_of(objs, kinds, ResourceSlice), self.rules)
        self.features = features
        self.view = ClusterView(_of(objs, kinds, Node), slices, features)
        self.book = ClaimBook.of(
            _of(objs, kinds, ResourceClaim),
            _of(objs, kinds, ResourceClaimTemplate),
            _of(objs, kinds, PodGroup),
        )
        self.pods = _of(objs, kinds, Pod)
        self.mapping = class_mapping(classes) if features.DRAExtendedResource else {}
        self.filter = NodeFilter(
            self.view,
            {c.metadata.name: c for c in classes},
            features,
            selector_cache=selector_cache,
            filter_cache=filter_cache,
            clock=clock,
        )
        for claim in self.book.claims.values():
            alloc = claim.status.allocation if claim.status else None
            if alloc is not None:
                self.view.take(alloc)
        self.changed: dict[ClaimKey, None] = {}
        # Like the scheduler's unschedulable queue: a pod shape that fitted no node is not
        # tried again until something was placed (the epoch moves with every placement).
        self.epoch = 0
        self.failed: dict[str, tuple[int, str]] = {}
        self.start = 0
        self.result = ScheduleResult()
        self.bound: dict[ClaimKey, Bound] = {}  # placed pods by (namespace, name)

    def bind(self, pod: Pod) -> None:
        """A pod already on a node: its requests count there."""
        node = self.view.by_name.get(pod.spec.node_name or "")
        if node is not None:
            node.charge({**pod_requests(pod, self.mapping.keys()), "pods": Fraction(1)})
            self.epoch += 1

    def _limit(self, pc: PodClaims) -> str | None:
        for key, owner in zip(pc.keys, pc.owners, strict=True):
            claim = self.book.claims[key]
            reserved = (claim.status.reserved_for if claim.status else None) or []
            if owner.uid not in {r.uid for r in reserved} and len(reserved) >= RESERVED_FOR_MAX:
                return (
                    f"resourceclaim {key[0]}/{key[1]} is reserved for {RESERVED_FOR_MAX} "
                    "consumers already (the reservedFor limit)"
                )
        return None

    def place(self, pod: Pod) -> None:
        """Try to place ``pod``; a pod that does not fit is added to ``result.unplaced``."""
        reason = self.try_place(pod)
        if reason is not None:
            self.result.unplaced.append(Unplaced(pod, reason))

    def try_place(self, pod: Pod) -> str | None:
        """Place ``pod`` on the first node of the scan that fits; None, or why it does not."""
        if not self.view.nodes:
            return _summary({}, 0)
        pc = self.book.resolve(pod)
        problem = pc.problem or self._limit(pc)
        if problem is not None:
            return problem
        claims = [self.book.claims[k] for k in pc.keys]
        attempt = self.filter.attempt(
            pod,
            allocated=[c for c in claims if c.status and c.status.allocation],
            pending=[c for c in claims if not (c.status and c.status.allocation)],
            mapping=self.mapping,
        )
        nodes = self.view.nodes
        known = self.failed.get(attempt.signature) if self.failed else None
        if known is not None and known[0] == self.epoch:
            return known[1]
        rejections: dict[str, int] = {}
        for step in range(len(nodes)):
            node = nodes[(self.start + step) % len(nodes)]
            out = self.filter.check(attempt, node)
            if isinstance(out, Failed):
                self.start = (self.start + step + 1) % len(nodes)
                return out.message
            if isinstance(out, Fit):
                self.start = (self.start + step + 1) % len(nodes)
                self._commit(pod, pc, node.name, out)
                return None
            rejections[out] = rejections.get(out, 0) + 1
        reason = _summary(rejections, len(nodes))
        if self.filter.filter_cache:
            self.failed[attempt.signature] = (self.epoch, reason)
        return reason

    def _commit(self, pod: Pod, pc: PodClaims, node_name: str, fit: Fit) -> None:
        node = self.view.by_name[node_name]
        ns = pod.metadata.namespace or "default"
        keys = list(zip(pc.keys, pc.owners, strict=True))
        if fit.special is not None:
            key = (ns, fit.special.claim.metadata.name)
            self.book.claims[key] = fit.special.claim
            assert pc.me is not None
            keys.append((key, pc.me))
        for key, owner in keys:
            claim = self.book.claims[key]
            new = fit.results.get(key[1])
            self.book.claims[key] = _reserve(claim, owner, new)
            if new is not None:
                self.view.take(new)
                self.result.allocated_claims += 1
            self.changed[key] = None
        node.charge(fit.charge)
        self.epoch += 1
        self.result.placed.append(Placement(pod, node_name, pc.templated, fit.special))
        owned = tuple(k for k, o in keys if o.uid == pc.me.uid) if pc.me is not None else ()
        self.bound[(ns, pod.metadata.name)] = Bound(node_name, dict(fit.charge), owned, pc.me)

    def run(self, progress: Progress | None) -> ScheduleResult:
        """Place the input's pods in order; the result (claims changed included)."""
        total = len(self.pods)
        for done, pod in enumerate(self.pods, 1):
            if pod.spec.node_name:
                self.bind(pod)
            else:
                self.place(pod)
            if progress is not None:
                progress(done, total)
        return self.finish()

    def finish(self) -> ScheduleResult:
        """The result with the claims the run changed, in the order they first changed."""
        self.result.claims = [self.book.claims[k] for k in self.changed if k in self.book.claims]
        return self.result


def _reserve(
    claim: ResourceClaim,
    owner: ResourceClaimConsumerReference,
    allocation: AllocationResult | None,
) -> ResourceClaim:
    status = claim.status or ResourceClaimStatus()
    reserved = list(status.reserved_for or [])
    if owner.uid not in {r.uid for r in reserved}:
        reserved.append(owner)
    update: dict[str, object] = {"reserved_for": reserved}
    if allocation is not None:
        update["allocation"] = allocation
    return claim.model_copy(update={"status": status.model_copy(update=update)})


def schedule(
    objects: Iterable[K8sObject],
    *,
    features: Features | None = None,
    selector_cache: bool = True,
    filter_cache: bool = True,
    progress: Progress | None = None,
    clock: Clock | None = None,
) -> ScheduleResult:
    """Place every Pod of ``objects`` without ``spec.nodeName``, in input order.

    ``selector_cache``: share CEL selector results across allocator runs (off: each node
    check evaluates afresh, for comparison). ``filter_cache``: remember node rejections
    while the node is unchanged (``nodefilter``). ``progress(done, total)`` after each pod.
    ``clock``: the filter timeout of each node's allocation (none: no limit).
    """
    return Scheduler(
        objects,
        features or Features(),
        selector_cache=selector_cache,
        filter_cache=filter_cache,
        clock=clock,
    ).run(progress)
