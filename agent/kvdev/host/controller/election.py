"""Leader election over a coordination.k8s.io/v1 Lease, so only one replica writes.

The rules are client-go's: a candidate takes the Lease when it has none, when it already holds
it, or when the holder has not renewed it for ``lease_seconds`` *as this candidate observed*
(the local monotonic time since the record last changed, never the holder's clock); taking and
renewing are PUTs with the Lease's ``resourceVersion``, so of two candidates only one wins a
race (the other gets a 409). The leader renews every ``retry_seconds``; when it could not renew
for ``renew_seconds`` it has lost (it must stop writing: ``kvdev-host controller`` exits).
On a clean stop the leader releases the Lease (empty holder), so a successor need not wait.
Its requests go through a client of their own, as client-go's ``resourcelock.NewFromKubeconfig``
makes one: its own rate limit (a relist storm of the watches never delays a renewal) and a
request timeout of half the renew deadline (``request_timeout``), so one hung PUT cannot use up
the deadline.

Why not ``kubernetes.leaderelection``: it cannot be stopped or release the Lease, exits the
process on bad settings, reads the wall clock, and uses the client's global configuration.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kvdev.errors import KvdevError
from kvdev.host.kube.wire import KubeApi

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Lease:
    """Which Lease: namespace and name."""

    namespace: str
    name: str


def request_timeout(renew_seconds: float) -> float:
    """The Lease client's request timeout: client-go's, half the renew deadline, at least 1 s."""
    return max(renew_seconds / 2, 1.0)


def _now() -> str:
    """A MicroTime, as the API server writes it."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class LeaseElector:
    """Take, keep and release one Lease for ``identity``."""

    lease: Lease
    identity: str
    lease_seconds: float = 15.0  # the Lease's leaseDurationSeconds: whole seconds, at least 1
    renew_seconds: float = 10.0
    retry_seconds: float = 2.0
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    api: KubeApi | None = None  # its own client (``request_timeout``); else the controller's
    transitions: int = 0  # times this elector took the Lease from another holder
    _observed: tuple[str | None, str | None] | None = field(default=None, repr=False)
    _observed_at: float = field(default=0.0, repr=False)
    _held: dict[str, Any] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not 0 < self.retry_seconds < self.renew_seconds < self.lease_seconds:
            msg = "the Lease needs 0 < retry period < renew deadline < lease duration"
            raise ValueError(msg)

    # ------------------------------------------------------------------ one try

    def try_acquire_or_renew(self) -> bool:
        """One try: True when this identity holds the Lease afterwards."""
        api = self.api
        assert api is not None
        namespace, name = self.lease.namespace, self.lease.name
        current = api.get_lease(namespace, name)
        now = _now()
        if current is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": name, "namespace": namespace},
                "spec": self._spec(now, now, 0),
            }
            self._held = api.create_lease(namespace, body)
            self._observe(self._held)
            return True
        spec = current.get("spec") or {}
        holder = spec.get("holderIdentity") or None
        self._observe(current)
        expired = self.clock() - self._observed_at > float(spec.get("leaseDurationSeconds") or 0)
        if holder not in (None, self.identity) and not expired:
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        acquired = spec.get("acquireTime") or now
        if holder != self.identity:
            transitions += 1 if holder is not None else 0
            acquired = now
        body = dict(current)
        body["spec"] = {**spec, **self._spec(acquired, now, transitions)}
        self._held = api.replace_lease(namespace, body)
        if holder != self.identity:
            self.transitions += 1
        self._observe(self._held)
        return True

    def _spec(self, acquired: str, renewed: str, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(int(self.lease_seconds), 1),
            "acquireTime": acquired,
            "renewTime": renewed,
            "leaseTransitions": transitions,
        }

    def _observe(self, lease: dict[str, Any]) -> None:
        spec = lease.get("spec") or {}
        record = (spec.get("holderIdentity"), spec.get("renewTime"))
        if record != self._observed:
            self._observed = record
            self._observed_at = self.clock()

    # ------------------------------------------------------------------ loops

    def acquire(self, stop: threading.Event) -> bool:
        """Try every ``retry_seconds`` until this identity leads (True) or ``stop`` (False)."""
        while not stop.is_set():
            try:
                if self.try_acquire_or_renew():
                    log.info("%s leads (Lease %s/%s)", self.identity, *self._where())
                    return True
            except KvdevError as e:
                log.info("Lease %s/%s: %s", *self._where(), e)
            stop.wait(self.retry_seconds)
        return False

    def keep(self, stop: threading.Event, lost: threading.Event) -> None:
        """Renew until ``stop``; set ``lost`` when a renewal did not succeed in time."""
        last = self.clock()
        while not stop.wait(self.retry_seconds):
            try:
                if self.try_acquire_or_renew():
                    last = self.clock()
                    continue
                log.error("Lease %s/%s: taken over by another holder", *self._where())
            except KvdevError as e:
                log.warning("Lease %s/%s: renewal failed: %s", *self._where(), e)
                if self.clock() - last < self.renew_seconds:
                    continue
            lost.set()
            return

    def release(self) -> None:
        """Give the Lease up (empty holder), if this identity still holds it."""
        api, held = self.api, self._held
        if api is None or held is None:
            return
        spec = dict(held.get("spec") or {})
        if spec.get("holderIdentity") != self.identity:
            return
        spec.update({"holderIdentity": None, "leaseDurationSeconds": 1, "renewTime": _now()})
        try:
            api.replace_lease(self.lease.namespace, {**held, "spec": spec})
        except KvdevError as e:
            log.warning("Lease %s/%s: not released: %s", *self._where(), e)
        self._held = None

    def _where(self) -> tuple[str, str]:
        return self.lease.namespace, self.lease.name
