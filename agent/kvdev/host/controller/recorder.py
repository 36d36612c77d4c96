"""Record Events on VMIs without ever holding up a sync: a bounded queue and one sender thread.

``record`` only puts the notes on a queue (at most ``capacity``; a full queue drops the note,
counted): a sync never waits for the API server on an Event's account, and an Event that
fails never fails a sync. The sender thread asks the ``Correlator`` (``events``) what each
note becomes (dropped by the spam filter, a new Event, or a PATCH of the same Event's count),
writes it, and tells the correlator what was stored; a PATCH answered 404 (the API server's
``--event-ttl`` removed it) creates the Event anew, as client-go does. Failures are counted
(``kvdev_controller_events_total{result="failed"}``) and logged once at warning level, then
at debug level.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence

from kvdev.errors import KvdevError
from kvdev.host.controller.metrics import Metrics
from kvdev.host.controller.vmievents import Correlator, Create, Note, ObjectRef, Patch
from kvdev.host.kube.errors import ConflictError, NotFoundError
from kvdev.host.kube.wire import KubeApi

log = logging.getLogger(__name__)
CAPACITY = 1024


class Recorder:
    """Events on VMIs, written by one thread (``run``) from what ``record`` queues."""

    def __init__(
        self,
        api: KubeApi,
        correlator: Correlator,
        metrics: Metrics,
        *,
        capacity: int = CAPACITY,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.api, self.correlator, self.metrics, self.clock = api, correlator, metrics, clock
        self._queue: queue.Queue[tuple[ObjectRef, Note]] = queue.Queue(capacity)
        self._failed_once = False

    def record(self, ref: ObjectRef, notes: Sequence[Note]) -> None:
        """Queue ``notes`` on ``ref``; never blocks (a full queue drops, counted)."""
        for note in notes:
            try:
                self._queue.put_nowait((ref, note))
            except queue.Full:
                self.metrics.events.labels("dropped_queue").inc()

    def run(self, stop: threading.Event) -> None:
        """Send queued notes until ``stop``."""
        while not stop.is_set():
            try:
                ref, note = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            self._send(ref, note)

    def _send(self, ref: ObjectRef, note: Note) -> None:
        now = self.clock()
        decision = self.correlator.decide(ref, note, now)
        if decision is None:
            self.metrics.events.labels("dropped_spam").inc()
            log.debug("%s/%s: Event %s dropped (spam filter)", ref.namespace, ref.name, note)
            return
        try:
            if isinstance(decision, Patch):
                try:
                    stored = self.api.patch_event(decision.namespace, decision.name, decision.body)
                    result = "patched"
                except (
                    NotFoundError,
                    ConflictError,
                ):  # expired or deleted: a new one, as client-go does
                    decision = decision.fallback
            if isinstance(decision, Create):
                stored = self.api.create_event(decision.namespace, decision.body)
                result = "created"
        except KvdevError as e:
            self.metrics.events.labels("failed").inc()
            level = logging.DEBUG if self._failed_once else logging.WARNING
            self._failed_once = True
            log.log(
                level,
                "%s/%s: Event %s not recorded: %s (counted in kvdev_controller_events_total; "
                "further failures are logged at debug level)",
                ref.namespace,
                ref.name,
                note.reason.reason,
                e,
            )
            return
        self.metrics.events.labels(result).inc()
        self.correlator.written(ref, note, stored, now)


__all__ = ["CAPACITY", "Recorder"]
