"""The serving loop: one selector over file, udev, netlink, signal and API events.

``serve`` runs ``Reconciler`` passes when an event says something may have changed: a file
event, a udev event, a netlink event, a signal, an API request or a retry that is due. Events
only mark the state dirty; they are never interpreted. With nothing happening, the only
wake-up is the systemd watchdog ping, when systemd asks for one.

After a pass that changed something, one more pass verifies the result (our own changes
also raise netlink events, which that pass absorbs). Retryable failures back off
exponentially; so do passes that keep finding work, each cause on its own clock (``_Streak``):
passes acting on new metadata (a metadata storm: every write is applied at once, only the
verifying passes wait), and passes that find the links changed back (something else is
fighting over them). A streak of one cause never delays a pass of the other, and the warning
names its cause. Each pass is counted in the bridge's ``metrics``, with what woke the loop for it.
"""

from __future__ import annotations

import gc
import logging
import selectors
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Final

from kvdev.errors import RetryableError, UsageError
from kvdev.guest.adapters import systemd
from kvdev.guest.api.bridge import Ask, Bridge
from kvdev.guest.core.alerts import alerts
from kvdev.guest.reconciler import (
    RETRY_FIRST,
    RETRY_MAX,
    VERIFY_PASSES,
    Outcome,
    Reconciler,
    Waitable,
    attempt,
)
from kvdev.guest.views import encode

log = logging.getLogger("kvdev.agent")


@dataclass
class _Streak:
    """Passes in a row that found work for one cause; when its deferred verifying pass is due."""

    passes: int = 0
    at: float | None = None
    delay: float = RETRY_FIRST

    def reset(self) -> None:
        """A pass without this cause's work: verify at once again (a pending pass stays due)."""
        self.passes, self.delay = 0, RETRY_FIRST

    def count(self, now: float) -> bool:
        """One more pass of this cause that changed something; True: verify it now."""
        self.passes += 1
        if self.passes < VERIFY_PASSES:
            return True
        self.at = now + self.delay
        self.delay = min(self.delay * 2, RETRY_MAX)
        return False

    @property
    def worth_saying(self) -> bool:
        """Warn when the streak starts backing off and at each doubling of its length only."""
        return self.passes == VERIFY_PASSES or self.passes & (self.passes - 1) == 0


_PASS_SOURCES: Final = frozenset({"files", "udev", "netlink"})  # their events make a pass
_BACKING_OFF: Final = {
    "drift": "links keep changing back after %d passes that found work; verifying in %.2g s",
    "metadata": (
        "the metadata keeps changing: %d passes in a row applied new metadata (no link changed"
        " back); verifying in %.2g s, each new version is still applied at once"
    ),
}


@dataclass
class _Clock:
    retry_at: float | None = None  # a retryable failure's next try
    retry_delay: float = RETRY_FIRST
    ping_at: float | None = None
    drift: _Streak = field(default_factory=_Streak)  # passes finding the links changed back
    metadata: _Streak = field(default_factory=_Streak)  # passes applying new metadata

    def due(self, now: float) -> bool:
        """Whether a retry or a deferred verifying pass is due; clears those that are."""
        found = False
        for streak in (self.drift, self.metadata):
            if streak.at is not None and streak.at <= now:
                streak.at, found = None, True
        if self.retry_at is not None and self.retry_at <= now:
            self.retry_at, found = None, True
        return found


class _Signals:
    """SIGTERM/SIGINT stop the loop, SIGHUP forces a pass; both wake the selector."""

    def __init__(self) -> None:
        self.stop = False
        self.kick = False
        self.reader, self.writer = socket.socketpair()
        self.reader.setblocking(False)  # noqa: FBT003 - stdlib signature
        self.writer.setblocking(False)  # noqa: FBT003
        signal.set_wakeup_fd(self.writer.fileno())
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_hup)

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        del signum, frame
        self.stop = True

    def _on_hup(self, signum: int, frame: FrameType | None) -> None:
        del signum, frame
        self.kick = True

    def stopping(self) -> bool:
        """True once SIGTERM or SIGINT arrived (a call, so checks are never narrowed away)."""
        return self.stop

    def fileno(self) -> int:
        return self.reader.fileno()

    def drain(self) -> int:
        count = 0
        while True:
            try:
                chunk = self.reader.recv(4096)
            except BlockingIOError:
                return count
            if not chunk:
                return count
            count += len(chunk)

    def close(self) -> None:
        signal.set_wakeup_fd(-1)
        self.reader.close()
        self.writer.close()


