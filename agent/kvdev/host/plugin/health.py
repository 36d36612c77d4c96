"""``serve --health-port``: the standard ``grpc.health.v1.Health`` service, on TCP, for probes.

``Check`` answers for the services ``""`` (readiness), ``liveness`` and ``readiness`` (others
are NOT_FOUND, as the health protocol says) by dialing the plugin's own two sockets on new
channels, as kubelet would: the registration socket's ``GetInfo`` (it must name our driver)
and the DRA socket's ``NodePrepareResources`` with no claims. SERVING only when both answer;
NOT_SERVING otherwise, the reason logged when it changes. A removed socket file or a stopped
server is therefore seen at once (a kept channel would go on using its old connection).

Bounded: each self-dial has a deadline (``DIAL_DEADLINE``, or less: half of what is left of
the probe's own deadline); one check runs at a time, and a probe that arrives while one runs
waits for that one's answer if it began after the probe arrived, else runs the next; the
server has ``WORKERS`` threads and refuses more than ``MAX_CONCURRENT`` RPCs at once
(RESOURCE_EXHAUSTED). ``Watch`` is not served (UNIMPLEMENTED): kubelet's probes use ``Check``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kvdev.errors import PermanentError
from kvdev.host.plugin.server import Sockets
from kvdev.host.proto import dra_v1_pb2, dra_v1_pb2_grpc, registration_pb2, registration_pb2_grpc

log = logging.getLogger(__name__)

SERVICES: Final = frozenset({"", "liveness", "readiness"})
DIAL_DEADLINE: Final = 5.0  # seconds, at most, for each self-dial
WORKERS: Final = 2
MAX_CONCURRENT: Final = 8
SERVING: Final = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING: Final = health_pb2.HealthCheckResponse.NOT_SERVING


@dataclass(frozen=True, slots=True)
class Verdict:
    """One check's outcome: healthy or not, why not, and when its dials began."""

    healthy: bool
    reason: str
    began: float


def dial_deadline(remaining: float | None) -> float:
    """Seconds for one self-dial given what is left of the probe's deadline (None: none)."""
    if remaining is None:
        return DIAL_DEADLINE
    return max(0.0, min(DIAL_DEADLINE, remaining / 2))


class SelfCheck:
    """Dial the plugin's own sockets; one check at a time (see the module's docstring)."""

    def __init__(
        self, sockets: Sockets, driver: str, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.sockets = sockets
        self.driver = driver
        self._clock = clock
        self._running = threading.Lock()
        self._last: Verdict | None = None
        self._logged: tuple[bool, str] | None = None

    def check(self, budget: float) -> Verdict:
        """A verdict no older than this call, within about ``2 * budget`` seconds."""
        arrived = self._clock()
        if not self._running.acquire(timeout=budget):
            return Verdict(healthy=False, reason="an earlier check is still running", began=arrived)
        try:
            last = self._last
            if last is not None and last.began >= arrived:
                return last  # began after we arrived: as fresh as our own would be
            verdict = self._dial(budget)
            self._last = verdict
        finally:
            self._running.release()
        self._log(verdict)
        return verdict

    def _dial(self, budget: float) -> Verdict:
        began = self._clock()
        reg, dra = self.sockets.registration, self.sockets.dra
        try:
            with grpc.insecure_channel(f"unix:{reg}") as channel:
                info = registration_pb2_grpc.RegistrationStub(channel).GetInfo(
                    registration_pb2.InfoRequest(), timeout=budget
                )
        except grpc.RpcError as e:
            return Verdict(healthy=False, reason=f"{reg}: GetInfo: {_describe(e)}", began=began)
        if info.name != self.driver:
            return Verdict(healthy=False, reason=f"{reg}: GetInfo names {info.name!r}", began=began)
        try:
            with grpc.insecure_channel(f"unix:{dra}") as channel:
                dra_v1_pb2_grpc.DRAPluginStub(channel).NodePrepareResources(
                    dra_v1_pb2.NodePrepareResourcesRequest(), timeout=budget
                )
        except grpc.RpcError as e:
            return Verdict(
                healthy=False, reason=f"{dra}: NodePrepareResources: {_describe(e)}", began=began
            )
        return Verdict(healthy=True, reason="", began=began)

    def _log(self, verdict: Verdict) -> None:
        state = (verdict.healthy, verdict.reason)
        if state == self._logged:
            return
        self._logged = state
        if verdict.healthy:
            log.info("health: serving (both sockets answer)")
        else:
            log.warning("health: not serving: %s", verdict.reason)


def _describe(error: grpc.RpcError) -> str:
    call: Any = error  # a grpc.Call as well, at run time
    return f"{call.code().name}: {call.details()}"


class _HealthServicer(health_pb2_grpc.HealthServicer):
    def __init__(self, check: SelfCheck) -> None:
        self.self_check = check

    def Check(  # noqa: N802 - the wire's method name
        self, request: health_pb2.HealthCheckRequest, context: grpc.ServicerContext
    ) -> health_pb2.HealthCheckResponse:
        if request.service not in SERVICES:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        verdict = self.self_check.check(dial_deadline(context.time_remaining()))
        return health_pb2.HealthCheckResponse(status=SERVING if verdict.healthy else NOT_SERVING)


class HealthServer:
    """The health service on ``[::]:port`` (every address), ``start`` then ``stop``."""

    def __init__(self, sockets: Sockets, driver: str, port: int) -> None:
        self.port = port
        self.self_check = SelfCheck(sockets, driver)
        self._server = grpc.server(
            ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="health"),
            maximum_concurrent_rpcs=MAX_CONCURRENT,
            options=[("grpc.so_reuseport", 0)],  # a port in use is an error, not shared
        )
        health_pb2_grpc.add_HealthServicer_to_server(_HealthServicer(self.self_check), self._server)

    def start(self) -> None:
        """Listen on the port.

        Raises:
            PermanentError: the port cannot be bound (in use, not allowed).
        """
        try:
            self._server.add_insecure_port(f"[::]:{self.port}")
        except RuntimeError as e:
            raise PermanentError(f"--health-port {self.port}: cannot listen: {e}") from e
        self._server.start()
        log.info("health service (grpc.health.v1) on port %d", self.port)

    def stop(self) -> None:
        """Stop at once (a probe in flight gets an error: the plugin is going away)."""
        self._server.stop(0).wait()
