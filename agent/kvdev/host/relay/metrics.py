"""The node relay's Prometheus metrics, in a registry of its own (never the global one).

Owns the names, types, labels and help texts (``kvdev_relay_*``) and how a pass
(``live.Pass``) moves them: ``passes_total{outcome}`` counts passes (``complete``: every
write, delete and list succeeded; ``failed``: one did not, or the read of the directories
gave no answer), ``last_complete_pass_timestamp_seconds`` is when the last complete pass
ended (what the chart's alert watches: a node whose relay stops publishing stops moving it),
``records`` how many records of this node the last complete pass left in the API server.
The command serves the registry (``--metrics-address``).
"""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge

from kvdev.host.relay.live import Pass

PREFIX: Final = "kvdev_relay_"
OUTCOMES: Final = ("complete", "failed")


class RelayMetrics:
    """The relay's counter and gauges, in ``self.registry``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.passes = Counter(
            f"{PREFIX}passes",
            "Relay passes by outcome (complete: every request succeeded; failed: one did not, "
            "or the read of the directories gave no answer).",
            ["outcome"],
            registry=r,
        )
        self.last_complete = Gauge(
            f"{PREFIX}last_complete_pass_timestamp_seconds",
            "Unix time the last complete pass ended (0: none yet).",
            registry=r,
        )
        self.records = Gauge(
            f"{PREFIX}records",
            "This node's relay records in the API server after the last complete pass.",
            registry=r,
        )
        for outcome in OUTCOMES:  # every series exists from the first scrape on
            self.passes.labels(outcome)

    def observe(self, done: Pass) -> None:
        """Count one pass; a complete one moves the timestamp and the record count."""
        if done.failed or done.records is None:
            self.passes.labels("failed").inc()
            return
        self.passes.labels("complete").inc()
        self.records.set(done.records)
        self.last_complete.set_to_current_time()


__all__ = ["OUTCOMES", "PREFIX", "RelayMetrics"]