def serve(
    reconciler: Reconciler,
    *,
    file_events: Waitable,
    udev_events: Waitable,
    link_events: Waitable,
    bridge: Bridge | None = None,
    after_ready: Callable[[], object] = lambda: None,
) -> int:
    """Run passes on events until SIGTERM/SIGINT; returns the exit code (0).

    A udev event makes the next pass rescan devices, a netlink event re-dump links; a file
    event only wakes the loop (files are read on every pass); SIGHUP and due retries redo all.
    Requests from the local API (through ``bridge``) are answered between passes.
    ``after_ready`` runs once, right after READY=1 (e.g. start what the first pass does not
    need: the API on a socket systemd holds, whose clients wait in its backlog meanwhile).
    """
    loop = _Loop(reconciler, bridge, after_ready)
    for kind, src in (("files", file_events), ("udev", udev_events), ("netlink", link_events)):
        loop.selector.register(src.fileno(), selectors.EVENT_READ, (kind, src))
    try:
        loop.run()
    finally:
        systemd.notify("STOPPING=1")
        loop.close()
    log.info("stopping; configured interfaces are left as they are")
    return 0


class _Loop:
    """The state of ``serve``: the selector, the clock, the latest outcome."""

    def __init__(
        self,
        reconciler: Reconciler,
        bridge: Bridge | None,
        after_ready: Callable[[], object] = lambda: None,
    ) -> None:
        self.reconciler = reconciler
        self.bridge = bridge
        self.after_ready = after_ready
        self.signals = _Signals()
        self.selector = selectors.DefaultSelector()
        self.selector.register(
            self.signals.fileno(), selectors.EVENT_READ, ("signal", self.signals)
        )
        if bridge is not None:
            self.selector.register(bridge.fileno(), selectors.EVENT_READ, ("api", bridge))
        self.clock = _Clock()
        reconciler.more_pending = self._events_waiting
        self.ping = systemd.watchdog_interval()
        self.summary = ""
        self.asks: list[Ask] = []
        self.woke_by: set[str] = set()  # the kinds of event the last wait returned for
        self.answering = False  # a pass for an API reconcile: its asker reads status.json next

    def run(self) -> None:
        outcome = self._pass(None, "start")
        systemd.notify("READY=1", f"STATUS={outcome.status.summary()}")
        self.after_ready()
        settled = False
        while not self.signals.stopping():
            dirty = _schedule(outcome, self.clock)
            if not dirty and not settled:  # the first time there is nothing to do
                _settle_collector()
                settled = True
            ready = self._wait(dirty)
            if self.signals.stopping():
                break
            outcome = self._answer(outcome)
            due = self.clock.due(time.monotonic())
            if ready or dirty or due or self.signals.kick:
                if due or self.signals.kick:
                    self.reconciler.stale_devices = self.reconciler.stale_links = True
                trigger = _trigger(self.woke_by, dirty=dirty, due=due, kick=self.signals.kick)
                self.signals.kick = False
                outcome = self._pass(outcome, trigger)
        self.reconciler.save_status()  # the last pass's, had it left it to a next one

    def _events_waiting(self) -> bool:
        """Whether file, udev or netlink events wait already: the loop's next pass is at once.

        Never while answering an API reconcile: its asker is told the pass is done, and may
        read ``<state-dir>/status.json`` as soon as the answer comes.
        """
        if self.answering:
            return False
        return any(key.data[0] in _PASS_SOURCES for key, _ in self.selector.select(0))

    def _pass(self, previous: Outcome | None, trigger: str) -> Outcome:
        started = time.perf_counter()
        outcome = attempt(self.reconciler, previous)
        if self.bridge is not None:
            took = time.perf_counter() - started
            self.bridge.metrics.record(trigger, outcome, previous, seconds=took, now=time.time())
        before = previous.status if previous is not None else None
        refused = previous.plan.blocked if previous is not None else ()
        for alert in alerts(before, outcome.status, refused, outcome.plan.blocked):
            level = logging.WARNING if alert.level == "warning" else logging.INFO
            log.log(level, "%s", alert.text, extra=alert.fields)
        if outcome.status.summary() != self.summary:
            self.summary = outcome.status.summary()
            systemd.notify(f"STATUS={self.summary}")
            log.info("%s", self.summary)
        if self.bridge is not None:
            self.bridge.publish(outcome.status)
        return outcome

    def _wait(self, dirty: bool) -> bool:
        """Select until an event, a deadline or at once when dirty; drain what is ready."""
        now = time.monotonic()
        if self.ping is not None and (self.clock.ping_at is None or self.clock.ping_at <= now):
            systemd.notify("WATCHDOG=1")
            self.clock.ping_at = now + self.ping
        ready = self.selector.select(_timeout(dirty, self.clock, now))
        self.reconciler.woke_at = time.perf_counter()  # the pass's "wake" phase starts here
        self.woke_by = {key.data[0] for key, _ in ready}
        for key, _ in ready:
            kind, src = key.data
            self.reconciler.stale_devices |= kind == "udev"
            self.reconciler.stale_links |= kind == "netlink"
            try:
                drained = src.drain()
            except RetryableError as e:  # e.g. a udev buffer overrun: a pass covers it
                log.warning("%s events: %s", kind, e)
                continue
            if kind == "api":
                self.asks.extend(drained)
        # API requests alone do not make a pass: they are answered on their own.
        return any(key.data[0] != "api" for key, _ in ready)

    def _answer(self, outcome: Outcome) -> Outcome:
        """Answer the API's asks: at most one plan and one pass, however many asked.

        An ask whose client hung up (or timed out) before the loop got to it was cancelled: it
        is dropped without doing its work. The others are marked running first, so that a
        hang-up from now on can no longer cancel them, and every one that asked for the same
        kind gets the same answer.
        """
        asks, self.asks = self.asks, []
        live = [ask for ask in asks if ask.answer.set_running_or_notify_cancel()]
        for kind in ("plan", "reconcile"):
            waiting = [ask for ask in live if ask.kind == kind]
            if not waiting:
                continue
            try:
                if kind == "plan":
                    answer = encode.plan_json(self.reconciler.preview())
                else:
                    self.reconciler.stale_devices = self.reconciler.stale_links = True
                    self.answering = True
                    try:
                        outcome = self._pass(outcome, "api")
                    finally:
                        self.answering = False
                    answer = encode.status_json(outcome.status)
            except Exception as e:  # noqa: BLE001 - the askers get it; the loop goes on
                for ask in waiting:
                    ask.answer.set_exception(e)
                continue
            for ask in waiting:
                ask.answer.set_result(answer)
        for ask in live:
            if ask.kind not in {"plan", "reconcile"}:
                ask.answer.set_exception(UsageError(f"the loop cannot answer {ask.kind!r}"))
        return outcome

    def close(self) -> None:
        self.selector.close()
        self.signals.close()


