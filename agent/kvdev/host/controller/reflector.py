"""Keep one resource's cache current: list, then watch from the list's resourceVersion.

The loop, per resource (as client-go's reflector does it):

1. list, paged (``limit`` + ``continue``), and hand the whole list over (``Replace``): the
   cache drops what is gone;
2. watch from the list's ``resourceVersion`` with bookmarks; each ADDED/MODIFIED/DELETED goes
   over as it comes, and each event and BOOKMARK moves the resourceVersion on;
3. a watch that ends (``timeoutSeconds``, the server closing it) is opened again from the last
   resourceVersion: nothing is missed and nothing is listed again;
4. 410 Gone (the version was compacted away; a continue token expired) lists again at once;
5. any other error waits (``Backoff``: exponential, jittered, capped) and resumes from the
   last resourceVersion, or lists again if the list itself failed.

An object that does not parse is reported (the object and field named) and skipped: the
cache keeps its last good version. Stops when ``stop`` is set (``close`` ends a watch that
is waiting for events).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kvdev.errors import KvdevError, PermanentError, SchemaError
from kvdev.host import logs
from kvdev.host.contract import CONTROLLER as MANAGER
from kvdev.host.contract import MANAGED_BY, RELAY
from kvdev.host.controller.backoff import Backoff
from kvdev.host.controller.index import Kind, Stored, parse
from kvdev.host.k8s.kubevirt import GROUP, PLURAL
from kvdev.host.kube import wire
from kvdev.host.kube.errors import GoneError
from kvdev.host.kube.wire import Collection, KubeApi, Watching

log = logging.getLogger(__name__)

LAUNCHER_SELECTOR: Final = "kubevirt.io=virt-launcher"
OWN_SELECTOR: Final = f"{MANAGED_BY}={MANAGER}"  # the controller's own ConfigMaps, anywhere
RELAY_SELECTOR: Final = f"{MANAGED_BY}={RELAY}"  # records: in the relay's namespace only


def collection(kind: Kind, namespace: str | None = None) -> Collection:
    """What the controller lists and watches of ``kind`` (``namespace``: ``Kind.RECORD``'s).

    Raises:
        PermanentError: relay records asked for without their namespace (never across
            namespaces: a tenant's ConfigMaps are not seen).
    """
    if kind is Kind.RECORD:
        if not namespace:
            raise PermanentError("relay records are listed in the relay's namespace only")
        return wire.configmaps(RELAY_SELECTOR, namespace)
    if kind is Kind.VMI:
        return wire.custom_objects(kind.kind, GROUP, "v1", PLURAL)
    if kind is Kind.POD:
        return wire.pods(LAUNCHER_SELECTOR)
    if kind is Kind.CONFIGMAP:
        return wire.configmaps(OWN_SELECTOR)
    if kind is Kind.CLAIM:
        return wire.resource_claims()
    return wire.resource_slices()


@dataclass(frozen=True, slots=True)
class Replace:
    """A fresh list of every object of the kind."""

    kind: Kind
    items: tuple[Stored, ...]


@dataclass(frozen=True, slots=True)
class Upsert:
    """An object was added or modified."""

    kind: Kind
    stored: Stored


@dataclass(frozen=True, slots=True)
class Delete:
    """An object was deleted."""

    kind: Kind
    key: tuple[str, str]


Change = Replace | Upsert | Delete
Sink = Callable[[Change], None]
Known = Callable[[Kind, tuple[str, str], str], bool]
"""Whether the cache already holds ``(namespace, name)`` of the kind at that resourceVersion."""


def _never(_kind: Kind, _key: tuple[str, str], _version: str) -> bool:
    return False


@dataclass
class Reflector:
    """List + watch one kind into ``sink``; ``synced`` is set after the first list."""

    api: KubeApi
    kind: Kind
    sink: Sink
    stop: threading.Event
    page_size: int = 500
    watch_seconds: int = 300
    namespace: str | None = None  # a namespaced kind's one namespace (Kind.RECORD)
    backoff: Backoff = field(default_factory=Backoff)
    known: Known = _never  # an event the cache already holds is not parsed again
    synced: threading.Event = field(default_factory=threading.Event)
    lists: int = 0  # how many times it listed (the first one and each re-list)
    watches: int = 0  # how many watches it opened (the first one and each re-open)
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    progressed: float | None = None  # clock() at the last list, watch opened, event or bookmark
    resource_version: str | None = None
    _watching: Watching | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def run(self) -> None:
        """Until ``stop``: list, watch, re-list on 410, back off on errors."""
        while not self.stop.is_set():
            try:
                if self.resource_version is None:
                    self._list()
                    self.backoff.reset()
                self._watch()
                self.progressed = self.clock()  # a watch that ended cleanly (its timeout)
                self.backoff.reset()
            except GoneError as e:
                log.info("%s: %s: listing again", self.kind.kind, e)
                self.resource_version = None
            except KvdevError as e:
                if self.stop.is_set():
                    return  # the stream was closed to stop
                delay = self.backoff.next()
                log.warning("%s: %s (again in %.1f s)", self.kind.kind, e, delay)
                self.stop.wait(delay)

    def close(self) -> None:
        """End the current watch (call after setting ``stop``)."""
        with self._lock:
            watching = self._watching
        if watching is not None:
            watching.stop()

    def _parse(self, raw: Mapping[str, Any]) -> Stored | None:
        try:
            return parse(self.kind, raw)
        except SchemaError as e:
            found = raw.get("metadata")
            meta: Mapping[str, Any] = found if isinstance(found, dict) else {}
            about = logs.about(
                self.kind.kind, meta.get("namespace"), meta.get("name", ""), meta.get("uid")
            )
            log.warning(
                "%s: skipped (the cache keeps its last good version): %s",
                *(self.kind.kind, e),
                extra=about,
            )
            return None

    def _list(self) -> None:
        items: list[Stored] = []
        token: str | None = None
        version = ""
        while True:
            page = self.api.list_page(
                collection(self.kind, self.namespace), limit=self.page_size, token=token
            )
            if token is None:  # every page of one list is one snapshot: the first one's version
                version = page.resource_version
            items.extend(s for s in (self._parse(i) for i in page.items) if s is not None)
            token = page.token
            if token is None:
                break
        self.lists += 1
        self.progressed = self.clock()
        self.sink(Replace(self.kind, tuple(items)))
        self.resource_version = version
        self.synced.set()

    def _watch(self) -> None:
        assert self.resource_version is not None
        watching = self.api.watch(
            collection(self.kind, self.namespace), self.resource_version, self.watch_seconds
        )
        with self._lock:
            self._watching = watching
        self.watches += 1
        try:
            if self.stop.is_set():
                return
            for event in watching.events:
                self.progressed = self.clock()
                self._event(event)
                if self.stop.is_set():
                    return
        finally:
            with self._lock:
                self._watching = None

    def _event(self, event: Mapping[str, Any]) -> None:
        kind, raw = event.get("type"), event.get("object")
        if not isinstance(raw, Mapping):
            return
        meta = raw.get("metadata")
        version = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
        if kind in ("ADDED", "MODIFIED") and isinstance(meta, Mapping) and isinstance(version, str):
            key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
            if version and self.known(self.kind, key, version):  # e.g. the echo of our own write
                self.resource_version = version
                return
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            stored = self._parse(raw)
            if stored is not None:
                self.sink(
                    Upsert(self.kind, stored)
                    if kind != "DELETED"
                    else Delete(self.kind, stored.key)
                )
        elif kind != "BOOKMARK":
            log.warning("%s: unknown watch event type %r, ignored", self.kind.kind, kind)
        if isinstance(version, str) and version:
            self.resource_version = version
