"""The agent's counters: what its passes did, kept as plain numbers for ``GET /v1/metrics``.

``Metrics.record`` is called by the serving loop after each pass (in the loop's thread, the
only writer) with what the pass did; it updates plain ints and dicts, then publishes a frozen
``View`` by one reference assignment, which the API's thread reads at a scrape without a lock
and always whole (never half a pass). What is counted:

* passes, by what woke the loop for them (``TRIGGERS``) and by result (``RESULTS``: ``ok``
  every step applied and the state saved, ``error`` a step failed or state was not saved,
  ``failed`` the pass itself did not complete, e.g. an interrupted dump: retried);
* steps applied and steps failed, by kind (the step classes of ``core.steps``);
* drift restored: steps applied by a pass that acted on no new metadata, after a pass that
  left nothing failed: what the links lost since then (someone else changed them, as the
  loop's drift streak counts them);
* metadata errors as they appear (not again on every pass while they last), by kind
  (``METADATA_ERRORS``): ``invalid`` a file or device description kvdev cannot use (the status's
  metadata errors), ``unavailable`` and ``truncated`` the conditions of the same names;
* the pass duration histogram (seconds, ``BUCKETS``), the devices per phase after the last pass
  (``Unmanaged``: guest NICs nobody describes) and when the last ``ok`` pass ended.

Pure: the caller gives the durations and timestamps; no I/O and no third-party import (the
exposition in Prometheus's text format is ``adapters.exposition``, imported at the first
scrape only).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from kvdev._records import compared
from kvdev.guest.core.status import Phase, Status
from kvdev.guest.core.steps import Step, StepResult

TRIGGERS: Final = ("start", "metadata", "udev", "link", "timer", "verify", "signal", "api")
RESULTS: Final = ("ok", "error", "failed")
METADATA_ERRORS: Final = ("invalid", "unavailable", "truncated")
STEP_KINDS: Final = tuple(sorted(cls.__name__ for cls in Step.__subclasses__()))
PHASES: Final = tuple(p.value for p in Phase)
BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_CONDITIONS: Final = {"MetadataUnavailable": "unavailable", "MetadataTruncated": "truncated"}


class PassOutcome(Protocol):
    """What ``record`` reads of a pass (``reconciler.Outcome`` has it)."""

    @property
    def status(self) -> Status:
        """The status after the pass (the previous one when the pass failed)."""
        ...

    @property
    def results(self) -> Sequence[StepResult]:
        """One result per step applied."""
        ...

    @property
    def failed(self) -> bool:
        """The pass itself did not complete."""
        ...

    @property
    def unsaved(self) -> bool:
        """State could not be saved."""
        ...

    @property
    def new_metadata(self) -> bool:
        """It acted on metadata unlike the pass before."""
        ...


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class View:
    """The counters at the end of one pass; never changed once published."""

    passes: Mapping[tuple[str, str], int]  # (trigger, result) -> passes
    steps: Mapping[str, int]  # step kind -> applied
    step_errors: Mapping[str, int]  # step kind -> failed
    drift_restored: int
    metadata_errors: Mapping[str, int]  # kind -> errors that appeared
    buckets: tuple[int, ...]  # passes per BUCKETS bound, not cumulative, + one for +Inf
    duration_sum: float  # seconds, all passes
    phases: Mapping[str, int]  # devices per phase after the last completed pass
    last_ok: float | None  # wall-clock seconds when the last ok pass ended


class Metrics:
    """The counters, written by one thread (the loop), read through ``view`` by any."""

    def __init__(self) -> None:
        self._passes = {(t, r): 0 for t in TRIGGERS for r in RESULTS}
        self._steps = dict.fromkeys(STEP_KINDS, 0)
        self._step_errors = dict.fromkeys(STEP_KINDS, 0)
        self._drift = 0
        self._metadata_errors = dict.fromkeys(METADATA_ERRORS, 0)
        self._buckets = [0] * (len(BUCKETS) + 1)
        self._duration = 0.0
        self._phases = dict.fromkeys(PHASES, 0)
        self._last_ok: float | None = None
        self._seen: frozenset[tuple[str, str]] = frozenset()  # metadata errors holding now
        self.view = self._freeze()

    def record(
        self,
        trigger: str,
        outcome: PassOutcome,
        previous: PassOutcome | None,
        *,
        seconds: float,
        now: float,
    ) -> None:
        """Count one pass that took ``seconds`` and ended at ``now`` (wall clock)."""
        if outcome.failed:
            result = "failed"
        elif outcome.unsaved or not all(r.ok for r in outcome.results):
            result = "error"
        else:
            result = "ok"
        key = (trigger, result)
        self._passes[key] = self._passes.get(key, 0) + 1
        self._buckets[bisect.bisect_left(BUCKETS, seconds)] += 1
        self._duration += seconds
        if not outcome.failed:  # a failed pass carries the previous status: nothing new
            self._count_steps(outcome, previous)
            self._count_metadata_errors(outcome.status)
            self._phases = dict.fromkeys(PHASES, 0)
            for phase, n in outcome.status.counts.items():
                self._phases[phase] = n
            self._phases[Phase.UNMANAGED.value] += len(outcome.status.unmanaged)
        if result == "ok":
            self._last_ok = now
        self.view = self._freeze()

    def _count_steps(self, outcome: PassOutcome, previous: PassOutcome | None) -> None:
        applied = 0
        for r in outcome.results:
            kind = type(r.step).__name__
            counts = self._steps if r.ok else self._step_errors
            counts[kind] = counts.get(kind, 0) + 1
            applied += r.ok
        clean_before = (
            previous is not None and not previous.failed and all(r.ok for r in previous.results)
        )
        if not outcome.new_metadata and clean_before:
            self._drift += applied

    def _count_metadata_errors(self, status: Status) -> None:
        if not self._seen and not status.file_errors and not status.conditions:
            return  # the usual pass: nothing held before, nothing holds now
        holding = {("invalid", str(p)) for p in status.file_errors}
        holding |= {
            (_CONDITIONS[c.type], c.message) for c in status.conditions if c.type in _CONDITIONS
        }
        for kind, _ in holding - self._seen:
            self._metadata_errors[kind] += 1
        self._seen = frozenset(holding)

    def _freeze(self) -> View:
        return View(
            dict(self._passes),
            dict(self._steps),
            dict(self._step_errors),
            self._drift,
            dict(self._metadata_errors),
            tuple(self._buckets),
            self._duration,
            dict(self._phases),
            self._last_ok,
        )