def _trigger(woke_by: set[str], *, dirty: bool, due: bool, kick: bool) -> str:
    """What a pass is counted for (``core.metrics.TRIGGERS``).

    SIGHUP, then a file event (new metadata), then verifying the pass before (whose own
    changes also raise the udev and netlink events it absorbs), then udev, netlink, a due timer.
    """
    if kick:
        return "signal"
    if "files" in woke_by:
        return "metadata"
    if dirty:
        return "verify"
    if "udev" in woke_by:
        return "udev"
    if "netlink" in woke_by:
        return "link"
    return "timer" if due else "verify"  # else: a ready source of no kind above


def _settle_collector() -> None:
    """Collect once, freeze what start-up made and turn the collector (back) on.

    Start-up objects live as long as the process: frozen, they stay out of the collector's full
    passes, which otherwise take ~20 ms now and then (measured in tests/bench). kvdev-agent's
    main turned the collector off for the imports and the first passes; this runs when the loop
    first has nothing to do, so that it delays neither READY=1 nor the passes right after it.
    """
    gc.collect()
    gc.freeze()
    gc.enable()


def _schedule(outcome: Outcome, clock: _Clock, now: float | None = None) -> bool:
    """Decide whether another pass is due now; set the time when one is due later.

    A pass that changed something is verified by the next one, at once until its cause's
    streak reaches ``VERIFY_PASSES``: a pass acting on new metadata counts in the metadata
    streak, any other (the links changed back, or our own change did not hold) in the drift
    streak. A pass that changed nothing ends both; one without new metadata ends the
    metadata streak. ``now``: the monotonic clock (given by tests).
    """
    now = time.monotonic() if now is None else now
    if outcome.retry:
        clock.retry_at = now + clock.retry_delay
        clock.retry_delay = min(clock.retry_delay * 2, RETRY_MAX)
        return False
    if not outcome.changed:
        clock.retry_delay = RETRY_FIRST
        clock.drift.reset()
        clock.metadata.reset()
        return False
    cause = "metadata" if outcome.new_metadata else "drift"
    if cause == "drift":
        clock.metadata.reset()
    streak = clock.metadata if cause == "metadata" else clock.drift
    if streak.count(now):
        return True  # verify what we just changed
    if streak.worth_saying:
        log.warning(_BACKING_OFF[cause], streak.passes, streak.at - now if streak.at else 0.0)
    return False


def _timeout(dirty: bool, clock: _Clock, now: float) -> float | None:
    if dirty:
        return 0.0
    waits = (clock.retry_at, clock.drift.at, clock.metadata.at, clock.ping_at)
    deadlines = [t for t in waits if t is not None]
    return max(0.0, min(deadlines) - now) if deadlines else None
