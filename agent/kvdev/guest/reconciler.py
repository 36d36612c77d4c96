"""One reconcile pass: read -> observe -> decide -> apply, then the status.

``Reconciler.reconcile`` is one level-triggered pass over the stages: ``adapters.intake``
reads every input file (keeping the last good content of each), ``adapters.observer`` observes
udev and netlink (again only when their events say so), the pure core matches and plans, and
``adapters.applier`` applies, each journal on disk before its steps (``core.journals``). The
reconciler holds the state store (``adapters.state``) and the stages' caches, and is the only
module that wires the pure core to the adapters. ``converge`` runs passes until nothing changes
(``--once``); ``loop.serve`` runs them on events; ``attempt`` turns a pass that fails for now
into a retry. The first pass that may change things removes the temporary files a killed
agent's writes left (this agent is their only writer). State that cannot be saved is a
``StateNotSaved`` condition (``kvdev status`` exits 1) until a later pass saves it; such a pass
is retried. A pass after which events already wait (``more_pending``, set by the loop) leaves
``status.json`` to the pass that follows at once: a burst of link events costs one write.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from kvdev.errors import RetryableError, Severity
from kvdev.guest.adapters import linkfiles, netconfig, walk
from kvdev.guest.adapters.applier import Applier
from kvdev.guest.adapters.config import AgentConfig
from kvdev.guest.adapters.intake import Intake, Reads
from kvdev.guest.adapters.observer import Observer
from kvdev.guest.adapters.state import ADDRESSES, ALTNAMES, PRIMARY, RENAMES, STATUS, Store
from kvdev.guest.core import inventory, journals, marking, primary, rivals, sources
from kvdev.guest.core.alerts import claim_of
from kvdev.guest.core.matching import Matching, MatchState, match
from kvdev.guest.core.observed import GuestDevice, NetState
from kvdev.guest.core.planning import Plan, Policy, Warned, plan
from kvdev.guest.core.status import Condition, MetadataState, Status, summarize
from kvdev.guest.core.steps import Step, StepResult
from kvdev.guest.views import encode, tables

log = logging.getLogger("kvdev.agent")

STATUS_FILE = STATUS.name
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
    unsaved: bool = False  # state could not be saved: try again later
    new_metadata: bool = False  # it acted on metadata (devices, hints) unlike the pass before

    @property
    def changed(self) -> bool:
        """True when a step took effect (permanent failures alone wait for new input)."""
        return any(r.ok for r in self.results)

    @property
    def retry(self) -> bool:
        """True when the pass, or one of its steps, failed in a way that may pass."""
        return self.failed or self.unsaved or any(not r.ok and r.retryable for r in self.results)


@dataclass
class Reconciler:
    """One level-triggered pass at a time: read -> observe -> decide -> apply, then the status.

    It holds the store of state files and each stage's cache; the stages are ``Intake`` (read),
    ``Observer`` (observe), ``_decide`` (the core's match, the guest's own NICs and plan, over
    what was read and observed) and ``Applier`` (apply: the journals on disk first).
    """

    config: AgentConfig
    net: NetlinkPort
    scan_devices: Callable[[], tuple[GuestDevice, ...]]
    before_pass: Callable[[], object] = lambda: None  # e.g. re-arm the file watcher
    watch_problem: Callable[[], str | None] = lambda: None  # why the watcher polls, if it must
    bounds: walk.Bounds = field(default_factory=walk.Bounds)  # of each read of the tree
    reads: Reads | None = None  # None: read on this thread
    passes: int = 0
    woke_at: float | None = None  # perf_counter when the loop woke for this pass (the loop sets it)
    more_pending: Callable[[], bool] = lambda: False  # the loop: events wait, a pass is next
    _store: Store = field(init=False)
    _intake: Intake = field(default_factory=Intake)
    _observer: Observer = field(default_factory=Observer)
    _applier: Applier = field(init=False)
    _inputs: object = None  # what the last pass acted on: described devices, hints, tags
    _nm_overrides: tuple[str, ...] = ()  # links NetworkManager manages although kvdev does
    _rivals: tuple[tuple[str, str], ...] = ()  # (condition type, why): see core/rivals
    _unwritten: Status | None = None  # a status left for the pass after it to save
    _lap_at: float = 0.0
    _phases: list[tuple[str, float]] = field(default_factory=list)  # this pass's, in order

    def __post_init__(self) -> None:
        self._store = Store(self.config.state_dir, writes=not self.config.dry_run)
        self._applier = Applier(self._store)

    @property
    def belief(self) -> sources.Sources:
        """What the agent believes the metadata says (the last good content of each file)."""
        return self._intake.belief

    @property
    def stale_devices(self) -> bool:
        """Set by udev events: the next pass rescans the devices."""
        return self._observer.stale_devices

    @stale_devices.setter
    def stale_devices(self, value: bool) -> None:
        self._observer.stale_devices = value

    @property
    def stale_links(self) -> bool:
        """Set by netlink events and by our own changes: the next pass dumps netlink again."""
        return self._observer.stale_links

    @stale_links.setter
    def stale_links(self, value: bool) -> None:
        self._observer.stale_links = value

    def reconcile(self) -> Outcome:
        """Read, observe, decide, apply (unless dry-run), and summarize."""
        cfg = self.config
        self._phases, self._lap_at = [], time.perf_counter()
        if self.woke_at is not None:
            self._phases.append(("wake", self._lap_at - self.woke_at))
            self.woke_at = None
        if self.passes == 0 and not cfg.dry_run:
            self._tidy()
        matching, the_plan, kept = self._observe_and_plan()
        inputs = (self.belief.described(), self.belief.hints(), self.belief.tagged())
        new_metadata, self._inputs = inputs != self._inputs, inputs
        state = self._observer.state
        if not cfg.dry_run:  # the marks before any rename: its "move" event reads them
            wanted = marking.wanted(matching, (d.ifindex for d in the_plan.desired), state)
            self._applier.prepare(kept, cfg.state_dir, wanted)
        self._lap("marks")
        results = []
        if not (cfg.dry_run or the_plan.empty):
            results = self._applier.apply(self.net.apply, the_plan.steps, kept)
        self._lap("apply")
        if not cfg.dry_run:
            self._applier.settle(kept, results, keeps_proto=self._observer.keeps_proto)
        self.stale_links = self.stale_links or bool(results)
        self.passes += 1
        intake = self._intake
        status = summarize(
            matching,
            the_plan,
            results,
            MetadataState(
                intake.errors(), intake.claims(), self.belief.upstream_warnings(), intake.origins
            ),
            reconcile=self.passes,
            dry_run=cfg.dry_run,
            state=state if not results else None,
            conditions=self._conditions(),
        )
        self._lap("status")
        _log_results(results)
        self._lap("logging")
        if self.more_pending():  # the pass already due saves its own status instead
            self._unwritten = status
        else:
            self._save(status)
        self._lap("writes")
        self._log_timeline(len(results))
        unsaved = [Condition("StateNotSaved", str(why)) for why in self._store.unsaved()]
        if unsaved:
            status = replace(status, conditions=(*status.conditions, *unsaved))
        return Outcome(status, the_plan, results, unsaved=bool(unsaved), new_metadata=new_metadata)

    def _lap(self, phase: str) -> None:
        """End ``phase`` of this pass now (a perf_counter read: cheap enough for every pass)."""
        now = time.perf_counter()
        self._phases.append((phase, now - self._lap_at))
        self._lap_at = now

    def _log_timeline(self, steps: int) -> None:
        """At debug level, one line with the time of each phase of this pass (tests/bench)."""
        if log.isEnabledFor(logging.DEBUG):
            laps = ", ".join(f"{name} {seconds * 1000:.3f} ms" for name, seconds in self._phases)
            log.debug("pass %d timeline (%d steps): %s", self.passes, steps, laps)

    def preview(self) -> Plan:
        """What a pass would do now, from a fresh observation; changes nothing.

        Files are read and the netlink state taken again; the devices are rescanned only when
        udev said they changed (``stale_devices``, set by the loop, which drains the monitor
        before it answers): a full scan of a guest with thousands of links took seconds for
        every ``GET /v1/plan``.
        """
        self.stale_links = True
        return self._observe_and_plan()[1]

    def _observe_and_plan(self) -> tuple[Matching, Plan, journals.InForce]:
        """Read, observe and decide; also the journals in force for this state."""
        cfg = self.config
        self._intake.read(cfg, self.bounds, self.reads, self.before_pass, self._lap)
        self._lap("parse")
        self._observer.observe(self.net.read_state, self.scan_devices, cfg.config_root)
        self._lap("observe")
        store = self._store
        renames, added, altnames = store.get(RENAMES), store.get(ADDRESSES), store.get(ALTNAMES)
        kept = journals.prune(renames, added, altnames, self._observer.state)
        matching, the_plan = self._decide(kept)
        self._lap("plan")
        return matching, the_plan, kept

    def _decide(self, kept: journals.InForce) -> tuple[Matching, Plan]:
        """Match the belief to what was observed, and plan (the journals' view of the state)."""
        cfg, seen = self.config, self._observer
        guest = inventory.merge(seen.devices, seen.state.links, allow_kinds=cfg.match_kinds)
        matching = match(self.belief.described(), guest, self.belief.hints(), self.belief.tagged())
        policy = Policy(link_dir=str(cfg.link_dir), altnames=cfg.altnames)
        state = journals.attribute(seen.state, kept.addresses)  # kernels without IFA_PROTO
        owned = self._guest_owned(matching)
        wishes = linkfiles.read(str(cfg.link_dir))
        dns = seen.dns_servers(cfg.config_root)
        the_plan = plan(
            matching, state, wishes, policy, kept.renames, owned, kept.altnames, dns=dns
        )
        return matching, self._nm_check(the_plan)

    def _nm_check(self, the_plan: Plan) -> Plan:
        """The plan with a warning on each link NetworkManager manages although kvdev does.

        Also kept for the status (a ``NetworkManagerManages`` condition per link).
        """
        configured = [(d.ifindex, d.ifname) for d in the_plan.desired]
        managed = netconfig.nm_managed(self.config.config_root, [i for i, _ in configured])
        overrides = marking.nm_overrides(configured, managed)
        self._nm_overrides = tuple(why for _, why in overrides)
        links = [(d.ifname, self._observer.state.link(d.ifindex)) for d in the_plan.desired]
        macs = [(name, link.mac if link else None) for name, link in links]
        self._rivals = tuple(rivals.findings(macs, *self._observer.rival_config))
        if not overrides:
            return the_plan
        devices = {d.ifname: d.device for d in the_plan.desired}
        warned = [Warned(devices[name], name, why) for name, why in overrides]
        return replace(the_plan, warnings=(*the_plan.warnings, *warned))

    def _guest_owned(self, matching: Matching) -> primary.Decision:
        """The guest's own NICs (``core.primary``); the record is saved when it grows."""
        seen = self._observer
        protected = tuple(
            primary.Configured(where, p.name, p.mac_address, p.pci_address)
            for where, p in self.belief.protected()
        )
        pci_macs = {
            g.pci_address: g.nics[0].mac
            for g in seen.devices
            if g.pci_address and len(g.nics) == 1 and g.nics[0].mac
        }
        taken = {
            b.nic.ifindex
            for b in matching.bindings
            if b.state is MatchState.BOUND and b.nic is not None
        }
        decision, added = primary.decide(
            (*protected, *(seen.configured or ())),
            seen.state,
            self._store.get(PRIMARY),
            pci_macs,
            seen.auto,
            taken,
        )
        for line in added:
            log.info("the guest's own NIC, never configured by kvdev: %s", line)
        if added or self._store.unsaved(PRIMARY.name):
            self._store.put(PRIMARY, primary.Decision(decision.owned))
        return decision

    def _conditions(self) -> list[Condition]:
        """What holds about the agent itself after this pass's read (see ``Condition``)."""
        out = self._intake.conditions()
        out.extend(
            Condition("NetworkManagerManages", why, Severity.WARNING) for why in self._nm_overrides
        )
        out.extend(Condition(kind, why, Severity.WARNING) for kind, why in self._rivals)
        if (why := self.watch_problem()) is not None:
            out.append(Condition("MetadataPolled", why, Severity.WARNING))
        return out

    def _tidy(self) -> None:
        """Remove the temporary files of writes a previous agent was killed in the middle of.

        This agent is the only writer of its state files and link wishes.
        """
        try:
            left = self._store.tidy() + linkfiles.tidy(str(self.config.link_dir))
        except OSError as e:
            log.warning("cannot remove what an interrupted write left: %s", e)
            return
        for path in left:
            log.info("removed %s, left by a write that was interrupted", path)

    def save_status(self) -> None:
        """Save the status a pass left to the next one, when there is no next one (stopping)."""
        if self._unwritten is not None:
            self._save(self._unwritten)

    def _save(self, status: Status) -> None:
        """Keep the last status in ``<state-dir>/status.json`` (written only when it changes).

        A failure is unsaved state (the status shows it) until a later write succeeds. A dry
        run writes nothing, its status included.
        """
        self._unwritten = None
        body = encode.status_json(status)
        body.pop("reconcile")
        self._store.put(STATUS, body)


def _log_results(results: Sequence[StepResult]) -> None:
    """Every change kvdev makes goes to the journal, with its reason; a failure too."""
    for r in results:
        if r.ok:
            log.info("%s", tables.step_line(encode.step_json(r.step)), extra=_fields(r.step))
        else:
            log.warning(
                "%s failed (%s): %s",
                type(r.step).__name__,
                "will retry" if r.retryable else "permanent",
                r.error,
                extra=_fields(r.step),
            )


def _fields(step: Step) -> dict[str, str]:
    """A step's journal fields: DEVICE (its ref), CLAIM (the ref's claim), STEP (its type)."""
    return {"DEVICE": step.device, "CLAIM": claim_of(step.device), "STEP": type(step).__name__}


def converge(reconciler: Reconciler, passes: int = VERIFY_PASSES) -> Outcome:
    """Reconcile until a pass changes nothing (at most ``passes`` times): ``--once``."""
    outcome = attempt(reconciler, None)
    for _ in range(passes - 1):
        if not (outcome.changed or outcome.failed) or reconciler.config.dry_run:
            break
        outcome = attempt(reconciler, outcome)
    return outcome


def attempt(reconciler: Reconciler, previous: Outcome | None) -> Outcome:
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
