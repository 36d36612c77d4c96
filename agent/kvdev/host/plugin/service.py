"""The kubelet DRA plugin's services: registration and NodePrepare/NodeUnprepareResources.

``Plugin`` does the work for one claim at a time: fetch it through a ``ClaimSource``, check
the UID kubelet sent, call ``kvdev.host.publish.writer`` and return the prepared devices (with their
CDI device IDs) or an error string for that claim alone. Calls for the same claim UID are
serialized by a per-claim lock (the writer adds an flock across processes), so concurrent and
repeated calls are safe. Each claim's outcome, duration and error reason go to the plugin's
``PluginMetrics``. With a ``DeviceStatusSink`` (``--kube``), a successful prepare then applies
the claim's ``status.devices`` and an unprepare removes them; a failed status write is logged
and counted, never the claim's error (kubelet would retry the whole prepare), and the next
prepare of the claim applies it again. The gRPC servicers below translate the v1 and v1beta1
wire messages (identical shapes, distinct packages) and the registration service. Sockets and
server lifecycle live in ``kvdev.host.plugin.server``; this module opens no socket.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import grpc

from kvdev.errors import KvdevError
from kvdev.host import logs
from kvdev.host.k8s import ResourceClaim
from kvdev.host.plugin.claimsource import ClaimSource, ClaimUidMismatchError
from kvdev.host.plugin.claimstatus import DeviceStatusSink, DeviceStatusWriteError
from kvdev.host.plugin.metrics import PluginMetrics, error_reason
from kvdev.host.proto import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    registration_pb2,
    registration_pb2_grpc,
)
from kvdev.host.publish import writer

log = logging.getLogger(__name__)

PLUGIN_TYPE = "DRAPlugin"
SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin")


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """A claim as kubelet names it."""

    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"ResourceClaim {self.namespace}/{self.name} (uid {self.uid})"


def _about(ref: ClaimRef) -> dict[str, object]:
    """The log records' ``extra=`` naming the claim."""
    return logs.about("ResourceClaim", ref.namespace, ref.name, ref.uid)


@dataclass(frozen=True, slots=True)
class ClaimResult:
    """The outcome for one claim: its devices, or a non-empty error."""

    devices: tuple[writer.PreparedDevice, ...] = ()
    error: str = ""


