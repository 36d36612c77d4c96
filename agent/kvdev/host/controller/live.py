"""The running controller: reflectors -> index -> a queue of VMIs -> render -> writes.

One reflector thread per watched kind (VMIs, virt-launcher pods, ResourceClaims,
ResourceSlices, the controller's own ConfigMaps) feeds the ``Index`` under one lock; every
change queues the VMIs it concerns. One worker, once every kind has been listed, takes VMIs
off the queue and syncs each: ``render`` from the index, then POST (create) or PUT (update),
or nothing when nothing changed. A 409 (someone else wrote first, the object already exists)
or a 404 on an update is retried from a fresh GET, deciding again (at most
``CONFLICT_TRIES`` times in one sync). A retryable failure puts the VMI back after a per-VMI
back-off; a permanent one waits for the next change. Every ``resync`` seconds every VMI is
queued again (writes still happen only on change). With an elector, the reflectors list and
watch at once (a standby's caches are warm, and it is ready when they are synced, as a
controller-runtime manager's readiness does not depend on leading), but nothing is written
before the Lease is held, and losing it stops everything (``run`` returns False).

What each sync decides goes to the ``Metrics`` and, as Events on the VMI (ConfigMap created
or updated, a claim pending, a hint or ConfigMap refused), to the ``Recorder`` when there is
one; ``healthz``, ``readyz`` and ``leading`` are the HTTP probes' answers.

Measured, per sync: API calls (``api.calls``) and the reconcile count (``stats``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from kvdev.errors import KvdevError, RetryableError
from kvdev.host import logs
from kvdev.host.controller.backoff import Backoff
from kvdev.host.controller.election import LeaseElector
from kvdev.host.controller.events import Note, ObjectRef, Reason
from kvdev.host.controller.index import Index, Key, Kind, parse
from kvdev.host.controller.kube import ConflictError, KubeApi
from kvdev.host.controller.metrics import Metrics, State, Watched
from kvdev.host.controller.recorder import Recorder
from kvdev.host.controller.reflector import Change, Delete, Reflector, Replace, Upsert
from kvdev.host.controller.render import MANAGED_BY, MANAGER, Inputs, Rendered, Verb, render
from kvdev.host.k8s.kubevirt import API_VERSION as VMI_API_VERSION
from kvdev.host.k8s.kubevirt import KIND as VMI_KIND

log = logging.getLogger(__name__)
CONFLICT_TRIES = 5
_VMI = "VirtualMachineInstance"


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
    last: dict[Key, Rendered] = field(default_factory=dict)


class _Queue:
    """VMIs to sync: each key once, ready now or after a delay."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._ready: dict[Key, None] = {}
        self._later: dict[Key, float] = {}
        self._cond = threading.Condition()

    def add(self, keys: set[Key] | list[Key], delay: float = 0.0) -> None:
        with self._cond:
            due = self._clock() + delay
            for key in keys:
                if delay <= 0:
                    self._later.pop(key, None)
                    self._ready[key] = None
                elif key not in self._ready:
                    self._later[key] = min(self._later.get(key, due), due)
            self._cond.notify_all()

    def get(self, stop: threading.Event, timeout: float) -> Key | None:
        """The next ready key, or None after ``timeout`` or when ``stop`` is set."""
        end = self._clock() + timeout
        with self._cond:
            while not stop.is_set():
                now = self._clock()
                for key, due in list(self._later.items()):
                    if due <= now:
                        del self._later[key]
                        self._ready[key] = None
                if self._ready:
                    key = next(iter(self._ready))
                    del self._ready[key]
                    return key
                wait = min([end - now, *(d - now for d in self._later.values())])
                if wait <= 0 and end <= now:
                    return None
                self._cond.wait(max(wait, 0.01))
        return None

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._ready) + len(self._later)


