"""The hand-over between the reconcile loop (main thread) and the local API (server thread).

The loop ``publish``es each new status; the API reads the latest ``Snapshot`` and the recent
``Event``s without locks held for long, and long-polls for new events (``wait_events``: a
future the next event resolves). The API ``ask``s the loop to do what only the loop may do (a
full reconcile, a dry-run plan: the netlink sockets and their cache belong to the loop's
thread); the loop sees a readable ``fileno()``, ``drain()``s the requests and answers each
through its future. Nothing here blocks either side: the API's server never waits on a future,
it is called back. The loop's counters (``core.metrics``) travel here too: the loop records
each pass in ``metrics``, the API reads ``metrics.view`` (a frozen value, published whole).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from kvdev._records import compared
from kvdev.guest.core.metrics import Metrics
from kvdev.guest.core.status import Change, Status, changes

EVENTS_KEPT = 512


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Event:
    """A numbered state change, with the wall-clock time it was published."""

    seq: int
    time: float
    type: str
    subject: str
    phase: str
    message: str


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Snapshot:
    """The latest status and when things happened (wall-clock seconds)."""

    status: Status
    published_at: float
    started_at: float
    converged_since: float  # when ``converged`` last flipped (or the first publish)
    last_error: str | None


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Ask:
    """A request from the API to the loop; the loop resolves ``answer``."""

    kind: str  # "reconcile" | "plan"
    answer: concurrent.futures.Future[object]


class Bridge:
    """Thread-safe: ``publish``/``drain`` on the loop's thread, the rest on the API's."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._started = clock()
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._events: deque[Event] = deque(maxlen=EVENTS_KEPT)
        self._seq = 0
        self._waiters: list[concurrent.futures.Future[None]] = []
        self._asks: queue.SimpleQueue[Ask] = queue.SimpleQueue()
        self._read_fd, self._write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.metrics = Metrics()  # written by the loop's thread only; ``view`` read by the API

    # ------------------------------------------------------------------ loop side

    def publish(self, status: Status) -> None:
        """Make ``status`` the latest; record what changed; wake long-polls."""
        now = self._clock()
        with self._lock:
            before = self._snapshot
            found = changes(before.status if before else None, status)
            flipped = before is None or before.status.converged != status.converged
            if flipped:  # so that long-polls see "ready" and convergence, even with no devices
                what = "Converged" if status.converged else "NotConverged"
                kind = "Ready" if before is None else "ConvergenceChanged"
                found.append(Change(kind, "", what, status.summary()))
            for c in found:
                self._seq += 1
                self._events.append(Event(self._seq, now, c.type, c.subject, c.phase, c.message))
            errors = [d.reason for d in status.devices if d.phase.value == "Error"]
            errors += [str(p) for p in status.file_errors]
            errors += [f"{c.type}: {c.message}" for c in status.conditions]
            last_error = errors[-1] if errors else (before.last_error if before else None)
            self._snapshot = Snapshot(
                status,
                now,
                self._started,
                now if flipped else (before.converged_since if before else now),
                last_error,
            )
            waiters, self._waiters = (
                (self._waiters, []) if found else (self._waiters, self._waiters)
            )
        if found:
            for waiter in waiters:
                if waiter.set_running_or_notify_cancel():  # False: its client left
                    waiter.set_result(None)

    def fileno(self) -> int:
        """Readable when the API has asked for something."""
        return self._read_fd

    def drain(self) -> list[Ask]:
        """Every pending request, oldest first."""
        try:
            while os.read(self._read_fd, 4096):
                pass
        except BlockingIOError:
            pass
        out = []
        while True:
            try:
                out.append(self._asks.get_nowait())
            except queue.Empty:
                return out

    def close(self) -> None:
        """Close the wake-up pipe."""
        os.close(self._read_fd)
        os.close(self._write_fd)

    # ------------------------------------------------------------------ API side

    def snapshot(self) -> Snapshot | None:
        """The latest published state (None before the first pass)."""
        with self._lock:
            return self._snapshot

    @property
    def started_at(self) -> float:
        """When this agent process started (wall clock): event numbers restart with it."""
        return self._started

    def events_since(self, seq: int) -> tuple[list[Event], int]:
        """Events numbered above ``seq``, and the number to ask from next time."""
        with self._lock:
            return [e for e in self._events if e.seq > seq], self._seq

    def wait_events(self, seq: int) -> concurrent.futures.Future[None] | None:
        """None when there are events above ``seq``; else a future the next event resolves.

        Cancel the future to stop waiting (its client left, or it waited long enough).
        """
        with self._lock:
            if self._seq > seq:
                return None
            self._waiters = [w for w in self._waiters if not w.done()]  # the cancelled ones
            waiter: concurrent.futures.Future[None] = concurrent.futures.Future()
            self._waiters.append(waiter)
            return waiter

    def ask(self, kind: str) -> concurrent.futures.Future[object]:
        """Have the loop do ``kind``: a future of its answer (cancel it to withdraw the ask)."""
        answer: concurrent.futures.Future[object] = concurrent.futures.Future()
        self._asks.put(Ask(kind, answer))
        with contextlib.suppress(BlockingIOError):  # a full pipe: the loop is awake already
            os.write(self._write_fd, b"!")
        return answer
