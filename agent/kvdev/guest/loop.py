"""The serving loop: one selector over file, udev, netlink, signal and API events.

``serve`` runs ``Reconciler`` passes when an event says something may have changed: a file
event, a udev event, a netlink event, a signal, an API request or a retry that is due. Events
only mark the state dirty; they are never interpreted. With nothing happening, the only
wake-up is the systemd watchdog ping, when systemd asks for one.

After a pass that changed something, one more pass verifies the result (our own changes
also raise netlink events, which that pass absorbs). Retryable failures back off
exponentially; so does a pass that keeps finding work, which means something else is
fighting over the same links.
"""

from __future__ import annotations

import gc
import logging
import selectors
import signal
import socket
import time
from dataclasses import dataclass
from types import FrameType

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
class _Clock:
    retry_at: float | None = None
    retry_delay: float = RETRY_FIRST
    busy_passes: int = 0
    ping_at: float | None = None


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
) -> int:
    """Run passes on events until SIGTERM/SIGINT; returns the exit code (0).

    A udev event makes the next pass rescan devices, a netlink event re-dump links; a file
    event only wakes the loop (files are read on every pass); SIGHUP and due retries redo all.
    Requests from the local API (through ``bridge``) are answered between passes.
    """
    loop = _Loop(reconciler, bridge)
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

    def __init__(self, reconciler: Reconciler, bridge: Bridge | None) -> None:
        self.reconciler = reconciler
        self.bridge = bridge
        self.signals = _Signals()
        self.selector = selectors.DefaultSelector()
        self.selector.register(
            self.signals.fileno(), selectors.EVENT_READ, ("signal", self.signals)
        )
        if bridge is not None:
            self.selector.register(bridge.fileno(), selectors.EVENT_READ, ("api", bridge))
        self.clock = _Clock()
        self.ping = systemd.watchdog_interval()
        self.summary = ""
        self.asks: list[Ask] = []

    def run(self) -> None:
        outcome = self._pass(None)
        systemd.notify("READY=1", f"STATUS={outcome.status.summary()}")
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
            due = self.clock.retry_at is not None and self.clock.retry_at <= time.monotonic()
            if ready or dirty or due or self.signals.kick:
                if due or self.signals.kick:
                    self.reconciler.stale_devices = self.reconciler.stale_links = True
                self.signals.kick = False
                if due:
                    self.clock.retry_at = None
                outcome = self._pass(outcome)

    def _pass(self, previous: Outcome | None) -> Outcome:
        outcome = attempt(self.reconciler, previous)
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
                    outcome = self._pass(outcome)
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


def _schedule(outcome: Outcome, clock: _Clock) -> bool:
    """Decide whether another pass is due now; set the retry time when one is due later."""
    if outcome.retry:
        clock.retry_at = time.monotonic() + clock.retry_delay
        clock.retry_delay = min(clock.retry_delay * 2, RETRY_MAX)
        return False
    if not outcome.changed:
        clock.busy_passes = 0
        clock.retry_delay = RETRY_FIRST
        return False
    clock.busy_passes += 1
    if clock.busy_passes < VERIFY_PASSES:
        return True  # verify what we just changed
    log.warning("links keep changing back after %d passes; backing off", clock.busy_passes)
    clock.retry_at = time.monotonic() + clock.retry_delay
    clock.retry_delay = min(clock.retry_delay * 2, RETRY_MAX)
    return False


def _timeout(dirty: bool, clock: _Clock, now: float) -> float | None:
    if dirty:
        return 0.0
    deadlines = [t for t in (clock.retry_at, clock.ping_at) if t is not None]
    return max(0.0, min(deadlines) - now) if deadlines else None