class Controller:
    """Keep every DRA-using VMI's ConfigMap current (see the module docstring)."""

    def __init__(  # noqa: PLR0913 - keyword-only settings and parts
        self,
        api: KubeApi,
        *,
        resync: float = 600.0,
        watch_seconds: int = 300,
        page_size: int = 500,
        clock: Callable[[], float] = time.monotonic,
        backoff: Callable[[], Backoff] = Backoff,
        metrics: Metrics | None = None,
        recorder: Recorder | None = None,
        relay_namespace: str | None = None,
    ) -> None:
        self.api = api
        self.resync = resync
        self.index = Index(relay_namespace)
        self.stats = Stats()
        self.clock = clock
        self.metrics = metrics or Metrics()
        self.recorder = recorder
        # A watch that shows no sign of life (event, bookmark, list, a clean end) for this
        # long is wedged: a healthy one ends by its timeout and is opened again.
        self.stale_after = 2.0 * (watch_seconds + api.timeout)
        self._since: dict[Key, float] = {}  # the first change not yet written, per VMI
        self._beat: float | None = None  # the worker's last turn
        self._noted: dict[Key, frozenset[Note]] = {}  # each VMI's notes at its last sync
        self._lock = threading.Lock()
        self._queue = _Queue(clock)
        self._backoff = backoff
        self._failures: dict[Key, Backoff] = {}
        self._stop = threading.Event()
        self.reflectors = [
            Reflector(
                api,
                kind,
                self.observe,
                self._stop,
                page_size=page_size,
                watch_seconds=watch_seconds,
                backoff=backoff(),
                known=self._known,
                clock=clock,
            )
            for kind in Kind
        ]
        self.synced = threading.Event()  # every kind listed once
        self.idle = threading.Event()  # synced and nothing queued
        self.leading = threading.Event()  # holds the Lease, or runs without one
        self.metrics.watch_state(self.state)

    # ------------------------------------------------------------------ events

    def observe(self, change: Change) -> None:
        """A reflector's change: into the index; queue the VMIs it concerns."""
        with self._lock:
            if isinstance(change, Replace):
                touched = self.index.replace(change.kind, change.items)
            elif isinstance(change, Upsert):
                touched = self.index.upsert(change.kind, change.stored)
            else:
                assert isinstance(change, Delete)
                touched = self.index.remove(change.kind, change.key)
        if touched:
            now = self.clock()
            with self._lock:
                for key in touched:
                    self._since.setdefault(key, now)
            self.idle.clear()
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
            return None
        self.stats.syncs += 1
        self.metrics.renders.inc()
        for _ in range(CONFLICT_TRIES):
            result = render(inputs)
            try:
                written = self._write(result)
            except ConflictError as e:
                self.stats.conflicts += 1
                self.metrics.conflicts.inc()
                log.info("%s: %s: reading it again", result.vmi, e, extra=_about(result))
                fresh = self.api.get_configmap(result.namespace, result.name)
                inputs = replace(inputs, existing=fresh)
                self._remember(fresh)
            except KvdevError:
                if since is not None:
                    with self._lock:
                        self._since.setdefault(key, since)
                raise
            else:
                if since is not None and written.verb in (Verb.CREATE, Verb.UPDATE):
                    self.metrics.latency.observe(max(self.clock() - since, 0.0))
                self._record(key, inputs, written)
                return written
        if since is not None:
            with self._lock:
                self._since.setdefault(key, since)
        msg = f"{key[0]}/{key[1]}: ConfigMap still conflicting after {CONFLICT_TRIES} tries"
        raise RetryableError(msg)

    def _record(self, key: Key, inputs: Inputs, result: Rendered) -> None:
        """The sync's notes as Events on the VMI (queued: never waits for the API server).

        A note the VMI's previous sync had too is recorded again (its Event's count raised)
        only by a sync that wrote: a pod's status heartbeat costs no Event PATCH, and the spam
        filter's budget is left for what changed.
        """
        vmi = inputs.vmi.metadata
        if self.recorder is None or not vmi.uid or not vmi.namespace:
            return
        previous = self._noted.get(key, frozenset())
        self._noted[key] = frozenset(result.notes)
        wrote = result.verb in (Verb.CREATE, Verb.UPDATE)
        notes = [n for n in result.notes if wrote or n not in previous]
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
            self._remember(self.api.create_configmap(result.namespace, result.body))
            self.stats.creates += 1
            self.metrics.writes.labels("created").inc()
            log.info(
                "%s: created ConfigMap %s (%d streams)",
                *(result.vmi, result.name, result.streams),
                extra=_about(result),
            )
        elif result.verb is Verb.UPDATE:
            assert result.body is not None
            self._remember(self.api.replace_configmap(result.namespace, result.body))
            self.stats.updates += 1
            self.metrics.writes.labels("updated").inc()
            log.info(
                "%s: updated ConfigMap %s (%d streams)",
                *(result.vmi, result.name, result.streams),
                extra=_about(result),
            )
        elif result.verb is Verb.REFUSE:
            self.stats.refused += 1
            self.metrics.errors.labels("refused").inc()
        else:
            self.stats.unchanged += 1
            self.metrics.writes.labels("unchanged").inc()
        return result

    def _remember(self, stored: dict[str, Any] | None) -> None:
        """Our own write (or a fresh read) into the cache at once; the watch confirms it."""
        if stored is None:
            return
        labels = (stored.get("metadata") or {}).get("labels") or {}
        if labels.get(MANAGED_BY) != MANAGER:
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
        while not (stop.is_set() or lost.is_set()):
            self._beat = self.clock()
            if all(r.synced.is_set() for r in self.reflectors):
                break
            stop.wait(0.05)
        else:
            return
        self.synced.set()
        log.info("caches synced: %d VMIs", self.index.count(Kind.VMI))
        with self._lock:
            self._queue.add(self.index.vmis())
        next_resync = self.clock() + self.resync
        while not (stop.is_set() or lost.is_set()):
            self._beat = self.clock()
            key = self._queue.get(stop, timeout=min(1.0, max(next_resync - self.clock(), 0.01)))
            if key is None:
                if len(self._queue) == 0:
                    self.idle.set()
                if self.clock() >= next_resync:
                    with self._lock:
                        self._queue.add(self.index.vmis())
                    next_resync = self.clock() + self.resync
                continue
            self._sync_one(key)
            if len(self._queue) == 0:
                self.idle.set()

    def _sync_one(self, key: Key) -> None:
        try:
            result = self.sync(key)
        except KvdevError as e:
            self.stats.failures += 1
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
        self._failures.pop(key, None)
        if result is not None:
            self.stats.last[key] = result

    # ------------------------------------------------------------------ the probes

    def state(self) -> State:
        """What ``/metrics`` reads at each scrape."""
        watched = [Watched(r.kind.kind, r.lists, r.watches) for r in self.reflectors]
        with self._lock:
            vmis, claims = self.index.count(Kind.VMI), self.index.count(Kind.CLAIM)
        return State(watched, vmis, claims, self.leading.is_set())

    def healthz(self) -> tuple[bool, str]:
        """Alive: no watch and no worker silent for ``stale_after`` seconds."""
        now = self.clock()
        wedged = [
            f"watch {r.kind.kind}: no event, bookmark or list for {now - r.progressed:.0f} s"
            for r in self.reflectors
            if r.progressed is not None and now - r.progressed > self.stale_after
        ]
        beat = self._beat
        if self.leading.is_set() and beat is not None and now - beat > self.stale_after:
            wedged.append(f"the worker has not turned for {now - beat:.0f} s")
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
