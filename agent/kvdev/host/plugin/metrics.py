"""The kubelet plugin's Prometheus metrics: what they are, how outcomes map to them, and the scrape.

``PluginMetrics`` holds a ``CollectorRegistry`` of its own (never the process-wide default, so
two plugins in one process, or a test, do not share counters) with, named in the style of
dra-example-driver's:

* ``kvdev_plugin_prepare_claims_total{result}`` / ``kvdev_plugin_unprepare_claims_total{result}``
  (``result``: ``success`` or ``error``), one per claim of a NodePrepare/NodeUnprepareResources;
* ``kvdev_plugin_prepare_claim_duration_seconds`` / ``..._unprepare_claim_duration_seconds``
  histograms, one observation per claim (successes and errors alike);
* ``kvdev_plugin_errors_total{operation,reason}``: ``operation`` is ``prepare``, ``unprepare``
  or ``device_status`` (the write of ``status.devices``), ``reason`` one of ``REASONS``;
* ``kvdev_plugin_prepared_claims``: claims this process prepared and has not unprepared since.

``serve(address)`` exposes the registry as Prometheus text on ``http://HOST:PORT/metrics``
(prometheus_client's own WSGI server, in a daemon thread). ``error_reason`` maps a kvdev error
to its ``reason`` label; it is pure.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Final
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from kvdev.errors import KvdevError, RetryableError, SchemaError, UsageError
from kvdev.host.plugin.claimsource import ClaimNotFoundError, ClaimUidMismatchError

PREFIX: Final = "kvdev_plugin"
EVERY_ADDRESS: Final = "0.0.0.0"  # noqa: S104 - what HOST left empty (":PORT") asks for
# A prepare is a GET, a LIST and a few small files; an API server under load takes seconds.
BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
REASONS: Final = (
    "claim_not_found",  # the claim kubelet named is not in the source
    "uid_mismatch",  # the claim found has another UID (deleted and re-created)
    "invalid",  # a claim or slice kvdev cannot use (SchemaError)
    "retryable",  # the source or the disk failed for now (RetryableError)
    "permanent",  # any other kvdev error
    "internal",  # a bug: an exception that is not a kvdev error
)


def error_reason(error: BaseException) -> str:
    """The ``reason`` label of ``error`` (one of ``REASONS``)."""
    if isinstance(error, ClaimNotFoundError):
        return "claim_not_found"
    if isinstance(error, ClaimUidMismatchError):
        return "uid_mismatch"
    if isinstance(error, SchemaError):
        return "invalid"
    if isinstance(error, RetryableError):
        return "retryable"
    if isinstance(error, KvdevError):
        return "permanent"
    return "internal"


class PluginMetrics:
    """The plugin's counters, histograms and gauge, in ``self.registry`` (thread-safe)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._claims = {
            op: Counter(
                f"{PREFIX}_{op}_claims_total",
                f"Claims of {op.capitalize()}Resources calls, by result",
                ["result"],
                registry=r,
            )
            for op in ("prepare", "unprepare")
        }
        self._durations = {
            op: Histogram(
                f"{PREFIX}_{op}_claim_duration_seconds",
                f"Seconds to {op} one claim (successes and errors)",
                buckets=BUCKETS,
                registry=r,
            )
            for op in ("prepare", "unprepare")
        }
        self._errors = Counter(
            f"{PREFIX}_errors_total",
            "Errors by operation (prepare, unprepare, device_status) and reason",
            ["operation", "reason"],
            registry=r,
        )
        self._prepared = Gauge(
            f"{PREFIX}_prepared_claims",
            "Claims this process prepared and has not unprepared since",
            registry=r,
        )
        self._lock = threading.Lock()
        self._uids: set[str] = set()
        for op in ("prepare", "unprepare"):  # every series exists from the first scrape on
            for result in ("success", "error"):
                self._claims[op].labels(result=result)

    def claim_done(self, operation: str, uid: str, seconds: float, error: str | None) -> None:
        """Record one claim's prepare or unprepare: ``error`` is its reason, None on success."""
        self._claims[operation].labels(result="success" if error is None else "error").inc()
        self._durations[operation].observe(seconds)
        if error is not None:
            self._errors.labels(operation=operation, reason=error).inc()
            return
        with self._lock:
            if operation == "prepare":
                self._uids.add(uid)
            else:
                self._uids.discard(uid)
            self._prepared.set(len(self._uids))

    def error(self, operation: str, reason: str) -> None:
        """Count one error of ``operation`` that is not a claim's outcome (a status write)."""
        self._errors.labels(operation=operation, reason=reason).inc()


@dataclass(frozen=True, slots=True)
class Address:
    """Where ``serve`` listens: ``host`` (empty: every IPv4 address) and ``port`` (0: any)."""

    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Address | None:
        """``HOST:PORT``, ``:PORT`` or ``[V6]:PORT``; None for ``""`` or ``"0"`` (metrics off).

        Raises:
            UsageError: not that shape, or a port outside 0-65535 (names the flag).
        """
        if text in ("", "0"):
            return None
        host, sep, port = text.rpartition(":")
        if not sep or not port.isdigit() or int(port) > 65535:
            raise UsageError(
                f"--metrics-address {text!r}: must be HOST:PORT or :PORT (a port 0-65535), "
                "or empty to turn metrics off"
            )
        return cls(host.removeprefix("[").removesuffix("]"), int(port))


class MetricsServer:
    """``/metrics`` of one registry over HTTP, in prometheus_client's daemon thread."""

    def __init__(self, registry: CollectorRegistry, address: Address) -> None:
        self.registry = registry
        self.address = address
        self._httpd: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port bound (the one asked, or the one the kernel chose for 0)."""
        assert self._httpd is not None, "not started"
        return int(self._httpd.server_port)

    def start(self) -> None:
        """Listen and serve.

        Raises:
            OSError: the address cannot be bound (the caller names the flag).
        """
        self._httpd, self._thread = start_http_server(
            self.address.port, addr=self.address.host or EVERY_ADDRESS, registry=self.registry
        )

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join()
