"""The reconcile loop: the only module that sees both the pure core and the adapters.

``Reconciler.reconcile`` is one level-triggered pass: read every input file (keeping the last
good content of each), observe udev and netlink, match, plan, apply, summarize. ``serve`` runs
passes when an event says something may have changed: a file event, a udev event, a netlink
event, a signal, or a retry that is due. Events only mark the state dirty; they are never
interpreted. There is no polling: with nothing happening, the only wake-up is the systemd
watchdog ping, when systemd asks for one.

After a pass that changed something, one more pass verifies the result (our own changes
also raise netlink events, which that pass absorbs). Retryable failures back off
exponentially; so does a pass that keeps finding work, which means something else is
fighting over the same links.
"""

from __future__ import annotations

import gc
import json
import logging
import selectors
import signal
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Protocol

from kvdev._atomic import write_atomic
from kvdev.errors import RetryableError
from kvdev.guest import files, inventory, linkfiles, sources, systemd, views
from kvdev.guest.config import AgentConfig
from kvdev.guest.matching import match
from kvdev.guest.observed import GuestDevice, NetState
from kvdev.guest.planning import Plan, Policy, plan
from kvdev.guest.status import ClaimStatus, MetadataState, Status, summarize
from kvdev.guest.steps import RemoveLinkFile, Step, StepResult, WriteLinkFile
from kvdev.schema.metadata import DeviceMetadata

log = logging.getLogger("kvdev.agent")

RETRY_FIRST, RETRY_MAX = 0.25, 30.0
VERIFY_PASSES = 3  # passes in a row that still find work before backing off
FIRST_PASS_TRIES = 5  # 0.25 + 0.5 + 1 + 2 s of retries before giving up at start


class NetlinkPort(Protocol):
    """What the loop needs from netlink."""

    def read_state(self) -> NetState:
        """Observe links, addresses and routes."""
        ...

    def apply(self, steps: Sequence[Step]) -> list[StepResult]:
        """Apply steps, one result each."""
        ...


class Waitable(Protocol):
    """An event source: a file descriptor to select on and a way to empty it."""

    def fileno(self) -> int:
        """The descriptor that becomes readable on an event."""
        ...

    def drain(self) -> object:
        """Consume every pending event without blocking."""
        ...


@dataclass
class Outcome:
    """What one pass did."""

    status: Status
    plan: Plan
    results: list[StepResult]
    failed: bool = False  # the pass itself failed for now (observation interrupted ...)

    @property
    def changed(self) -> bool:
        """True when a step took effect (permanent failures alone wait for new input)."""
        return any(r.ok for r in self.results)

    @property
    def retry(self) -> bool:
        """True when the pass, or one of its steps, failed in a way that may pass."""
        return self.failed or any(not r.ok and r.retryable for r in self.results)


@dataclass
class Reconciler:
    """One level-triggered reconcile pass at a time."""

    config: AgentConfig
    net: NetlinkPort
    scan_devices: Callable[[], tuple[GuestDevice, ...]]
    prepare: Callable[[], object] = lambda: None  # e.g. re-arm the file watcher
    belief: sources.Sources = field(default_factory=sources.Sources)
    passes: int = 0
    stale_devices: bool = True  # set by udev events: the next pass rescans devices
    stale_links: bool = True  # set by netlink events and by our own changes: re-dump
    _devices: tuple[GuestDevice, ...] = ()
    _state: NetState = field(default_factory=NetState)
    _saved: str = ""

    def reconcile(self) -> Outcome:
        """Observe, plan, apply (unless dry-run), and summarize.

        Files are read on every pass. The udev scan and the netlink dumps are redone only when
        their own events (or our own changes) say they may differ: the kernel announces every
        change there, and an overrun counts as an event.
        """
        cfg = self.config
        self.prepare()
        raws, complete = files.read_sources(cfg.metadata_root, cfg.hints_path, cfg.config_drive)
        self.belief = sources.update(self.belief, raws, listing_complete=complete)
        if self.stale_links:
            self._state = self.net.read_state()
            self.stale_links = False
        if self.stale_devices:
            self._devices = self.scan_devices()
            self.stale_devices = False
        state = self._state
        guest = inventory.merge(self._devices, state.links, allow_kinds=cfg.match_kinds)
        matching = match(self.belief.described(), guest, self.belief.hints(), self.belief.tagged())
        policy = Policy(link_dir=str(cfg.link_dir), altnames=cfg.altnames)
        the_plan = plan(matching, state, linkfiles.read(str(cfg.link_dir)), policy)
        results = [] if cfg.dry_run or the_plan.empty else self._apply(the_plan.steps)
        self.stale_links = self.stale_links or bool(results)
        self.passes += 1
        errors = [p for problems in self.belief.errors().values() for p in problems]
        status = summarize(
            matching,
            the_plan,
            results,
            MetadataState(tuple(errors), tuple(self._claims())),
            reconcile=self.passes,
            dry_run=cfg.dry_run,
            state=self._state if not results else None,
        )
        for r in results:
            if not r.ok:
                log.warning(
                    "%s failed (%s): %s",
                    type(r.step).__name__,
                    "will retry" if r.retryable else "permanent",
                    r.error,
                    extra={"DEVICE": r.step.device, "STEP": type(r.step).__name__},
                )
        self._save(status)
        return Outcome(status, the_plan, results)

    def _claims(self) -> list[ClaimStatus]:
        """Per metadata file in force: the claim and the generation acted on."""
        out = []
        for entry in self.belief.entries:
            doc = entry.used.document if entry.used is not None else None
            if isinstance(doc, DeviceMetadata):
                meta = doc.metadata
                out.append(
                    ClaimStatus(
                        meta.name, meta.namespace, doc.pod_claim_name, meta.generation, entry.source
                    )
                )
        return out

    def _save(self, status: Status) -> None:
        """Keep the last status in ``<state-dir>/status.json`` (written only when it changes)."""
        body = views.status_json(status)
        body.pop("reconcile")
        text = json.dumps(body, indent=2, sort_keys=True) + "\n"
        if text == self._saved:
            return
        try:
            self.config.state_dir.mkdir(parents=True, exist_ok=True, mode=0o755)
            write_atomic(self.config.state_dir / "status.json", text.encode(), mode=0o644)
        except OSError as e:
            log.warning("cannot save the status in %s: %s", self.config.state_dir, e.strerror)
            return
        self._saved = text

    def _apply(self, steps: Sequence[Step]) -> list[StepResult]:
        kernel = [s for s in steps if not isinstance(s, WriteLinkFile | RemoveLinkFile)]
        results = self.net.apply(kernel) if kernel else []
        results.extend(linkfiles.apply(s) for s in steps if s not in kernel)
        return results


