"""The controller's Prometheus metrics, in a registry of its own (never the global one).

Owns the names, types, labels and help texts (``kvdev_controller_*``; counters end in
``_total``, the histogram is in seconds), and their exposition (``exposition``: the text
format ``/metrics`` serves). What the controller does increments them (``live``); what it
holds is read when scraped (``State``: each reflector's lists and watches, the VMIs and claims
in the cache, the work queue's depth, whether it leads; ``guestwatch.Counts``: the guests' NICs
and VMIs by state), so the watch loops, the cache and the guest tracker carry no metric code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kvdev.host.controller.guests import NicState, UnreportedReason
from kvdev.host.controller.guestwatch import Counts

PREFIX = "kvdev_controller_"
CONTENT_TYPE = CONTENT_TYPE_LATEST
# From a watch event to the ConfigMap write landing: tens of ms on a quiet API server,
# seconds when it is busy or a write is retried after a conflict.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@dataclass(frozen=True, slots=True)
class Watched:
    """One reflector, when scraped: its resource, lists and watches opened so far."""

    resource: str
    lists: int
    watches: int


@dataclass(frozen=True, slots=True)
class State:
    """What the controller holds, when scraped."""

    watched: Sequence[Watched]
    vmis: int
    claims: int
    leader: bool
    queued: int = 0


class _StateCollector(Collector):
    """The metrics read from the controller's state at each scrape."""

    def __init__(self, state: Callable[[], State]) -> None:
        self._state = state

    def collect(self) -> Iterator[Metric]:
        state = self._state()
        relists = CounterMetricFamily(
            f"{PREFIX}relists",
            "Lists of a resource after its first (410 Gone, or a failed list or watch).",
            labels=["resource"],
        )
        restarts = CounterMetricFamily(
            f"{PREFIX}watch_restarts",
            "Watches of a resource opened again after one ended (timeout, error, 410).",
            labels=["resource"],
        )
        for w in state.watched:
            relists.add_metric([w.resource], max(w.lists - 1, 0))
            restarts.add_metric([w.resource], max(w.watches - 1, 0))
        yield relists
        yield restarts
        yield GaugeMetricFamily(
            f"{PREFIX}vmis_tracked", "VirtualMachineInstances in the cache.", value=state.vmis
        )
        yield GaugeMetricFamily(
            f"{PREFIX}claims_tracked", "ResourceClaims in the cache.", value=state.claims
        )
        yield GaugeMetricFamily(
            f"{PREFIX}queue_depth",
            "VMIs waiting to be synced (ready or delayed), not counting those being synced.",
            value=state.queued,
        )
        yield GaugeMetricFamily(
            f"{PREFIX}leader",
            "1 while this replica holds the Lease (or leader election is off), else 0.",
            value=1 if state.leader else 0,
        )


class _GuestCollector(Collector):
    """The guests' verdicts (``guestwatch.Tracker.counts``), read at each scrape."""

    def __init__(self, counts: Callable[[], Counts]) -> None:
        self._counts = counts

    def collect(self) -> Iterator[Metric]:
        counts = self._counts()
        nics = GaugeMetricFamily(
            f"{PREFIX}guest_nics",
            "Described NICs by what their guest reports (Applied, Differs, Unreported, Pending).",
            labels=["state"],
        )
        for state in NicState:
            nics.add_metric([state.value], counts.nics.get(state, 0))
        yield nics
        unreported = GaugeMetricFamily(
            f"{PREFIX}guest_unreported_nics",
            "Unreported NICs by reason (no_guest_agent, vmi_not_running, mac_not_seen: the "
            "guest agent reports interfaces but not this MAC, mac_unknown: no MAC described).",
            labels=["reason"],
        )
        for reason in UnreportedReason:
            unreported.add_metric([reason.value], counts.unreported.get(reason, 0))
        yield unreported
        vmis = GaugeMetricFamily(
            f"{PREFIX}guest_vmis",
            "VMIs by their worst NIC's state (Differs > Unreported > Pending > Applied).",
            labels=["state"],
        )
        for state in NicState:
            vmis.add_metric([state.value], counts.vmis.get(state, 0))
        yield vmis
        yield GaugeMetricFamily(
            f"{PREFIX}guest_differs_oldest_seconds",
            "Age of the oldest NIC continuously in Differs (0 if none).",
            value=counts.differs_oldest_seconds,
        )


class Metrics:
    """The counters and the histogram the controller moves, and the registry serving them."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.renders = Counter(
            f"{PREFIX}configmap_renders", "VMI ConfigMaps rendered (syncs).", registry=r
        )
        self.writes = Counter(
            f"{PREFIX}configmap_writes",
            "ConfigMap decisions carried out, by result (created, updated, unchanged).",
            ["result"],
            registry=r,
        )
        self.conflicts = Counter(
            f"{PREFIX}configmap_conflicts",
            "Writes that met a 409 conflict (or a 404 on an update) and were decided again.",
            registry=r,
        )
        self.errors = Counter(
            f"{PREFIX}errors",
            "Syncs that did not write what they rendered, by reason "
            "(refused, retryable, permanent, exception: the sync raised, backed off).",
            ["reason"],
            registry=r,
        )
        self.owner_refusals = Counter(
            f"{PREFIX}configmap_owner_refusals",
            "Writes refused because another object (another VMI) controls the ConfigMap.",
            registry=r,
        )
        self.latency = Histogram(
            f"{PREFIX}event_to_write_seconds",
            "From the watch event that changed a VMI's inputs to its ConfigMap write landing.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.events = Counter(
            f"{PREFIX}events",
            "Kubernetes Events on VMIs, by result (created, patched, dropped_spam, "
            "dropped_queue, failed).",
            ["result"],
            registry=r,
        )
        for result in ("created", "updated", "unchanged"):
            self.writes.labels(result)
        for reason in ("refused", "retryable", "permanent", "exception"):
            self.errors.labels(reason)
        for result in ("created", "patched", "dropped_spam", "dropped_queue", "failed"):
            self.events.labels(result)

    def watch_state(self, state: Callable[[], State]) -> None:
        """Read ``state()`` at each scrape (once per registry)."""
        self.registry.register(_StateCollector(state))

    def watch_guests(self, counts: Callable[[], Counts]) -> None:
        """Read the guests' ``counts()`` at each scrape (once per registry)."""
        self.registry.register(_GuestCollector(counts))

    def exposition(self) -> bytes:
        """The Prometheus text format of every metric."""
        return generate_latest(self.registry)


__all__ = ["CONTENT_TYPE", "LATENCY_BUCKETS", "PREFIX", "Metrics", "State", "Watched"]
