"""Event mode: place pods, then replay a stream of cluster changes, retrying pods as they come.

``replay(objects, events, hints=...)`` places the input's pods like ``schedule``, then applies
each watch event (``ADDED``/``MODIFIED``/``DELETED`` of a slice, claim, pod, class or node, as
kube-scheduler and the resource-claim controller would see it) and retries the waiting pods in
queue order: those the event can help (``queueinghints.woken``), or every one without hints.
``attempts`` counts the tries per pod; an event of another kind is a ``ValueError`` naming it.
Pure: objects in, result out. What each event changes: docs/guides/offline-tools.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from kvdev.host.allocation.allocator import Clock
from kvdev.host.allocation.cluster import apply_taint_rules
from kvdev.host.allocation.extended import class_mapping
from kvdev.host.allocation.features import Features
from kvdev.host.k8s import DeviceClass, K8sObject, Node, Pod, ResourceClaim, ResourceSlice
from kvdev.host.k8s.claim import AllocationResult, ResourceClaimStatus
from kvdev.host.scheduling.claims import ClaimKey
from kvdev.host.scheduling.queueinghints import ANY, Key, pod_keys, woken
from kvdev.host.scheduling.run import Scheduler, ScheduleResult, Unplaced

EVENT_TYPES = ("ADDED", "MODIFIED", "DELETED")


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    """One watch event: its type and the object."""

    type: str
    object: K8sObject


@dataclass(slots=True)
class EventRun:
    """The final placements, and how much retrying it took."""

    result: ScheduleResult
    attempts: dict[str, int] = field(default_factory=dict)  # "namespace/name" -> tries
    retried: list[int] = field(default_factory=list)  # per event: pods retried
    placed_by: list[int] = field(default_factory=list)  # per event: pods it let in

    @property
    def total_attempts(self) -> int:
        """Every try of every pod, the first ones included."""
        return sum(self.attempts.values())


def _key(obj: Pod | ResourceClaim) -> ClaimKey:
    return (obj.metadata.namespace or "default", obj.metadata.name)


def _drivers(allocation: AllocationResult | None) -> set[Key]:
    results = (allocation.devices.results if allocation and allocation.devices else None) or []
    return {("driver", r.driver) for r in results}


class _Replay:
    def __init__(self, scheduler: Scheduler, *, hints: bool) -> None:
        self.s = scheduler
        self.hints = hints
        self.queue: dict[ClaimKey, tuple[Pod, str, frozenset[Key]]] = {}
        self.run = EventRun(scheduler.result)
        self.gone: set[ClaimKey] = set()  # pods deleted by an event

    def attempt(self, pod: Pod) -> bool:
        key = _key(pod)
        name = f"{key[0]}/{key[1]}"
        self.run.attempts[name] = self.run.attempts.get(name, 0) + 1
        reason = self.s.try_place(pod)
        if reason is None:
            self.queue.pop(key, None)
            return True
        waits = pod_keys(pod, self.s.book, self.s.filter.classes, self.s.mapping)
        self.queue[key] = (pod, reason, waits)
        return False

    def start(self) -> None:
        for pod in self.s.pods:
            if pod.spec.node_name:
                self.s.bind(pod)
            else:
                self.attempt(pod)

    def event(self, index: int, event: ClusterEvent) -> None:
        keys = self.apply(index, event)
        self.s.epoch += 1  # cached "fits nowhere" answers expire
        waiting = [
            pod for pod, _, waits in self.queue.values() if not self.hints or woken(waits, keys)
        ]
        self.run.retried.append(len(waiting))
        placed = sum(self.attempt(pod) for pod in waiting)
        if isinstance(event.object, Pod) and event.type == "ADDED":
            placed += self.added_pod(event.object)
        self.run.placed_by.append(placed)

    def added_pod(self, pod: Pod) -> int:
        key = _key(pod)
        if key in self.queue or key in self.s.bound:
            return 0
        self.gone.discard(key)
        self.s.pods.append(pod)
        if pod.spec.node_name:
            self.s.bind(pod)
            return 0
        return int(self.attempt(pod))

    def apply(self, index: int, event: ClusterEvent) -> frozenset[Key]:
        obj, kind = event.object, event.type
        where = f"event {index}: {kind} {obj.kind} {obj.metadata.name}"
        if kind not in EVENT_TYPES:
            raise ValueError(f"{where}: type must be one of {', '.join(EVENT_TYPES)}")
        if isinstance(obj, ResourceSlice):
            if kind == "DELETED":
                self.s.view.remove_slice(obj.metadata.name)
            else:
                self.s.view.put_slice(apply_taint_rules([obj], self.s.rules)[0])
            return frozenset({("driver", obj.spec.driver)})
        if isinstance(obj, ResourceClaim):
            return self.claim(obj, deleted=kind == "DELETED")
        if isinstance(obj, Pod):
            return self.pod(obj) if kind == "DELETED" else frozenset()
        if isinstance(obj, DeviceClass):
            self.device_class(obj, deleted=kind == "DELETED")
            return frozenset({ANY})
        if isinstance(obj, Node) and kind != "DELETED":
            self.s.view.put_node(obj)
            return frozenset({ANY})
        raise ValueError(f"{where}: not an event kvdev-host schedule can replay")

    def claim(self, claim: ResourceClaim, *, deleted: bool) -> frozenset[Key]:
        key = _key(claim)
        old = self.s.book.claims.get(key)
        before = old.status.allocation if old and old.status else None
        after = None if deleted else (claim.status.allocation if claim.status else None)
        keys: set[Key] = {("claim", *key)}
        if before is not None and before != after:
            self.s.view.release(before)
            keys |= _drivers(before)
        if after is not None and after != before:
            self.s.view.take(after)
        if deleted:
            self.s.book.claims.pop(key, None)
        else:
            self.s.book.claims[key] = claim
        return frozenset(keys)

    def pod(self, pod: Pod) -> frozenset[Key]:
        key = _key(pod)
        self.queue.pop(key, None)
        self.gone.add(key)
        bound = self.s.bound.pop(key, None)
        if bound is None:
            return frozenset()
        self.s.view.by_name[bound.node].uncharge(bound.charge)
        for claim_key in bound.claims:
            claim = self.s.book.claims.get(claim_key)
            if claim is None or claim.status is None:
                continue
            me = bound.me.uid if bound.me else None
            reserved = [r for r in claim.status.reserved_for or [] if r.uid != me]
            allocation = claim.status.allocation
            if not reserved and allocation is not None:
                self.s.view.release(allocation)
                allocation = None
            status = ResourceClaimStatus.model_construct(
                **{**dict(claim.status), "reserved_for": reserved or None, "allocation": allocation}
            )
            self.s.book.claims[claim_key] = claim.model_copy(update={"status": status})
            self.s.changed[claim_key] = None
        return frozenset({ANY})

    def device_class(self, device_class: DeviceClass, *, deleted: bool) -> None:
        classes = self.s.filter.classes
        if deleted:
            classes.pop(device_class.metadata.name, None)
        else:
            classes[device_class.metadata.name] = device_class
        if self.s.features.DRAExtendedResource:
            self.s.mapping = class_mapping(list(classes.values()))

    def finish(self) -> EventRun:
        self.run.result = self.s.finish()
        self.run.result.placed = [p for p in self.run.result.placed if _key(p.pod) not in self.gone]
        self.run.result.unplaced = [Unplaced(pod, reason) for pod, reason, _ in self.queue.values()]
        return self.run


def replay(
    objects: Iterable[K8sObject],
    events: Sequence[ClusterEvent],
    *,
    hints: bool = True,
    features: Features | None = None,
    selector_cache: bool = True,
    filter_cache: bool = True,
    clock: Clock | None = None,
) -> EventRun:
    """Place the pods of ``objects``, then replay ``events`` (module docstring).

    Raises:
        ValueError: an event kvdev cannot replay.
    """
    scheduler = Scheduler(
        objects,
        features or Features(),
        selector_cache=selector_cache,
        filter_cache=filter_cache,
        clock=clock,
    )
    run = _Replay(scheduler, hints=hints)
    run.start()
    for index, event in enumerate(events):
        run.event(index, event)
    return run.finish()