def converge(reconciler: Reconciler, passes: int = VERIFY_PASSES) -> Outcome:
    """Reconcile until a pass changes nothing (at most ``passes`` times): ``--once``."""
    outcome = _attempt(reconciler, None)
    for _ in range(passes - 1):
        if not (outcome.changed or outcome.failed) or reconciler.config.dry_run:
            break
        outcome = _attempt(reconciler, outcome)
    return outcome


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
    reconciler: Reconciler, *, file_events: Waitable, udev_events: Waitable, link_events: Waitable
) -> int:
    """Run passes on events until SIGTERM/SIGINT; returns the exit code (0).

    A udev event makes the next pass rescan devices, a netlink event re-dump links; a file
    event only wakes the loop (files are read on every pass); SIGHUP and due retries redo all.
    """
    signals = _Signals()
    selector = selectors.DefaultSelector()
    kinds = {"files": file_events, "udev": udev_events, "netlink": link_events, "signal": signals}
    for kind, src in kinds.items():
        selector.register(src.fileno(), selectors.EVENT_READ, (kind, src))
    clock = _Clock()
    ping = systemd.watchdog_interval()
    last_summary = ""
    try:
        outcome = _attempt(reconciler, None)
        systemd.notify("READY=1", f"STATUS={outcome.status.summary()}")
        # Start-up objects live as long as the process: keep them out of the collector's
        # full passes, which otherwise take ~20 ms now and then (measured in tests/bench).
        gc.freeze()
        while not signals.stopping():
            last_summary = _publish(outcome, last_summary)
            dirty = _schedule(outcome, clock)
            now = time.monotonic()
            if ping is not None and (clock.ping_at is None or clock.ping_at <= now):
                systemd.notify("WATCHDOG=1")
                clock.ping_at = now + ping
            timeout = _timeout(dirty, clock, now)
            ready = selector.select(timeout)
            for key, _ in ready:
                kind, src = key.data
                reconciler.stale_devices |= kind == "udev"
                reconciler.stale_links |= kind == "netlink"
                try:
                    src.drain()
                except RetryableError as e:  # e.g. a udev buffer overrun: a pass covers it
                    log.warning("%s events: %s", kind, e)
            if signals.stopping():
                break
            due = clock.retry_at is not None and clock.retry_at <= time.monotonic()
            if ready or dirty or due or signals.kick:
                if due or signals.kick:
                    reconciler.stale_devices = reconciler.stale_links = True
                signals.kick = False
                if due:
                    clock.retry_at = None
                outcome = _attempt(reconciler, outcome)
    finally:
        systemd.notify("STOPPING=1")
        selector.close()
        signals.close()
    log.info("stopping; configured interfaces are left as they are")
    return 0


def _attempt(reconciler: Reconciler, previous: Outcome | None) -> Outcome:
    """One pass; an observation that fails for now (a dump interrupted ...) is retried later.

    With no previous outcome (the first pass) a failure is retried here a few times, then
    raised: systemd restarts the unit.
    """
    delay = RETRY_FIRST
    for attempt in range(FIRST_PASS_TRIES):
        try:
            return reconciler.reconcile()
        except RetryableError as e:
            log.warning("pass failed, will retry: %s", e)
            reconciler.stale_devices = reconciler.stale_links = True
            if previous is not None:
                return Outcome(previous.status, previous.plan, [], failed=True)
            if attempt == FIRST_PASS_TRIES - 1:
                raise
            time.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")  # pragma: no cover


def _publish(outcome: Outcome, last: str) -> str:
    summary = outcome.status.summary()
    if summary != last:
        systemd.notify(f"STATUS={summary}")
        log.info("%s", summary)
    return summary


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