class _KeyedLocks:
    """One lock per key, dropped when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}

    @contextmanager
    def hold(self, key: str) -> Iterator[None]:
        with self._guard:
            lock, users = self._locks.get(key, (threading.Lock(), 0))
            self._locks[key] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                lock, users = self._locks[key]
                if users == 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        with self._guard:
            return len(self._locks)


@dataclass
class Plugin:
    """Prepare and unprepare claims for one driver (thread-safe)."""

    layout: writer.Layout
    source: ClaimSource
    status: DeviceStatusSink | None = None
    metrics: PluginMetrics = field(default_factory=PluginMetrics)
    _locks: _KeyedLocks = field(default_factory=_KeyedLocks, init=False, repr=False)

    def prepare(self, ref: ClaimRef) -> ClaimResult:
        """Fetch the claim, check its UID, write its files; idempotent."""
        return self._guarded("prepare", ref, self._prepare)

    def unprepare(self, ref: ClaimRef) -> ClaimResult:
        """Remove what prepare wrote for the claim; succeeds when already gone."""
        return self._guarded("unprepare", ref, self._unprepare)

    def _prepare(self, ref: ClaimRef) -> ClaimResult:
        fetched = self.source.fetch(ref.namespace, ref.name)
        uid = fetched.claim.metadata.uid
        if uid != ref.uid:
            raise ClaimUidMismatchError(
                f"the claim found has uid {uid or '(none)'}, not the one kubelet asked for "
                "(deleted and recreated?)"
            )
        prepared = writer.prepare(fetched.claim, fetched.slices, self.layout)
        self._write_status(ref, fetched.claim)
        return ClaimResult(devices=prepared.devices)

    def _unprepare(self, ref: ClaimRef) -> ClaimResult:
        writer.unprepare(ref.namespace, ref.name, ref.uid, self.layout)
        self._write_status(ref, None)
        return ClaimResult()

    def _write_status(self, ref: ClaimRef, claim: ResourceClaim | None) -> None:
        """Apply (``claim``) or clear (None) the claim's device status; failures only logged."""
        if self.status is None:
            return
        try:
            if claim is not None:
                self.status.apply(claim)
            else:
                self.status.clear(ref.namespace, ref.name, ref.uid)
            log.debug("%s: device status %s", ref, "applied" if claim is not None else "cleared")
        except DeviceStatusWriteError as e:
            self.metrics.error("device_status", e.reason)
            retry = "the next prepare applies it again" if claim is not None else "not retried"
            log.warning("%s: device status not written (%s): %s", ref, retry, e)

    def _guarded(
        self, verb: str, ref: ClaimRef, work: Callable[[ClaimRef], ClaimResult]
    ) -> ClaimResult:
        began = time.monotonic()
        reason: str | None = None
        if not (ref.namespace and ref.name and ref.uid):
            self.metrics.claim_done(verb, ref.uid, time.monotonic() - began, "invalid")
            return ClaimResult(error=f"{ref}: namespace, name and uid are all required")
        with self._locks.hold(ref.uid):
            try:
                result = work(ref)
            except KvdevError as e:
                result, reason = ClaimResult(error=f"{verb} {ref}: {e}"), error_reason(e)
            except Exception as e:
                # A bug must fail this claim only, visibly, not the whole request.
                log.exception("%s %s: unexpected error", verb, ref, extra=_about(ref))
                result = ClaimResult(error=f"{verb} {ref}: internal error: {e!r}")
                reason = error_reason(e)
            self.metrics.claim_done(verb, ref.uid, time.monotonic() - began, reason)
        if result.error:
            log.warning("%s", result.error, extra=_about(ref))
        else:
            ids = [i for d in result.devices for i in d.cdi_device_ids]
            log.info("%s %s: ok %s", verb, ref, " ".join(ids), extra=_about(ref))
        return result


# --------------------------------------------------------------------------- DRA node service


class _ClaimMessage(Protocol):
    # v1 and v1beta1 ``Claim`` messages alike.
    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def uid(self) -> str: ...


def _refs(claims: Iterable[_ClaimMessage]) -> list[ClaimRef]:
    return [ClaimRef(c.namespace, c.name, c.uid) for c in claims]


_PrepareResponse = TypeVar(
    "_PrepareResponse",
    dra_v1_pb2.NodePrepareResourcesResponse,
    dra_v1beta1_pb2.NodePrepareResourcesResponse,
)


def _prepare_all(
    plugin: Plugin, claims: Iterable[_ClaimMessage], response: _PrepareResponse
) -> _PrepareResponse:
    """Prepare each claim and fill ``response`` (v1 or v1beta1: the same fields)."""
    for ref in _refs(claims):
        result = plugin.prepare(ref)
        entry = response.claims[ref.uid]
        entry.error = result.error
        for d in result.devices:
            device = entry.devices.add(
                request_names=d.base_requests,  # kubelet matches containers on base names
                pool_name=d.pool,
                device_name=d.device,
                cdi_device_ids=d.cdi_device_ids,
            )
            if d.share_id is not None and isinstance(device, dra_v1_pb2.Device):  # v1 only
                device.share_id = d.share_id
    return response


