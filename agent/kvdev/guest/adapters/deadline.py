"""Reading what may hang, without hanging the loop: one job at a time, waited for up to a deadline.

The metadata root may be a share (virtiofs, 9p, NFS) whose server stops answering; then every
access of it blocks, and a thread blocked reading a FUSE file cannot be cancelled or killed.
``Deadline`` runs such a job (the watcher's re-arm and the read of every file, one pass's worth)
on a worker thread of its own and waits for it at most ``seconds``. A job that is late is left
to finish; until it has, no other job starts (``run`` answers at once that the read is still
blocked), so at most one thread is ever stuck. When the late job finally ends (the share
answers again), its result is dropped, since it is older than the state a fresh read would
see, and ``wake`` is called so that the loop runs a pass, which reads afresh.

Owns: the worker thread and the deadline. Knows nothing of what the job reads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

from kvdev._records import compared

T = TypeVar("T")


@compared
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Late:
    """A job that did not end within the deadline: why, for the status."""

    message: str


class Deadline(Generic[T]):
    """Run one job at a time on a worker thread; wait for it at most ``seconds``."""

    def __init__(self, seconds: float, wake: Callable[[], None] = lambda: None) -> None:
        self.seconds = seconds
        self._wake = wake
        self._lock = threading.Condition()
        self._job: Callable[[], T] | None = None
        self._running = False  # a job is on the worker (it may be late)
        self._late = False  # the job running was given up on by its caller
        self._done = False
        self._result: object = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self.late_jobs = 0
        """How many jobs missed their deadline (for reports and tests)."""

    def run(self, job: Callable[[], T]) -> T | Late:
        """``job()``'s result, or ``Late`` when it did not end in time or an earlier one still runs.

        Raises:
            BaseException: what ``job`` raised, when it ended in time.
        """
        with self._lock:
            if self._running:
                return Late(
                    f"an earlier read has not ended after more than {self.seconds:g} s "
                    "(a share that stopped answering?)"
                )
            self._job, self._running, self._late, self._done = job, True, False, False
            self._result, self._error = None, None
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="kvdev-read", daemon=True)
                self._thread.start()
            self._lock.notify_all()
            if not self._lock.wait_for(lambda: self._done, timeout=self.seconds):
                self._late = True
                self.late_jobs += 1
                return Late(f"the read did not end within {self.seconds:g} s")
            result, error = self._result, self._error
            self._result, self._error = None, None
        if error is not None:
            raise error
        return cast("T", result)  # set by the job that ended in time

    def _work(self) -> None:
        while True:
            with self._lock:
                self._lock.wait_for(lambda: self._job is not None)
                job, self._job = self._job, None
            assert job is not None
            result: object = None
            error: BaseException | None = None
            try:
                result = job()
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                error = e
            with self._lock:
                late = self._late
                self._running, self._done = False, True
                if not late:
                    self._result, self._error = result, error
                self._lock.notify_all()
            if late:
                self._wake()
