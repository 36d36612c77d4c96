"""The node relay's loop: keep this node's relay records equal to the drivers' files (I/O).

Each pass reads the CDI spec directories on a worker, waited for at most ``read_deadline``
(``finder.find``), makes the records (``publish.relayed.records``) and creates, replaces or
deletes the difference from what the API server holds, writing nothing when nothing changed.
A record is deleted only after a complete read names its claim in no spec (``_gone``); only
this node's own records are ever replaced or deleted (``relayed.sort_listed``), and a name
another node's ConfigMap holds is reported, never taken. The rules: docs/reference/relay.md.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kvdev.errors import KvdevError, Problem
from kvdev.host.cdi.ondisk import DEFAULT_HOST_DIRS
from kvdev.host.contract import CLAIM_UID_LABEL, node_selector
from kvdev.host.kube.errors import ConflictError, NotFoundError
from kvdev.host.publish.relayed import (
    annotated_node,
    records,
    sort_listed,
    taken_message,
)
from kvdev.host.relay.finder import Found
from kvdev.host.relay.finder import find as find_files

log = logging.getLogger("kvdev.host.relay")


class Api(Protocol):
    """What the loop needs of the API server (``kvdev.host.kube.wire.KubeApi``)."""

    def list_configmaps(
        self, namespace: str, selector: str, fields: str = ""
    ) -> list[dict[str, Any]]:
        """The ConfigMaps of ``namespace`` that ``selector`` (and ``fields``) select."""

    def create_configmap(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST a ConfigMap; the stored object (``ConflictError``: the name is taken)."""

    def replace_configmap(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """PUT a ConfigMap (with its resourceVersion); the stored object."""

    def delete_configmap(self, namespace: str, name: str) -> None:
        """DELETE a ConfigMap (``NotFoundError``: gone already)."""


@dataclass
class Pass:
    """What one pass did."""

    created: int = 0
    updated: int = 0
    deleted: int = 0
    unchanged: int = 0
    failed: int = 0
    kept: int = 0  # not produced this pass, not deleted: the read was incomplete or held it
    taken: int = 0  # claims whose record name another node's ConfigMap holds
    legacy: int = 0  # this node's records of the earlier name form, deleted
    records: int | None = None  # this node's records after the pass (None: not known)
    problems: list[Problem] = field(default_factory=list)


def _same(stored: Mapping[str, Any], body: Mapping[str, Any]) -> bool:
    meta, want = stored.get("metadata") or {}, body["metadata"]
    return (
        (stored.get("data") or {}) == body["data"]
        and not stored.get("binaryData")
        and all((meta.get("labels") or {}).get(k) == v for k, v in want["labels"].items())
        and all((meta.get("annotations") or {}).get(k) == v for k, v in want["annotations"].items())
    )


def _gone(stored: Mapping[str, Any], found: Found, produced: set[str]) -> bool:
    """A stored record that this pass did not produce is to be deleted.

    When its claim's record was made this pass under another name (it is superseded), or
    when the read was complete and no spec read names its claim (a record without a claim
    label is judged by completeness alone).
    """
    uid = ((stored.get("metadata") or {}).get("labels") or {}).get(CLAIM_UID_LABEL)
    claim = uid.lower() if isinstance(uid, str) else None
    if claim in produced:
        return True
    return found.complete and claim not in found.claims


@dataclass
class Relay:
    """One node's relay: its name, the records' namespace, the CDI spec directories."""

    api: Api
    node: str
    namespace: str
    cdi_dirs: Sequence[Path]
    host_dirs: Sequence[Path] = tuple(Path(d) for d in DEFAULT_HOST_DIRS)
    relist: int = 150  # passes between two lists (every 5 min at the default 2 s)
    read_deadline: float = 30.0  # seconds a pass waits for its read of the directories
    finder: Callable[[Sequence[Path], Sequence[Path]], Found] = find_files
    _reading: Future[Found] | None = field(default=None, repr=False)
    _stored: dict[str, dict[str, Any]] | None = field(default=None, repr=False)
    _taken: dict[str, str] = field(default_factory=dict, repr=False)  # name -> its node
    _passes: int = 0

    def desired(self) -> tuple[list[dict[str, Any]], list[Problem]]:
        """The records this node's files make, and the specs or files left out."""
        found = self.finder(self.cdi_dirs, self.host_dirs)
        bodies, left_out = records(self.node, self.namespace, found.files)
        return bodies, found.problems + left_out

    def _read(self) -> Found | None:
        """The finder's answer, read on one worker and waited for at most ``read_deadline``.

        A read that does not return (a hung file system under a hostPath) leaves this pass
        without an answer (None: nothing is written, nothing deleted); the next passes wait for
        that same read, so at most one worker is ever stuck. A read that raises is logged and
        is no answer either: no spec's content ends the loop.
        """
        if self._reading is None:
            self._reading = self._start_read()
        try:
            found = self._reading.result(timeout=self.read_deadline)
        except FutureTimeout:
            log.warning(
                "reading %s did not finish within %g s: this pass changes nothing",
                ", ".join(map(str, self.cdi_dirs)),
                self.read_deadline,
            )
            return None
        except Exception:
            log.exception("reading %s failed: this pass changes nothing", self.cdi_dirs)
            return None
        finally:
            if self._reading is not None and self._reading.done():
                self._reading = None
        return found

    def _start_read(self) -> Future[Found]:
        """The finder on a daemon thread (a stuck one never keeps the process from exiting)."""
        future: Future[Found] = Future()

        def work() -> None:
            try:
                future.set_result(self.finder(self.cdi_dirs, self.host_dirs))
            except BaseException as e:  # noqa: BLE001 - handed to the pass that waits
                future.set_exception(e)

        threading.Thread(target=work, name="relay-read", daemon=True).start()
        return future

    def sync(self) -> Pass:
        """One pass (see the module docstring)."""
        found = self._read()
        if found is None:
            return Pass(failed=1)
        bodies, problems = records(self.node, self.namespace, found.files)
        problems = found.problems + problems
        done = Pass(problems=problems)
        for problem in problems:
            log.warning("not relayed: %s", problem)
        self._passes += 1
        stored = self._stored
        if stored is None or self._passes % self.relist == 0:
            stored = self._list(bodies, done)
            if stored is None:
                return done
        produced = {b["metadata"]["name"] for b in bodies}
        claims = {b["metadata"]["labels"][CLAIM_UID_LABEL] for b in bodies}
        gone = {n for n in stored if n not in produced and _gone(stored[n], found, claims)}
        done.kept = len(set(stored) - produced - gone)
        for body in bodies:
            self._write(body, stored, done)
        for name in sorted(gone):
            try:
                self._delete(name)
                done.deleted += 1
                del stored[name]
            except KvdevError as e:
                log.warning("%s", e)
                done.failed += 1
        done.records = len(stored)
        if done.failed:
            self._stored = None  # list again next pass: what is stored is not known
        if done.created or done.updated or done.deleted or done.failed or done.taken:
            log.info(
                "relay pass: %d created, %d updated, %d deleted, %d unchanged, %d kept, "
                "%d failed, %d taken by another node",
                done.created,
                done.updated,
                done.deleted,
                done.unchanged,
                done.kept,
                done.failed,
                done.taken,
            )
        return done

    def _list(
        self, bodies: Sequence[Mapping[str, Any]], done: Pass
    ) -> dict[str, dict[str, Any]] | None:
        """List this node's records: keep its own, report the others, delete its old-form ones.

        None when the list failed (nothing is known: the pass writes nothing).
        """
        try:
            listed = self.api.list_configmaps(self.namespace, node_selector(self.node))
        except KvdevError as e:
            log.warning("%s", e)
            done.failed += 1
            self._stored = None
            return None
        listing = sort_listed(self.node, listed)
        self._stored, self._taken = listing.own, listing.foreign
        wanted = {b["metadata"]["name"] for b in bodies}
        for name, owner in listing.foreign.items():
            if name in wanted:
                log.warning("%s", taken_message(name, self.node, owner, self.namespace))
            else:
                log.warning(
                    "%s/%s is labelled as node %s's record but is not one (its kvdev.io/node "
                    "is %r): not trusted, left alone",
                    self.namespace,
                    name,
                    self.node,
                    owner,
                )
        for name in listing.legacy:
            self._delete_legacy(name, done)
        return self._stored

    def _write(self, body: dict[str, Any], stored: dict[str, dict[str, Any]], done: Pass) -> None:
        """Create or replace one record unless the stored one is the same or its name taken."""
        name = body["metadata"]["name"]
        before = stored.get(name)
        if name in self._taken:
            done.taken += 1
            return
        try:
            if before is None:
                made = self._create(body)
                if made is None:
                    done.taken += 1
                    return
                stored[name] = made
                done.created += 1
            elif _same(before, body):
                done.unchanged += 1
            else:
                version = (before.get("metadata") or {}).get("resourceVersion")
                body["metadata"]["resourceVersion"] = version
                stored[name] = self.api.replace_configmap(self.namespace, body)
                done.updated += 1
        except KvdevError as e:
            log.warning("%s", e)
            done.failed += 1

    def _create(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """POST a record: the stored object, or None when another node's ConfigMap holds its name.

        A 409 (``ConflictError``) for a name not listed as this node's: that ConfigMap is looked
        up, reported, and its name skipped until the next listing; any other 409 is retried by
        the next pass, as every failed write is.

        Raises:
            KvdevError: the create failed otherwise.
        """
        name = body["metadata"]["name"]
        try:
            return self.api.create_configmap(self.namespace, body)
        except ConflictError:
            holders = self.api.list_configmaps(self.namespace, "", f"metadata.name={name}")
            owner = annotated_node(holders[0]) if holders else ""
            if not holders or owner == self.node:
                raise
            self._taken[name] = owner
            log.warning("%s", taken_message(name, self.node, owner, self.namespace))
            return None

    def _delete_legacy(self, name: str, done: Pass) -> None:
        """Delete this node's record of the earlier name form (the new one replaces it)."""
        try:
            self._delete(name)
            done.legacy += 1
        except KvdevError as e:
            log.warning("%s", e)
            done.failed += 1

    def _delete(self, name: str) -> None:
        """DELETE a record; one gone already (``NotFoundError``) is as good as deleted."""
        with contextlib.suppress(NotFoundError):
            self.api.delete_configmap(self.namespace, name)

    def run(
        self, stop: threading.Event, interval: float, observe: Callable[[Pass], None] | None = None
    ) -> None:
        """Passes every ``interval`` seconds until ``stop`` is set; each one to ``observe``."""
        while not stop.is_set():
            done = self.sync()
            if observe is not None:
                observe(done)
            stop.wait(interval)


__all__ = ["Api", "Pass", "Relay"]
