"""One reconcile pass: the only module that sees both the pure core and the adapters.

``Reconciler.reconcile`` is one level-triggered pass: read every input file (keeping the last
good content of each), observe udev and netlink (again only when their events say so), match,
plan, apply, summarize. ``converge`` runs passes until nothing changes (``--once``);
``loop.serve`` runs them on events. ``attempt`` turns a pass that fails for now into a retry.
Each pass keeps the mark files other network managers read through udev (``core.marking``)
before it renames anything. The first pass that may change things also removes the temporary
files a killed agent's atomic writes (``status.json``, the journals, link wishes) left behind:
this agent is their only writer. Before links move to temporary names their names go to the
rename journal (``renames``), so an interrupted trade can be undone; when the journal cannot
be saved, no link is renamed in that pass. Likewise an altname goes to the altname journal
(``altnames``) before it is added, so that kvdev may remove it once it is no longer wanted; no
altname is added without it. State that cannot be saved (the status, the journals, the marks)
is a ``StateNotSaved`` condition in the status (so ``kvdev status`` exits 1) until a later
pass saves it; such a pass is retried. A pass after which events already wait
(``more_pending``, set by the loop) leaves ``status.json`` to the pass that follows at once: a
burst of link events someone else causes costs one write (and its fsyncs), not one per pass,
and a metadata change arriving meanwhile does not queue behind them.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol, TypeVar

from kvdev._atomic import remove_leftovers, write_atomic
from kvdev.errors import KvdevError, Problem, RetryableError, Severity, os_error
from kvdev.guest.adapters import (
    address_journal,
    altname_journal,
    files,
    linkfiles,
    markfiles,
    netconfig,
    primary_record,
    rename_journal,
    walk,
)
from kvdev.guest.adapters.config import AgentConfig
from kvdev.guest.adapters.deadline import Deadline, Late
from kvdev.guest.core import added as kvdev_added
from kvdev.guest.core import inventory, marking, primary, sources
from kvdev.guest.core.alerts import claim_of
from kvdev.guest.core.matching import Matching, MatchState, match
from kvdev.guest.core.observed import GuestDevice, NetState, RawFile
from kvdev.guest.core.planning import Plan, Policy, Warned, plan
from kvdev.guest.core.status import ClaimStatus, Condition, MetadataState, Status, summarize
from kvdev.guest.core.steps import (
    AddAltname,
    RemoveLinkFile,
    Rename,
    SetDown,
    Step,
    StepResult,
    WriteLinkFile,
)
from kvdev.guest.views import encode, tables
from kvdev.schema.origins import SOURCES_KEY, Origins
from kvdev.schema.origins import parse as parse_origins
from kvdev.schema.reading import DeviceMetadata

log = logging.getLogger("kvdev.agent")
J = TypeVar("J", dict[int, str], dict[int, frozenset[str]])  # a journal, as its module keeps it

STATUS_FILE = "status.json"
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
    """One level-triggered reconcile pass at a time."""

    config: AgentConfig
    net: NetlinkPort
    scan_devices: Callable[[], tuple[GuestDevice, ...]]
    before_pass: Callable[[], object] = lambda: None  # e.g. re-arm the file watcher
    watch_problem: Callable[[], str | None] = lambda: None  # why the watcher polls, if it must
    bounds: walk.Bounds = field(default_factory=walk.Bounds)  # of each read of the tree
    reads: Deadline[tuple[list[RawFile], bool]] | None = None  # None: read on this thread
    belief: sources.Sources = field(default_factory=sources.Sources)
    passes: int = 0
    stale_devices: bool = True  # set by udev events: the next pass rescans devices
    stale_links: bool = True  # set by netlink events and by our own changes: re-dump
    _devices: tuple[GuestDevice, ...] = ()
    _state: NetState = field(default_factory=NetState)
    _saved: str = ""
    _journal: dict[int, str] | None = None  # the rename journal; None until first read
    _limits: tuple[Problem, ...] = ()  # what the last read of the metadata tree left out
    _unavailable: tuple[str, ...] = ()  # why the last read could not read the metadata at all
    _origins: Origins = field(default_factory=Origins)  # a ConfigMap's streams: driver or rebuilt
    _index_problem: Problem | None = None  # why the ConfigMap's sources index was not read
    _unsaved: dict[str, str] = field(default_factory=dict)  # what could not be saved, and why
    _journal_error: KvdevError | None = None  # the last failure to save the rename journal
    _marked: frozenset[str] | None = None  # the marks on disk after the last sync
    _added: dict[int, frozenset[str]] | None = None  # the address journal; None until read
    _added_saved: dict[int, frozenset[str]] | None = None  # as last written
    _altnames: dict[int, frozenset[str]] | None = None  # the altname journal; None until read
    _altnames_saved: dict[int, frozenset[str]] | None = None  # as last written
    _kernel_keeps_proto: bool = False  # an address showed a protocol: no journal is needed
    _inputs: object = None  # what the last pass acted on: described devices, hints, tags
    _configured: tuple[primary.Configured, ...] | None = None  # the guest's network config
    _config_problems: tuple[str, ...] = ()  # what its last read said (logged once each)
    _owned: primary.Decision | None = None  # the guest's own NICs, as last recorded
    _auto: primary.AutoDefault | None = None  # NetworkManager's auto-default, as last read
    _nm_overrides: tuple[str, ...] = ()  # links NetworkManager manages although kvdev does
    woke_at: float | None = None  # perf_counter when the loop woke for this pass (the loop sets it)
    more_pending: Callable[[], bool] = lambda: False  # the loop: events wait, a pass is next
    _unwritten: Status | None = None  # a status left for the pass after it to save
    _lap_at: float = 0.0
    _phases: list[tuple[str, float]] = field(default_factory=list)  # this pass's, in order

    def reconcile(self) -> Outcome:
        """Observe, plan, apply (unless dry-run), and summarize.

        Files are read on every pass. The udev scan and the netlink dumps are redone only when
        their own events (or our own changes) say they may differ: the kernel announces every
        change there, and an overrun counts as an event.
        """
        cfg = self.config
        self._phases, self._lap_at = [], time.perf_counter()
        if self.woke_at is not None:
            self._phases.append(("wake", self._lap_at - self.woke_at))
            self.woke_at = None
        if self.passes == 0 and not cfg.dry_run:
            self._tidy()
        matching, the_plan, restore = self._observe_and_plan()
        inputs = (self.belief.described(), self.belief.hints(), self.belief.tagged())
        new_metadata, self._inputs = inputs != self._inputs, inputs
        if not cfg.dry_run:
            self._keep_journal(restore)
            self._mark(matching, the_plan)  # before any rename: its "move" event reads them
        self._lap("marks")
        results = [] if cfg.dry_run or the_plan.empty else self._apply(the_plan.steps)
        self._lap("apply")
        if not cfg.dry_run:
            self._keep_added(results)
            self._keep_altnames(altname_journal.forget(self._loaded_altnames(), results))
        self.stale_links = self.stale_links or bool(results)
        self.passes += 1
        errors = [p for problems in self.belief.errors().values() for p in problems]
        errors.extend(self.belief.device_rejections())
        errors.extend(self.belief.hint_conflicts())
        if self._index_problem is not None:
            errors.append(self._index_problem)
        status = summarize(
            matching,
            the_plan,
            results,
            MetadataState(
                tuple(errors),
                tuple(self._claims()),
                self.belief.upstream_warnings(),
                self._origins,
            ),
            reconcile=self.passes,
            dry_run=cfg.dry_run,
            state=self._state if not results else None,
            conditions=self._conditions(),
        )
        self._lap("status")
        for r in results:
            if r.ok:  # every change kvdev makes is in the journal, with its reason
                log.info(
                    "%s",
                    tables.step_line(encode.step_json(r.step)),
                    extra=_fields(r.step),
                )
            else:
                log.warning(
                    "%s failed (%s): %s",
                    type(r.step).__name__,
                    "will retry" if r.retryable else "permanent",
                    r.error,
                    extra=_fields(r.step),
                )
        self._lap("logging")
        if self.more_pending():  # the pass already due saves its own status instead
            self._unwritten = status
        else:
            self._save(status)
        self._lap("writes")
        self._log_timeline(len(results))
        unsaved = [Condition("StateNotSaved", why) for why in self._unsaved.values()]
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

    def _observe_and_plan(self) -> tuple[Matching, Plan, dict[int, str]]:
        """Read, observe, match and plan; also the rename journal pruned for this state."""
        cfg = self.config
        limits: list[Problem] = []
        unavailable: list[str] = []
        under = str(cfg.metadata_root).rstrip("/") + "/"  # content read from the root: a root
        expected = any(e.source.startswith(under) for e in self.belief.entries)  # gone is a gap

        volume = [False]  # the root is a ConfigMap volume (read() says)

        def read() -> tuple[list[RawFile], bool]:  # on the reads' thread when there is one
            self.before_pass()
            raws, complete = files.read_sources(
                cfg.metadata_root,
                cfg.hints_path,
                cfg.config_drive,
                bounds=self.bounds,
                on_limit=limits.append,
                root_expected=expected,
                on_unavailable=unavailable.append,
            )
            volume[0] = files.is_configmap_volume(cfg.metadata_root)
            return raws, complete

        result = read() if self.reads is None else self.reads.run(read)
        self._lap("read")
        if isinstance(result, Late):  # a share that stopped answering: keep what we know
            why = f"{cfg.metadata_root} not read: {result.message}; the last good state stays"
            self._unavailable = (why,)
        else:
            self._limits, self._unavailable = tuple(limits), tuple(unavailable)
            self.belief = sources.update(self.belief, result[0], listing_complete=result[1])
            before = self._index_problem
            self._origins, self._index_problem = _origins_of(result[0], configmap=volume[0])
            if self._index_problem is not None and self._index_problem != before:
                log.warning("%s", self._index_problem)  # once, not on every pass
        self._lap("parse")
        if self.stale_links:
            self._state = self.net.read_state()
            self.stale_links = False
        if self.stale_devices or self._configured is None:
            self._configured = self._read_netconfig()
        if self.stale_devices:
            self._devices = self.scan_devices()
            self.stale_devices = False
        self._lap("observe")
        guest = inventory.merge(self._devices, self._state.links, allow_kinds=cfg.match_kinds)
        matching = match(self.belief.described(), guest, self.belief.hints(), self.belief.tagged())
        policy = Policy(link_dir=str(cfg.link_dir), altnames=cfg.altnames)
        restore = rename_journal.prune(self._loaded_journal(), self._state)
        self._kernel_keeps_proto = self._kernel_keeps_proto or any(
            a.proto is not None for a in self._state.addresses
        )
        self._added = kvdev_added.prune(self._loaded_added(), self._state)
        state = kvdev_added.attribute(self._state, self._added)  # kernels without IFA_PROTO
        self._altnames = altname_journal.prune(self._loaded_altnames(), self._state)
        owned = self._guest_owned(matching)
        wishes = linkfiles.read(str(cfg.link_dir))
        dns = self._dns_servers()
        the_plan = plan(matching, state, wishes, policy, restore, owned, self._altnames, dns=dns)
        the_plan = self._nm_check(the_plan)
        self._lap("plan")
        return matching, the_plan, restore

    def _read_netconfig(self) -> tuple[primary.Configured, ...]:
        """The NICs the guest's own network configuration names (read again on udev events).

        A problem is logged when it first appears, not again on every re-read while it lasts.
        """
        configured, problems = netconfig.read(self.config.config_root)
        self._auto, nm_problems = netconfig.auto_default(self.config.config_root)
        problems += nm_problems
        for problem in problems:
            if problem not in self._config_problems:
                log.warning("the guest's network configuration: %s", problem)
        self._config_problems = problems
        return configured

    def _nm_check(self, the_plan: Plan) -> Plan:
        """The plan with a warning on each link NetworkManager manages although kvdev does.

        Also kept for the status (a ``NetworkManagerManages`` condition per link).
        """
        configured = [(d.ifindex, d.ifname) for d in the_plan.desired]
        managed = netconfig.nm_managed(self.config.config_root, [i for i, _ in configured])
        overrides = marking.nm_overrides(configured, managed)
        self._nm_overrides = tuple(why for _, why in overrides)
        if not overrides:
            return the_plan
        devices = {d.ifname: d.device for d in the_plan.desired}
        warned = [Warned(devices[name], name, why) for name, why in overrides]
        return replace(the_plan, warnings=(*the_plan.warnings, *warned))

    def _dns_servers(self) -> tuple[str, ...]:
        """The guest's DNS servers (``safety.Guard``): read on every pass, a few small files."""
        servers, problems = netconfig.dns_servers(self.config.config_root)
        for problem in problems:
            if problem not in self._config_problems:
                log.warning("the guest's resolver configuration: %s", problem)
        return servers

    def _guest_owned(self, matching: Matching) -> primary.Decision:
        """The guest's own NICs (``core.primary``); the record is saved when it grows."""
        if self._owned is None:
            self._owned = primary_record.load(self.config.state_dir, set_aside=self._writes)
        protected = tuple(
            primary.Configured(where, p.name, p.mac_address, p.pci_address)
            for where, p in self.belief.protected()
        )
        pci_macs = {
            g.pci_address: g.nics[0].mac
            for g in self._devices
            if g.pci_address and len(g.nics) == 1 and g.nics[0].mac
        }
        taken = {
            b.nic.ifindex
            for b in matching.bindings
            if b.state is MatchState.BOUND and b.nic is not None
        }
        decision, added = primary.decide(
            (*protected, *(self._configured or ())),
            self._state,
            self._owned,
            pci_macs,
            self._auto,
            taken,
        )
        if not added and "primary" not in self._unsaved:
            return decision
        for line in added:
            log.info("the guest's own NIC, never configured by kvdev: %s", line)
        if self.config.dry_run:
            return decision
        try:
            primary_record.save(self.config.state_dir, decision)
        except OSError as e:
            path = self.config.state_dir / primary_record.RECORD_FILE
            self._not_saved("primary", os_error(e, "save the guest's own NICs in", path))
            return decision
        self._unsaved.pop("primary", None)
        self._owned = decision
        return decision

    @property
    def _writes(self) -> bool:
        """False on a dry run: it reads the state directory and writes nothing there."""
        return not self.config.dry_run

    def _conditions(self) -> list[Condition]:
        """What holds about the agent itself after this pass's read (see ``Condition``)."""
        out = [Condition("MetadataTruncated", p.message, p.severity) for p in self._limits]
        out.extend(Condition("MetadataUnavailable", why) for why in self._unavailable)
        out.extend(
            Condition("NetworkManagerManages", why, Severity.WARNING) for why in self._nm_overrides
        )
        if (why := self.watch_problem()) is not None:
            out.append(Condition("MetadataPolled", why, Severity.WARNING))
        return out

    def _loaded_journal(self) -> dict[int, str]:
        """The rename journal, read from the state directory once."""
        if self._journal is None:
            self._journal = rename_journal.load(self.config.state_dir, set_aside=self._writes)
        return self._journal

    @property
    def _journal_retryable(self) -> bool:
        return self._journal_error is None or self._journal_error.retryable

    def _not_saved(self, what: str, error: KvdevError) -> None:
        """Keep ``error`` as why ``what`` is not saved (a StateNotSaved condition), warning once."""
        if self._unsaved.get(what) != str(error):
            log.warning("%s", error)
        self._unsaved[what] = str(error)

    def _write_journal(
        self, key: str, save: Callable[[Path, J], None], journal: J, name: str, what: str
    ) -> KvdevError | None:
        """``save`` ``journal`` in the state directory (file ``name``); why not, if it failed.

        A failure is kept under ``key`` (a StateNotSaved condition) until a write succeeds.
        """
        try:
            save(self.config.state_dir, journal)
        except OSError as e:
            doing = f"{'save' if journal else 'remove'} the {what}"
            error = os_error(e, doing, self.config.state_dir / name)
            self._not_saved(key, error)
            return error
        self._unsaved.pop(key, None)
        return None

    def _keep_journal(self, journal: dict[int, str]) -> bool:
        """Make ``journal`` the rename journal, on disk too when it changed; False if not saved."""
        if journal == self._journal and "journal" not in self._unsaved:
            return True
        self._journal = journal
        file = rename_journal.JOURNAL_FILE
        error = self._write_journal("journal", rename_journal.save, journal, file, "rename journal")
        if error is not None:
            self._journal_error = error
            return False
        return True

    def _loaded_added(self) -> dict[int, frozenset[str]]:
        """The address journal, read from the state directory once."""
        if self._added is None:
            self._added = address_journal.load(self.config.state_dir, set_aside=self._writes)
            self._added_saved = dict(self._added)
        return self._added

    def _keep_added(self, results: Sequence[StepResult]) -> None:
        """Journal the addresses this pass added (kernels without IFA_PROTO: ``core.added``)."""
        journal = kvdev_added.record(self._loaded_added(), results)
        if self._kernel_keeps_proto:
            journal = {}
        self._added = journal
        if journal == self._added_saved and "addresses" not in self._unsaved:
            return
        file = address_journal.JOURNAL_FILE
        save = address_journal.save
        if self._write_journal("addresses", save, journal, file, "address journal") is None:
            self._added_saved = dict(journal)

    def _loaded_altnames(self) -> dict[int, frozenset[str]]:
        """The altname journal, read from the state directory once."""
        if self._altnames is None:
            self._altnames = altname_journal.load(self.config.state_dir, set_aside=self._writes)
            self._altnames_saved = dict(self._altnames)
        return self._altnames

    def _keep_altnames(self, journal: dict[int, frozenset[str]]) -> KvdevError | None:
        """Make ``journal`` the altname journal, on disk too when it changed; why not, if not."""
        self._altnames = journal
        if journal == self._altnames_saved and "altnames" not in self._unsaved:
            return None
        file = altname_journal.JOURNAL_FILE
        save = altname_journal.save
        error = self._write_journal("altnames", save, journal, file, "altname journal")
        if error is None:
            self._altnames_saved = dict(journal)
        return error

    def _journal_altnames(self, kernel: list[Step]) -> tuple[list[Step], list[StepResult]]:
        """Record the altnames ``kernel`` adds before any is added; hold those not recorded.

        Returns the steps to send and the failed results of the AddAltname steps held: all of
        them when the journal cannot be saved, one past ``MAX_PER_LINK`` of its link.
        """
        adds = [s for s in kernel if isinstance(s, AddAltname)]
        if not adds:
            return kernel, []
        journal = altname_journal.record(self._loaded_altnames(), adds)
        error = self._keep_altnames(journal)
        held: list[StepResult] = []
        for step in adds:
            if error is not None:
                why = f"not done: {error}; no altname is added without its journal"
                held.append(StepResult(step, ok=False, error=why, retryable=error.retryable))
            elif step.altname not in journal.get(step.ifindex, ()):
                why = (
                    f"not done: the altname journal holds {altname_journal.MAX_PER_LINK} "
                    f"altnames kvdev added to {step.ifname} already"
                )
                held.append(StepResult(step, ok=False, error=why))
        waiting = {id(r.step) for r in held}
        return [s for s in kernel if id(s) not in waiting], held

    def _mark(self, matching: Matching, the_plan: Plan) -> None:
        """Keep the mark files (``core.marking``) as this pass wants them; a failure is unsaved."""
        wanted = marking.wanted(matching, (d.ifindex for d in the_plan.desired), self._state)
        if wanted == self._marked and "marks" not in self._unsaved:
            return
        path = markfiles.directory(self.config.state_dir)
        try:
            added, removed = markfiles.sync(path, wanted)
        except OSError as e:
            error = os_error(e, "keep the link marks in", path)
            self._not_saved("marks", error)
            return
        self._unsaved.pop("marks", None)
        self._marked = wanted
        if added or removed:
            log.info(
                "link marks: added %s, removed %s",
                ", ".join(sorted(added)) or "none",
                ", ".join(sorted(removed)) or "none",
            )

    def _claims(self) -> list[ClaimStatus]:
        """Per metadata file in force: the claim and the generation acted on."""
        out = []
        for entry in self.belief.entries:
            doc = entry.used.document if entry.used is not None else None
            if isinstance(doc, DeviceMetadata) and entry.used is not None:
                namespace = doc.metadata.namespace if doc.metadata else None
                out.append(
                    ClaimStatus(
                        doc.claim,
                        namespace,
                        doc.pod_claim_name,
                        doc.generation,
                        entry.source,
                        entry.used.api_version,
                        entry.used.fallback,
                        self._origins.label(entry.source.rsplit("/", 1)[-1]),
                    )
                )
        return out

    def _tidy(self) -> None:
        """Remove the temporary files of writes a previous agent was killed in the middle of."""
        try:
            left = [  # the files the agent itself writes there, and only those
                path
                for name in (
                    STATUS_FILE,
                    rename_journal.JOURNAL_FILE,
                    address_journal.JOURNAL_FILE,
                    altname_journal.JOURNAL_FILE,
                )
                for path in remove_leftovers(self.config.state_dir, name)
            ]
            left += linkfiles.tidy(str(self.config.link_dir))
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

        A failure is kept in ``_unsaved`` (the status shows it) until a later write succeeds.
        A dry run writes nothing, its status included.
        """
        self._unwritten = None
        if self.config.dry_run:
            return
        body = encode.status_json(status)
        body.pop("reconcile")
        text = json.dumps(body, indent=2, sort_keys=True) + "\n"
        if text == self._saved:
            return
        path = self.config.state_dir / STATUS_FILE
        try:
            self.config.state_dir.mkdir(parents=True, exist_ok=True, mode=0o755)
            write_atomic(path, text.encode(), mode=0o644)
        except OSError as e:
            error = os_error(e, "save the status in", path)
            self._not_saved("status", error)
            return
        self._unsaved.pop("status", None)
        self._saved = text

    def _apply(self, steps: Sequence[Step]) -> list[StepResult]:
        """Apply the steps: kernel ones over netlink, link wishes on disk.

        A trade of names starts only once its journal is on disk: when the journal cannot be
        saved, every rename of the pass (and the link-down before it) waits, as a failed step
        (retryable or not as the error is), and the other steps go ahead. So does an altname
        until the altname journal on disk holds it.
        """
        kernel = [s for s in steps if not isinstance(s, WriteLinkFile | RemoveLinkFile)]
        journal = rename_journal.record(self._loaded_journal(), kernel)
        held: list[StepResult] = []
        needed = journal != self._loaded_journal() or "journal" in self._unsaved
        if needed and not self._keep_journal(journal):  # before any rename
            why = self._unsaved["journal"]
            error = f"not done: {why}; no link is renamed without its journal"
            retryable = self._journal_retryable
            held = [
                StepResult(s, ok=False, error=error, retryable=retryable)
                for s in kernel
                if isinstance(s, Rename | SetDown)
            ]
            kernel = [s for s in kernel if not isinstance(s, Rename | SetDown)]
        kernel, unjournaled = self._journal_altnames(kernel)
        held.extend(unjournaled)
        results = self.net.apply(kernel) if kernel else []
        results.extend(held)
        results.extend(
            linkfiles.apply(s) for s in steps if isinstance(s, WriteLinkFile | RemoveLinkFile)
        )
        return results


def _origins_of(raws: list[RawFile], *, configmap: bool) -> tuple[Origins, Problem | None]:
    """The streams' origins a ConfigMap volume's index says (read as data: ``schema/origins``).

    A tree (not a ConfigMap volume): not known. A volume without an index (an older
    controller): every stream is the reconstruction. An index that cannot be read or does not
    parse, an empty one included, is its problem (a metadata error naming the key and the
    field); the origins are then not known.
    """
    if not configmap:
        return Origins(), None
    index = next((r for r in raws if r.source.rsplit("/", 1)[-1] == SOURCES_KEY), None)
    if index is None:
        return Origins(configmap=True), None
    if index.data is None:
        return Origins(), index.problem
    found, problem = parse_origins(index.data, index.source)
    if problem is not None:
        return Origins(), problem
    return Origins(configmap=True, sources=found), None


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
