"""The running controller: reflectors -> index -> a queue of VMIs -> render -> writes.

One reflector thread per watched kind (VMIs, virt-launcher pods, ResourceClaims,
ResourceSlices, the controller's own ConfigMaps, and the relay records of the relay's namespace
alone: none without one) feeds the ``Index`` under one lock; every
change queues the VMIs it concerns. Once every kind has been listed, ``workers`` threads take
VMIs off one ``KeyedQueue`` (``workqueue``: a VMI is never synced by two workers at once; a
change during its sync queues it again for afterwards) and sync each: ``render`` from the
index, then POST (create) or PUT (update), or nothing when nothing changed. Several workers
overlap the API server's round trips (each write waits ~10 ms for it); the client's
``--kube-api-qps`` still bounds them all together. A 409 (someone else wrote first, the
object already exists) or a 404 on an update is retried from a fresh GET, deciding again (at
most ``CONFLICT_TRIES`` times in one sync). A retryable failure puts the VMI back after a per-VMI
back-off; a permanent one waits for the next change. Every ``resync`` seconds every VMI is
queued again (writes still happen only on change). With an elector, the reflectors list and
watch at once (a standby's caches are warm, and it is ready when they are synced, as a
controller-runtime manager's readiness does not depend on leading), but nothing is written
before the Lease is held, and losing it stops everything (``run`` returns False).

What each sync decides goes to the ``Metrics`` and, as Events on the VMI (ConfigMap created
or updated, a claim pending, a hint or ConfigMap refused), to the ``Recorder`` when there is
one; ``healthz``, ``readyz`` and ``leading`` are the HTTP probes' answers. Each sync also
judges whether the guest applied the NICs its ConfigMap describes (``guests``, from the VMI's
``status.interfaces[]``, which the VMI watch already brings: a status change queues the VMI
like any other change), remembered by ``guestwatch.Tracker`` (grace, Events, the guest metrics)
and written as the ConfigMap's ``kvdev.io/guest`` annotation with the sync's own write (alone
only when the verdict changed).

Measured, per sync: API calls (``api.calls``) and the reconcile count (``stats``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kvdev.errors import KvdevError, RetryableError
from kvdev.host import logs
from kvdev.host.contract import CONTROLLER, MANAGED_BY, configmap_name
from kvdev.host.controller.backoff import Backoff
from kvdev.host.controller.election import LeaseElector
from kvdev.host.controller.guests import annotate
from kvdev.host.controller.guestwatch import GRACE_SECONDS, Assessment, Counts, Tracker
from kvdev.host.controller.index import CONFIGMAPS, Index, Key, Kind, parse
from kvdev.host.controller.metrics import Metrics, State, Watched
from kvdev.host.controller.recorder import Recorder
from kvdev.host.controller.reflector import Change, Delete, Reflector, Replace, Upsert
from kvdev.host.controller.render import Inputs, Rendered, Verb, render
from kvdev.host.controller.vmievents import Note, ObjectRef, Reason
from kvdev.host.controller.workqueue import WORKERS, KeyedQueue
from kvdev.host.k8s.kubevirt import API_VERSION as VMI_API_VERSION
from kvdev.host.k8s.kubevirt import KIND as VMI_KIND
from kvdev.host.kube.errors import ConflictError, NotFoundError
from kvdev.host.kube.wire import KubeApi

log = logging.getLogger(__name__)
CONFLICT_TRIES = 5
# ConfigMaps are listed 10 at a time: a page of them (up to 1 MiB each) is held whole, several
# times over (the response, its text, the parsed JSON), while it is read; this bounds what one
# page costs, whoever wrote them (a tenant may label its ConfigMaps as the controller's).
CONFIGMAP_PAGE_MAX = 10
_VMI = "VirtualMachineInstance"


def _same_content(stored: Mapping[str, Any], body: Mapping[str, Any]) -> bool:
    """The stored ConfigMap holds what ``body`` writes: data, labels and owners alike."""
    meta, sent = stored.get("metadata") or {}, body.get("metadata") or {}
    return (
        (stored.get("data") or {}) == (body.get("data") or {})
        and (stored.get("binaryData") or {}) == (body.get("binaryData") or {})
        and (meta.get("labels") or {}) == (sent.get("labels") or {})
        and (meta.get("ownerReferences") or []) == (sent.get("ownerReferences") or [])
    )


def _about(result: Rendered) -> dict[str, Any]:
    """The log records' ``extra=`` naming the VMI (its uid from the ConfigMap's owner)."""
    namespace, _, name = result.vmi.partition("/")
    owners = ((result.body or {}).get("metadata") or {}).get("ownerReferences") or [{}]
    return logs.about(_VMI, namespace, name, owners[0].get("uid"))


@dataclass
class Stats:
    """What the controller did, for logs and the measured figures."""

    syncs: int = 0
    creates: int = 0
    updates: int = 0
    unchanged: int = 0
    refused: int = 0
    conflicts: int = 0
    failures: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, what: str) -> None:
        """One more of ``what`` (a field's name), safe from several workers at once."""
        with self._lock:
            setattr(self, what, getattr(self, what) + 1)


class Controller:
    """Keep every DRA-using VMI's ConfigMap current (see the module docstring)."""

    def __init__(  # noqa: PLR0913 - keyword-only settings and parts
        self,
        api: KubeApi,
        *,
        resync: float = 600.0,
        watch_seconds: int = 300,
        page_size: int = 500,
        workers: int = WORKERS,
        clock: Callable[[], float] = time.monotonic,
        backoff: Callable[[], Backoff] = Backoff,
        metrics: Metrics | None = None,
        recorder: Recorder | None = None,
        relay_namespace: str | None = None,
        renderer: Callable[[Inputs], Rendered] = render,
        guest_grace: float = GRACE_SECONDS,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        self.api = api
        self._render = renderer
        self.resync = resync
        self.workers = workers
        self.index = Index(relay_namespace)
        self.stats = Stats()
        self.clock = clock
        self.metrics = metrics or Metrics()
        self.recorder = recorder
        # A watch that shows no sign of life (event, bookmark, list, a clean end) for this
        # long is wedged: a healthy one ends by its timeout and is opened again.
        self.stale_after = 2.0 * (watch_seconds + api.timeout)
        self._since: dict[Key, float] = {}  # the first change not yet written, per VMI
        self._writing: dict[Key, Mapping[str, Any]] = {}  # ConfigMap key -> body being written
        self._beats: dict[int, float] = {}  # each worker's last turn (and the main loop's: -1)
        self._noted: dict[Key, frozenset[Note]] = {}  # each VMI's notes at its last sync
        self._lock = threading.Lock()
        self.idle = threading.Event()  # synced and nothing queued or being synced
        self._queue: KeyedQueue[Key] = KeyedQueue(clock, self.idle)
        self._backoff = backoff
        self._failures: dict[Key, Backoff] = {}
        self._stop = threading.Event()
        self.reflectors = [
            Reflector(
                api,
                kind,
                self.observe,
                self._stop,
                page_size=min(page_size, CONFIGMAP_PAGE_MAX) if kind in CONFIGMAPS else page_size,
                watch_seconds=watch_seconds,
                backoff=backoff(),
                known=self._known,
                clock=clock,
                namespace=relay_namespace if kind is Kind.RECORD else None,
            )
            for kind in Kind
            if kind is not Kind.RECORD or relay_namespace  # no relay namespace: no records
        ]
        self.synced = threading.Event()  # every kind listed once
        self.leading = threading.Event()  # holds the Lease, or runs without one
        self.metrics.watch_state(self.state)
        self.guests = Tracker(guest_grace)
        self._guest_lock = threading.Lock()
        self._rechecks: dict[Key, float] = {}  # VMIs to judge again, and when (the grace's end)
        self.metrics.watch_guests(self.guest_counts)

    # ------------------------------------------------------------------ events

    def observe(self, change: Change) -> None:
        """A reflector's change: into the index; queue the VMIs it concerns."""
        with self._lock:
            if isinstance(change, Replace):
                touched = self.index.replace(change.kind, change.items)
            elif isinstance(change, Upsert):
                touched = self.index.upsert(change.kind, change.stored)
                if touched and change.kind is Kind.CONFIGMAP:
                    writing = self._writing.get(change.stored.key)
                    if writing is not None and _same_content(change.stored.raw, writing):
                        touched = set()  # our own write's echo, ahead of its answer
            else:
                assert isinstance(change, Delete)
                touched = self.index.remove(change.kind, change.key)
        if touched:
            now = self.clock()
            with self._lock:
                for key in touched:
                    self._since.setdefault(key, now)
            self._queue.add(touched)

    def _known(self, kind: Kind, key: Key, version: str) -> bool:
        """The cache holds ``key`` at ``version`` (an event not worth parsing again)."""
        with self._lock:
            found = self.index.get(kind, key)
        return found is not None and found.version == version

    # ------------------------------------------------------------------ one VMI

    def sync(self, key: Key) -> Rendered | None:
        """Render the VMI and write what changed; None when the VMI is gone.

        Raises:
            RetryableError: still conflicting after ``CONFLICT_TRIES`` fresh reads, or the API
                failed in a way worth retrying.
            PermanentError: the API refused in a way that retrying cannot fix (RBAC).
        """
        with self._lock:
            inputs = self.index.inputs(key)
            since = self._since.pop(key, None)
        if inputs is None:
            self._noted.pop(key, None)
            with self._guest_lock:
                self.guests.forget(key)
            return None
        self.stats.count("syncs")
        self.metrics.renders.inc()
        if inputs.partial:  # a ConfigMap not of our shape: the cache kept no data of it
            name = configmap_name(inputs.vmi.metadata.name)
            fresh = self.api.get_configmap(inputs.vmi.metadata.namespace or "", name)
            inputs = replace(inputs, existing=fresh, partial=False)
        assessed: Assessment | None = None
        for _ in range(CONFLICT_TRIES):
            try:
                result = self._render(inputs)
                assessed = assessed or self._assess(key, inputs, result)
                summary = assessed.report.summary if assessed is not None else None
                written = self._write(
                    result if summary is None else annotate(result, inputs.existing, summary)
                )
            except (ConflictError, NotFoundError) as e:  # 409, or 404 on an update
                self.stats.count("conflicts")
                self.metrics.conflicts.inc()
                log.info("%s: %s: reading it again", result.vmi, e, extra=_about(result))
                fresh = self.api.get_configmap(result.namespace, result.name)
                inputs = replace(inputs, existing=fresh)
                self._remember(fresh)
            except Exception:
                if since is not None:
                    with self._lock:
                        self._since.setdefault(key, since)
                raise
            else:
                if since is not None and written.verb in (Verb.CREATE, Verb.UPDATE):
                    self.metrics.latency.observe(max(self.clock() - since, 0.0))
                self._record(key, inputs, result, assessed)
                return written
        if since is not None:
            with self._lock:
                self._since.setdefault(key, since)
        msg = f"{key[0]}/{key[1]}: ConfigMap still conflicting after {CONFLICT_TRIES} tries"
        raise RetryableError(msg)

    def _assess(self, key: Key, inputs: Inputs, result: Rendered) -> Assessment | None:
        """The guest's verdict on the NICs ``result`` describes (None: nothing to judge)."""
        if result.verb is Verb.REFUSE or not result.data:
            return None
        with self._guest_lock:
            return self.guests.assess(key, inputs.vmi, result.data, self.clock(), result.documents)

    def guest_counts(self) -> Counts:
        """The guest metrics, at a scrape."""
        with self._guest_lock:
            return self.guests.counts(self.clock())

    def _record(
        self, key: Key, inputs: Inputs, result: Rendered, assessed: Assessment | None = None
    ) -> None:
        """The sync's notes as Events on the VMI (queued: never waits for the API server).

        A note the VMI's previous sync had too is recorded again (its Event's count raised)
        only by a sync that wrote (``result``: what was rendered, before the guest annotation):
        a pod's status heartbeat costs no Event PATCH, and the spam filter's budget is left for
        what changed. The guest's NICs' state changes are noted as ``assessed`` says, and the
        VMI is queued again when it says to look again (the grace's end, an Event held back).
        """
        if assessed is not None and assessed.recheck is not None:
            due = self.clock() + assessed.recheck
            with self._guest_lock:  # queued by the main loop when due (the queue stays idle)
                self._rechecks[key] = min(self._rechecks.get(key, due), due)
        vmi = inputs.vmi.metadata
        if self.recorder is None or not vmi.uid or not vmi.namespace:
            return
        previous = self._noted.get(key, frozenset())
        self._noted[key] = frozenset(result.notes)
        wrote = result.verb in (Verb.CREATE, Verb.UPDATE)
        notes = [n for n in result.notes if wrote or n not in previous]
        notes.extend(assessed.notes if assessed is not None else ())
        streams = f"{result.streams} metadata stream(s) and the guest hints"
        if result.verb is Verb.CREATE:
            notes.append(
                Note(Reason.CONFIGMAP_CREATED, f"created ConfigMap {result.name}: {streams}")
            )
        elif result.verb is Verb.UPDATE:
            notes.append(
                Note(Reason.CONFIGMAP_UPDATED, f"updated ConfigMap {result.name}: {streams}")
            )
        if notes:
            ref = ObjectRef(VMI_API_VERSION, VMI_KIND, vmi.namespace, vmi.name, vmi.uid)
            self.recorder.record(ref, notes)

    def _write(self, result: Rendered) -> Rendered:
        for problem in result.problems:
            log.warning("%s: %s", result.vmi, problem, extra=_about(result))
        if result.verb is Verb.CREATE:
            assert result.body is not None
            with self._in_flight(result):
                self._remember(self.api.create_configmap(result.namespace, result.body))
            self.stats.count("creates")
            self.metrics.writes.labels("created").inc()
            log.info(
                "%s: created ConfigMap %s (%d streams)",
                *(result.vmi, result.name, result.streams),
                extra=_about(result),
            )
        elif result.verb is Verb.UPDATE:
            assert result.body is not None
            with self._in_flight(result):
                self._remember(self.api.replace_configmap(result.namespace, result.body))
            self.stats.count("updates")
            self.metrics.writes.labels("updated").inc()
            log.info(
                "%s: updated ConfigMap %s (%d streams)",
                *(result.vmi, result.name, result.streams),
                extra=_about(result),
            )
        elif result.verb is Verb.REFUSE:
            self.stats.count("refused")
            self.metrics.errors.labels("refused").inc()
            if any(n.reason is Reason.CONFIGMAP_OTHER_OWNER for n in result.notes):
                self.metrics.owner_refusals.inc()
        else:
            self.stats.count("unchanged")
            self.metrics.writes.labels("unchanged").inc()
        return result

    @contextlib.contextmanager
    def _in_flight(self, result: Rendered) -> Iterator[None]:
        """While a write is out: its watch event, if it comes before the answer, queues nothing.

        The echo of a create or update can reach the ConfigMap watch before the worker has the
        answer and ``_remember``s it; without this, it would queue the VMI again for a sync that
        finds nothing to do, behind which a real change waits.
        """
        assert result.body is not None
        key = (result.namespace, result.name)
        with self._lock:
            self._writing[key] = result.body
        try:
            yield
        finally:
            with self._lock:
                self._writing.pop(key, None)

    def _remember(self, stored: dict[str, Any] | None) -> None:
        """Our own write (or a fresh read) into the cache at once; the watch confirms it."""
        if stored is None:
            return
        labels = (stored.get("metadata") or {}).get("labels") or {}
        if labels.get(MANAGED_BY) != CONTROLLER:
            return
        try:
            item = parse(Kind.CONFIGMAP, stored)
        except KvdevError:
            return
        with self._lock:
            self.index.upsert(Kind.CONFIGMAP, item)

    # ------------------------------------------------------------------ the loop

    def run(self, stop: threading.Event, *, elector: LeaseElector | None = None) -> bool:
        """Until ``stop``: True after a clean stop, False when the Lease was lost."""
        lost = threading.Event()
        keeper = None
        threads = self._start()
        try:
            if elector is not None:
                if elector.api is None:  # the command gives it a client of its own
                    elector.api = self.api
                if not elector.acquire(stop):
                    return True
                keeper = threading.Thread(
                    target=elector.keep, args=(stop, lost), name="kvdev-lease", daemon=True
                )
                keeper.start()
            self.leading.set()
            self._work(stop, lost)
        finally:
            self.leading.clear()
            self._stop.set()
            for reflector in self.reflectors:
                reflector.close()
            for thread in threads:
                thread.join(timeout=5)
            if elector is not None:
                if keeper is not None:
                    keeper.join(timeout=5)
                if not lost.is_set():
                    elector.release()
        if lost.is_set():
            log.error("lost the Lease: stopping")
            return False
        return True

    def _start(self) -> list[threading.Thread]:
        """The reflectors' threads and the recorder's, started."""
        threads = [
            threading.Thread(target=r.run, name=f"kvdev-watch-{r.kind.name.lower()}", daemon=True)
            for r in self.reflectors
        ]
        if self.recorder is not None:
            name = "kvdev-events"
            runner = self.recorder.run
            threads.append(
                threading.Thread(target=runner, args=(self._stop,), name=name, daemon=True)
            )
        for thread in threads:
            thread.start()
        return threads

    def _work(self, stop: threading.Event, lost: threading.Event) -> None:
        """Once synced: the workers sync what is queued; this thread queues every resync."""
        while not (stop.is_set() or lost.is_set()):
            self._beats[-1] = self.clock()
            if all(r.synced.is_set() for r in self.reflectors):
                break
            stop.wait(0.05)
        else:
            return
        self.synced.set()
        log.info("caches synced: %d VMIs (%d workers)", self.index.count(Kind.VMI), self.workers)
        with self._lock:
            self._queue.add(self.index.vmis())
        done = threading.Event()
        workers = [
            threading.Thread(
                target=self._worker, args=(n, stop, lost, done), name=f"kvdev-sync-{n}", daemon=True
            )
            for n in range(self.workers)
        ]
        for worker in workers:
            worker.start()
        try:
            next_resync = self.clock() + self.resync
            while not (stop.is_set() or lost.is_set()):
                self._beats[-1] = self.clock()
                if self.clock() >= next_resync:
                    with self._lock:
                        self._queue.add(self.index.vmis())
                    next_resync = self.clock() + self.resync
                self._queue_rechecks()
                stop.wait(min(1.0, max(next_resync - self.clock(), 0.01)))
        finally:
            done.set()
            self._queue.wake()
            for worker in workers:
                worker.join(timeout=5)

    def _queue_rechecks(self) -> None:
        """Queue the VMIs whose guest verdict is due to be looked at again."""
        now = self.clock()
        with self._guest_lock:
            due = [k for k, t in self._rechecks.items() if t <= now]
            for key in due:
                del self._rechecks[key]
        if due:
            self._queue.add(due)

    def _worker(
        self, n: int, stop: threading.Event, lost: threading.Event, done: threading.Event
    ) -> None:
        """One worker: the next VMI no other worker holds, synced, until told to stop."""
        while not (stop.is_set() or lost.is_set() or done.is_set()):
            self._beats[n] = self.clock()
            key = self._queue.get(done, timeout=1.0)
            if key is None:
                self._queue.settle()
                continue
            try:
                self._sync_one(key)
            finally:
                self._queue.done(key)
            self._queue.settle()

    def _sync_one(self, key: Key) -> None:
        try:
            self.sync(key)
        except KvdevError as e:
            self.stats.count("failures")
            self.metrics.errors.labels("retryable" if e.retryable else "permanent").inc()
            backoff = self._failures.setdefault(key, self._backoff())
            if e.retryable:
                delay = backoff.next()
                log.warning(
                    "%s/%s: %s (again in %.1f s)", *key, e, delay, extra=logs.about(_VMI, *key)
                )
                self._queue.add([key], delay)
            else:
                log.error(  # noqa: TRY400 - expected, no traceback
                    "%s/%s: %s (waiting for a change)", *key, e, extra=logs.about(_VMI, *key)
                )
            return
        except Exception:  # one VMI's content (or a defect) never ends a worker
            self.stats.count("failures")
            self.metrics.errors.labels("exception").inc()
            delay = self._failures.setdefault(key, self._backoff()).next()
            log.exception(
                "%s/%s: the sync failed unexpectedly (again in %.1f s)",
                *(*key, delay),
                extra=logs.about(_VMI, *key),
            )
            self._queue.add([key], delay)
            return
        self._failures.pop(key, None)

    # ------------------------------------------------------------------ the probes

    def state(self) -> State:
        """What ``/metrics`` reads at each scrape."""
        watched = [Watched(r.kind.kind, r.lists, r.watches) for r in self.reflectors]
        with self._lock:
            vmis, claims = self.index.count(Kind.VMI), self.index.count(Kind.CLAIM)
        return State(watched, vmis, claims, self.leading.is_set(), len(self._queue))

    def healthz(self) -> tuple[bool, str]:
        """Alive: no watch and no worker silent for ``stale_after`` seconds."""
        now = self.clock()
        wedged = [
            f"watch {r.kind.kind}: no event, bookmark or list for {now - r.progressed:.0f} s"
            for r in self.reflectors
            if r.progressed is not None and now - r.progressed > self.stale_after
        ]
        beats = dict(self._beats)
        for n, beat in sorted(beats.items()):
            if self.leading.is_set() and now - beat > self.stale_after:
                who = "the main loop" if n < 0 else f"worker {n}"
                wedged.append(f"{who} has not turned for {now - beat:.0f} s")
        if wedged:
            return False, f"wedged (more than {self.stale_after:.0f} s): " + "; ".join(wedged)
        return True, "ok"

    def readyz(self) -> tuple[bool, str]:
        """Ready: every reflector's first list is done (leading or not)."""
        waiting = [r.kind.kind for r in self.reflectors if not r.synced.is_set()]
        if waiting:
            return False, "not synced: " + ", ".join(waiting)
        return True, "ok"

    def leader(self) -> tuple[bool, str]:
        """This replica writes: it holds the Lease, or runs without one."""
        if self.leading.is_set():
            return True, "leader"
        return False, "not leading"