class _DraServicerV1(dra_v1_pb2_grpc.DRAPluginServicer):
    def __init__(self, plugin: Plugin) -> None:
        self.plugin = plugin

    def NodePrepareResources(  # noqa: N802 - the wire's method name
        self, request: dra_v1_pb2.NodePrepareResourcesRequest, _context: grpc.ServicerContext
    ) -> dra_v1_pb2.NodePrepareResourcesResponse:
        return _prepare_all(self.plugin, request.claims, dra_v1_pb2.NodePrepareResourcesResponse())

    def NodeUnprepareResources(  # noqa: N802 - the wire's method name
        self, request: dra_v1_pb2.NodeUnprepareResourcesRequest, _context: grpc.ServicerContext
    ) -> dra_v1_pb2.NodeUnprepareResourcesResponse:
        response = dra_v1_pb2.NodeUnprepareResourcesResponse()
        for ref in _refs(request.claims):
            response.claims[ref.uid].error = self.plugin.unprepare(ref).error
        return response


class _DraServicerV1beta1(dra_v1beta1_pb2_grpc.DRAPluginServicer):
    # The same as v1, with v1beta1's message classes (protobuf types do not mix packages).
    def __init__(self, plugin: Plugin) -> None:
        self.plugin = plugin

    def NodePrepareResources(  # noqa: N802 - the wire's method name
        self, request: dra_v1beta1_pb2.NodePrepareResourcesRequest, _context: grpc.ServicerContext
    ) -> dra_v1beta1_pb2.NodePrepareResourcesResponse:
        return _prepare_all(
            self.plugin, request.claims, dra_v1beta1_pb2.NodePrepareResourcesResponse()
        )

    def NodeUnprepareResources(  # noqa: N802 - the wire's method name
        self, request: dra_v1beta1_pb2.NodeUnprepareResourcesRequest, _context: grpc.ServicerContext
    ) -> dra_v1beta1_pb2.NodeUnprepareResourcesResponse:
        response = dra_v1beta1_pb2.NodeUnprepareResourcesResponse()
        for ref in _refs(request.claims):
            response.claims[ref.uid].error = self.plugin.unprepare(ref).error
        return response


def add_dra_services(server: grpc.Server, plugin: Plugin) -> None:
    """Serve ``plugin`` as both ``v1.DRAPlugin`` and ``v1beta1.DRAPlugin`` on ``server``."""
    dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(_DraServicerV1(plugin), server)
    dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(_DraServicerV1beta1(plugin), server)


# --------------------------------------------------------------------------- registration


class RegistrationService(registration_pb2_grpc.RegistrationServicer):
    """Kubelet's plugin watcher asks who we are, then tells us whether it accepted us.

    ``registered`` is set once kubelet reports success; ``error`` keeps its last complaint.
    """

    def __init__(self, driver: str, endpoint: str) -> None:
        self.driver = driver
        self.endpoint = endpoint
        self.registered = threading.Event()
        self.error = ""

    def GetInfo(  # noqa: N802 - the wire's method name
        self, _request: registration_pb2.InfoRequest, _context: grpc.ServicerContext
    ) -> registration_pb2.PluginInfo:
        """Who we are: a DRA plugin named after the driver, where to reach it, which APIs."""
        return registration_pb2.PluginInfo(
            type=PLUGIN_TYPE,
            name=self.driver,
            endpoint=self.endpoint,
            supported_versions=SUPPORTED_VERSIONS,
        )

    def NotifyRegistrationStatus(  # noqa: N802 - the wire's method name
        self, request: registration_pb2.RegistrationStatus, context: grpc.ServicerContext
    ) -> registration_pb2.RegistrationStatusResponse:
        """Record (and log) kubelet's verdict.

        "registered" is logged once this call's answer has been sent: kubelet counts a plugin
        registered only when its notification call returns (it deregisters one whose answer
        never comes), so the line is what a supervisor may take as "kubelet has us".
        """
        if request.plugin_registered:
            self.error = ""
            self.registered.set()

            def done() -> None:
                log.info("kubelet registered DRA plugin %s at %s", self.driver, self.endpoint)

            if not context.add_callback(done):
                done()  # the call has ended already
        else:
            self.error = request.error or "(no reason given)"
            self.registered.clear()
            log.error("kubelet rejected DRA plugin %s: %s", self.driver, self.error)
        return registration_pb2.RegistrationStatusResponse()
