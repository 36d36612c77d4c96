"""The agent's counters in Prometheus's text format: the one adapter of ``prometheus_client``.

``Exposition`` turns the latest ``core.metrics.View`` into the text a scraper or a node
exporter's textfile collector reads (``GET /v1/metrics``): a ``Collector`` of our own yields
the metric families from the view at each scrape, on a private ``CollectorRegistry`` (not the
library's global one, which would add the process's own metrics). The API imports this module
at the first scrape only, so that the agent's start and idle memory do not pay for the library.
The names, types and labels are listed in docs/reference/metrics.md.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterator, Mapping
from typing import Final, TypeVar

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from kvdev.guest.core.metrics import BUCKETS, View

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
PREFIX: Final = "kvdev_agent_"


class _Agent(Collector):
    """Yields the families of the view ``read()`` returns (one read per scrape: one pass)."""

    def __init__(self, read: Callable[[], View], version: str) -> None:
        self._read = read
        self._version = version

    def collect(self) -> Iterator[Metric]:
        view = self._read()
        passes = CounterMetricFamily(
            PREFIX + "passes",
            "Reconcile passes, by what woke the agent for them and by result",
            labels=["trigger", "result"],
        )
        for (trigger, result), n in sorted(view.passes.items()):
            passes.add_metric([trigger, result], n)
        yield passes
        yield _by_kind("steps_applied", "Steps applied, by kind", view.steps)
        yield _by_kind("step_errors", "Steps that failed, by kind", view.step_errors)
        yield CounterMetricFamily(
            PREFIX + "drift_restored",
            "Steps that put back what something else changed on a managed link",
            value=view.drift_restored,
        )
        yield _by_kind(
            "metadata_errors",
            "Metadata errors as they appeared (invalid, unavailable, truncated)",
            view.metadata_errors,
        )
        cumulative, total = [], 0
        for bound, n in zip((*map(_bound, BUCKETS), "+Inf"), view.buckets, strict=True):
            total += n
            cumulative.append((bound, float(total)))
        yield HistogramMetricFamily(
            PREFIX + "pass_duration_seconds",
            "How long a reconcile pass took",
            buckets=cumulative,
            sum_value=view.duration_sum,
        )
        yield _labelled(
            GaugeMetricFamily(
                PREFIX + "devices",
                "Described devices per phase after the last pass (Unmanaged: NICs nobody "
                "describes)",
                labels=["phase"],
            ),
            view.phases,
        )
        if view.last_ok is not None:
            yield GaugeMetricFamily(
                PREFIX + "last_ok_pass_timestamp_seconds",
                "When the last pass that applied every step and saved its state ended",
                value=view.last_ok,
            )
        info = GaugeMetricFamily(
            PREFIX + "build_info", "The agent's version", labels=["version", "python"]
        )
        info.add_metric([self._version, platform.python_version()], 1)
        yield info


_F = TypeVar("_F", CounterMetricFamily, GaugeMetricFamily)


def _labelled(family: _F, counts: Mapping[str, int]) -> _F:
    """``family`` with one sample per ``counts`` item (its one label's value), in label order."""
    for value, n in sorted(counts.items()):
        family.add_metric([value], n)
    return family


def _by_kind(name: str, documentation: str, counts: Mapping[str, int]) -> CounterMetricFamily:
    return _labelled(CounterMetricFamily(PREFIX + name, documentation, labels=["kind"]), counts)


def _bound(value: float) -> str:
    return repr(float(value))  # "0.005", "1.0": the form the text format's clients write


class Exposition:
    """The text of the view ``read()`` returns, rendered anew at each ``render()``."""

    content_type: Final = CONTENT_TYPE

    def __init__(self, read: Callable[[], View], version: str) -> None:
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(_Agent(read, version))

    def render(self) -> bytes:
        """The text exposition (``CONTENT_TYPE``) of the counters now."""
        return generate_latest(self._registry)
