"""The agent's local API: HTTP routes over the bridge, in the server's thread.

Reads answer at once from the latest snapshot; a long poll, a plan and a reconcile answer
``Deferred``: the server is called back when the bridge's future is done (or the wait is up).

Endpoints (JSON, ``apiVersion: kvdev.io/v1alpha1``; keys camelCase; fields may be added, never
renamed):

* ``GET /healthz``: 200 once the first pass published a status, else 503.
* ``GET /v1/status``: ready, converged, since, counts, per-claim observed generation, last
  error, metadata errors, conditions (state not saved, metadata cut short or polled), the
  agent's own pid/RSS/CPU.
* ``GET /v1/devices``: every described device with binding, evidence, guest device, desired
  and observed network state, phase, and the interface's counters and speed.
* ``GET /v1/devices/{claim}/{request}/{device}``: one of them. ``claim`` is the ResourceClaim
  name or, for template claims, the pod's claim name; ``request`` may be ``nic/rdma`` (two
  segments or one percent-encoded). ``?driver=`` and ``?pool=`` settle a name used twice.
* ``GET /v1/plan``: what a pass would do now, from a fresh observation; changes nothing.
* ``GET /v1/metrics``: the loop's counters (``core.metrics``) in Prometheus's text format
  (``adapters.exposition``, imported at the first scrape: the start does not pay for
  prometheus_client); answered before the first pass too, with the counters at zero.
* ``POST /v1/reconcile`` (root only): a full pass now, with fresh observations; its status.
* ``GET /v1/events?since=N&wait=S``: state changes numbered above N, waiting up to S seconds
  (at most 60) for one; ``next`` is the N to ask from next time; numbers restart with the
  agent (``startedAt``). Types: Ready, ConvergenceChanged, DeviceAdded, DeviceChanged,
  DeviceRemoved, MetadataError, MetadataRecovered, ConditionRaised, ConditionCleared.

Everything the loop must do (plan, reconcile) goes through the bridge; reads use the latest
snapshot. Access control is the server's (reads: root and the socket's group; the rest: root).
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import unquote

from kvdev import __version__
from kvdev.guest.adapters import procstats
from kvdev.guest.api.bridge import Bridge, Event, Snapshot
from kvdev.guest.api.server import Deferred, Request, Response, error_response
from kvdev.guest.core.status import DeviceStatus
from kvdev.guest.views import encode

if TYPE_CHECKING:
    from kvdev.guest.adapters.exposition import Exposition

API_VERSION: Final = encode.STATUS_API_VERSION
STATS_FRESH: Final = 1.0  # seconds the interface counters of /v1/devices are served for
_Route = Callable[[Request, list[str]], "Response | Deferred"]
ASK_TIMEOUT = 30.0  # a plan or a reconcile that takes longer than this is reported as 503
MAX_WAIT = 60.0


def error(code: int, message: str) -> Response:
    """The API's error body (the same shape the server uses)."""
    return error_response(code, message)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Api:
    """Routes requests; one instance per agent, its ``handle`` given to the server."""

    def __init__(
        self,
        bridge: Bridge,
        *,
        interface_stats: Callable[[Iterable[str]], dict[str, dict[str, Any]]] = (
            procstats.interfaces
        ),
        agent_stats: Callable[[float], dict[str, Any]] = procstats.agent,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bridge = bridge
        self.interface_stats = interface_stats
        self.clock = clock
        self._stats: tuple[float, Snapshot, dict[str, dict[str, Any]]] | None = None
        self.agent_stats = agent_stats
        self._encoded: tuple[Snapshot, dict[str, Any]] | None = None  # the latest status, encoded
        self._exposition: Exposition | None = None  # made at the first scrape
        self._routes: dict[tuple[str, ...], tuple[str, _Route]] = {
            ("healthz",): ("GET", self._health),
            ("v1", "status"): ("GET", self._status),
            ("v1", "devices"): ("GET", self._devices),
            ("v1", "devices", "*"): ("GET", self._device),  # /v1/devices/{claim}/{request}/{device}
            ("v1", "plan"): ("GET", self._plan),
            ("v1", "metrics"): ("GET", self._metrics),
            ("v1", "reconcile"): ("POST", self._reconcile),
            ("v1", "events"): ("GET", self._events),
        }

    def handle(self, request: Request) -> Response | Deferred:
        """Answer one request."""
        parts = [unquote(p) for p in request.path.split("/") if p]
        key = tuple(parts)
        if len(parts) >= 5 and parts[:2] == ["v1", "devices"]:
            key = ("v1", "devices", "*")
        if key not in self._routes:
            return error(404, f"no such endpoint: {request.path}")
        method, func = self._routes[key]
        allowed = {method, "HEAD"} if method == "GET" else {method}
        if request.method not in allowed:
            response = error(405, f"{request.path} takes {method}")
            return Response(response.status, response.body, (("Allow", method),))
        return func(request, parts)

    # ------------------------------------------------------------------ reads

    def _snapshot(self) -> Snapshot | Response:
        snap = self.bridge.snapshot()
        if snap is None:
            return error(503, "the agent has not finished its first pass yet")
        return snap

    def _health(self, _request: Request, _parts: list[str]) -> Response:
        snap = self.bridge.snapshot()
        if snap is None:
            return Response(503, {"ok": False, "ready": False})
        return Response(200, {"ok": True, "ready": True, "converged": snap.status.converged})

    def _status(self, _request: Request, _parts: list[str]) -> Response:
        snap = self._snapshot()
        if isinstance(snap, Response):
            return snap
        if self._encoded is None or self._encoded[0] is not snap:  # once per published status
            self._encoded = (snap, encode.status_json(snap.status))
        body = dict(self._encoded[1])  # a shallow copy: only top-level keys are set below
        body.update(
            {
                "ready": True,
                "since": _iso(snap.converged_since),
                "publishedAt": _iso(snap.published_at),
                "lastError": snap.last_error,
                "agent": {"version": __version__, **self.agent_stats(snap.started_at)},
            }
        )
        return Response(200, body)

    def _metrics(self, _request: Request, _parts: list[str]) -> Response:
        if self._exposition is None:  # the first scrape imports prometheus_client, not the start
            from kvdev.guest.adapters import exposition  # noqa: PLC0415

            self._exposition = exposition.Exposition(lambda: self.bridge.metrics.view, __version__)
        text = self._exposition.render()
        return Response(200, text, content_type=self._exposition.content_type)

    def _described_stats(self, snap: Snapshot) -> dict[str, dict[str, Any]]:
        """The counters of the described devices' interfaces, read at most once a second.

        However many clients ask, and however many links the guest has, the API thread reads
        only the interfaces of the published status, and no more than once per
        ``STATS_FRESH`` seconds: a client looping on ``/v1/devices`` costs everyone else one
        such read a second at most.
        """
        now = self.clock()
        if (
            self._stats is not None
            and self._stats[1] is snap
            and now - self._stats[0] < STATS_FRESH
        ):
            return self._stats[2]
        names = {
            name
            for d in snap.status.devices
            if (name := d.observed.ifname if d.observed is not None else d.ifname) is not None
        }
        stats = self.interface_stats(sorted(names))
        self._stats = (now, snap, stats)
        return stats

    def _device_body(self, d: DeviceStatus, stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
        body = encode.device_json(d)
        name = d.observed.ifname if d.observed is not None else d.ifname
        if name is not None and name in stats:
            body["interfaceStats"] = stats[name]
        return body

    def _devices(self, _request: Request, _parts: list[str]) -> Response:
        snap = self._snapshot()
        if isinstance(snap, Response):
            return snap
        stats = self._described_stats(snap)
        items = [self._device_body(d, stats) for d in snap.status.devices]
        return Response(200, {"apiVersion": API_VERSION, "kind": "DeviceList", "items": items})

    def _device(self, request: Request, parts: list[str]) -> Response:
        snap = self._snapshot()
        if isinstance(snap, Response):
            return snap
        claim, device, wanted = parts[2], parts[-1], "/".join(parts[3:-1])
        found = [
            d
            for d in snap.status.devices
            if claim in {d.claim, d.pod_claim_name}
            and d.request == wanted
            and d.name == device
            and request.query.get("driver", d.driver) == d.driver
            and request.query.get("pool", d.pool) == d.pool
        ]
        if not found:
            return error(404, f"no described device {claim}/{wanted}/{device}")
        if len(found) > 1:
            refs = ", ".join(d.ref for d in found)
            return error(409, f"{len(found)} devices match ({refs}); add ?driver= or ?pool=")
        return Response(200, self._device_body(found[0], self._described_stats(snap)))

    def _events(self, request: Request, _parts: list[str]) -> Response | Deferred:
        try:
            since = int(request.query.get("since", "0"))
            wait = min(float(request.query.get("wait", "0")), MAX_WAIT)
        except ValueError:
            return error(400, "since must be an integer and wait a number of seconds")
        waiter = self.bridge.wait_events(since) if wait > 0 else None
        if waiter is None:
            return self._event_list(since)
        return Deferred(
            waiter, lambda _done: self._event_list(since), wait, lambda: self._event_list(since)
        )

    def _event_list(self, since: int) -> Response:
        items, last = self.bridge.events_since(since)
        return Response(
            200,
            {
                "apiVersion": API_VERSION,
                "kind": "EventList",
                "items": [_event_json(e) for e in items],
                "next": last,
                "startedAt": _iso(self.bridge.started_at),  # numbers restart with the agent
            },
        )

    # ------------------------------------------------------------------ asks

    def _plan(self, _request: Request, _parts: list[str]) -> Deferred:
        return self._ask("plan", lambda answer: answer)

    def _reconcile(self, request: Request, parts: list[str]) -> Deferred:
        """A full pass; answered with the same body as ``GET /v1/status`` after it."""

        def after(asked: Response) -> Response:
            if asked.status != HTTPStatus.OK or not isinstance(asked.body, dict):
                return asked
            status = self._status(request, parts)
            if isinstance(status.body, dict):
                status.body["tookSeconds"] = asked.body["tookSeconds"]
            return status

        return self._ask("reconcile", after)

    def _ask(self, kind: str, then: Callable[[Response], Response]) -> Deferred:
        started = time.monotonic()

        def finish(done: concurrent.futures.Future[object]) -> Response:
            try:
                answer = done.result()
            except Exception as e:  # noqa: BLE001 - reported to the caller, who asked for it
                return error(500, f"{kind} failed: {e}")
            body = dict(answer) if isinstance(answer, dict) else {"result": answer}
            body["tookSeconds"] = round(time.monotonic() - started, 3)
            return then(Response(200, body))

        def late() -> Response:
            return error(503, f"the agent did not answer within {ASK_TIMEOUT:.0f} s")

        return Deferred(self.bridge.ask(kind), finish, ASK_TIMEOUT, late)


def _event_json(e: Event) -> dict[str, Any]:
    return {
        "seq": e.seq,
        "time": _iso(e.time),
        "type": e.type,
        "subject": e.subject,
        "phase": e.phase,
        "message": e.message,
    }
