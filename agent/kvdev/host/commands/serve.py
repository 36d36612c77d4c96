"""``kvdev-host serve``: run as a DRA driver's kubelet plugin until SIGTERM or SIGINT.

Parses the options, builds the claim source (a directory of files, or the Kubernetes API,
which also gets the claims' device status), the writer layout, the ``PluginServer`` and,
when asked, the gRPC health service (``--health-port``) and the metrics server
(``--metrics-address``), and waits for a signal; then it stops gracefully (health first, then
the registration socket, in-flight calls finish, metrics last) and removes its sockets. Exit 0
after a clean stop, 1 when it cannot serve (a socket or port in use, an unwritable directory),
2 usage error or invalid options. The services live in ``kvdev.host.plugin.service`` and
``kvdev.host.plugin.server``.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import TextIO

from kvdev.errors import KvdevError, PermanentError, SchemaError, UsageError
from kvdev.host.commands.common import (
    EXIT_INVALID,
    EXIT_OK,
    Commands,
    Parser,
    add_kube_api_arguments,
    add_logging_arguments,
    bucket_from,
)
from kvdev.host.commands.prepare import layout_from
from kvdev.host.plugin.claimsource import ClaimSource, FileClaimSource
from kvdev.host.plugin.claimstatus import DeviceStatusSink, KubeDeviceStatus
from kvdev.host.plugin.health import HealthServer
from kvdev.host.plugin.liveclaims import KubeClaimSource
from kvdev.host.plugin.metrics import EVERY_ADDRESS, Address, MetricsServer
from kvdev.host.plugin.server import DEFAULT_REGISTRY_DIR, PluginServer, Sockets
from kvdev.host.plugin.service import Plugin

EXIT_CANNOT_SERVE = 1

_SERVE_EPILOG = f"""\
sockets:
  DRA service (v1.DRAPlugin and v1beta1.DRAPlugin): <plugin-data-dir>/dra.sock
  registration (kubelet's plugin watcher):         <registry-dir>/<driver>-reg.sock
  Both are created mode 0600; a stale socket is replaced; both are removed on exit.
  --pod-uid UID (rolling updates, as dra-example-driver's DaemonSet does: the new pod
  starts before the old one stops, both registered with kubelet at once) names them
  <plugin-data-dir>/dra-UID.sock and <registry-dir>/<driver>-UID-reg.sock, as upstream's
  kubeletplugin helper does (a hashed name when that path is too long for a socket).

claims:
  --claims-dir DIR  read the ResourceClaim (allocated, with metadata.uid) and the driver's
                    ResourceSlices from the *.yaml/*.yml/*.json files in DIR, re-read on
                    every call (what 'kvdev-host allocate' prints can go there as it is)
  --kube            GET the claim and LIST the slices (fieldSelector spec.driver) from the
                    API server: in-cluster service account, or --kubeconfig FILE, or the
                    default kubeconfig

  NodePrepareResources writes the metadata files and CDI specs ('kvdev-host prepare') and
  returns each device's CDI device IDs; NodeUnprepareResources removes them. A claim that
  cannot be prepared (not found, UID mismatch, invalid) gets an error of its own; the other
  claims of the call go on.

device status (--kube):
  after a prepare, the claim's status.devices[] entries of NAME ('kvdev-host status':
  driver, pool, device, shareID, a Ready condition, networkData) are server-side applied to
  its status subresource, field manager kvdev-host/NAME, force on those fields only; an
  unprepare applies an empty list, so those entries go. A failed write does not fail the
  prepare: it is logged, counted (kvdev_plugin_errors_total{{operation="device_status"}}) and
  applied again by the next prepare. RBAC: patch resourceclaims/status, and
  associated-node:patch on resourceclaims/driver named NAME (v1.36+ granular authorization).

health (--health-port PORT, 0 = off):
  grpc.health.v1.Health on TCP PORT (every address); Check for "", "liveness" or
  "readiness" dials this plugin's registration socket (GetInfo) and DRA socket
  (NodePrepareResources, no claims), each with a deadline: SERVING when both answer,
  NOT_SERVING otherwise (the reason logged). For a pod's grpc: liveness/readiness probes.

metrics (--metrics-address HOST:PORT, :PORT = every IPv4 address, empty or 0 = off):
  Prometheus text on http://HOST:PORT/metrics: kvdev_plugin_prepare_claims_total{{result}},
  kvdev_plugin_unprepare_claims_total{{result}}, kvdev_plugin_prepare_claim_duration_seconds,
  kvdev_plugin_unprepare_claim_duration_seconds (histograms),
  kvdev_plugin_errors_total{{operation,reason}}, kvdev_plugin_prepared_claims. Port 0: any
  free port; the one bound is printed on the "serving" line.

examples:
  kvdev-host serve --driver sriov.example.com --kube
  kvdev-host serve --driver sriov.example.com --kube --health-port 51515 \\
      --metrics-address :8081
  kvdev-host serve --driver sriov.example.com --claims-dir /etc/kvdev/claims \\
      --plugin-data-dir /tmp/plugin --cdi-dir /tmp/cdi --registry-dir /tmp/registry

exit status: 0 stopped by SIGTERM/SIGINT, 1 cannot serve (socket in use, directory not
  writable, health port or metrics address in use), 2 usage error or invalid options.
  (default registry dir: {DEFAULT_REGISTRY_DIR})
"""


def register(commands: Commands) -> None:
    """Add ``serve`` to the ``kvdev-host`` sub-parsers."""
    serve: Parser = commands.add_parser(
        "serve",
        help="run as a DRA driver's kubelet plugin (gRPC on Unix sockets)",
        description="Serve kubelet's DRA node service for DRIVER: prepare claims by writing\n"
        "their KEP-5304 metadata files and CDI specs, unprepare them by removing those files.",
        epilog=_SERVE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("--driver", required=True, metavar="NAME", help="the DRA driver name")
    serve.add_argument(
        "--plugin-data-dir",
        type=Path,
        metavar="DIR",
        help="the DRA socket and the metadata files (default: /var/lib/kubelet/plugins/NAME)",
    )
    serve.add_argument(
        "--cdi-dir", type=Path, metavar="DIR", help="CDI specs (default: /var/run/cdi)"
    )
    serve.add_argument(
        "--registry-dir",
        type=Path,
        default=DEFAULT_REGISTRY_DIR,
        metavar="DIR",
        help=f"kubelet's plugin registry (default: {DEFAULT_REGISTRY_DIR})",
    )
    source = serve.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--claims-dir", type=Path, metavar="DIR", help="read claims and slices from files in DIR"
    )
    source.add_argument(
        "--kube", action="store_true", help="read claims and slices from the API server"
    )
    serve.add_argument(
        "--kubeconfig", type=Path, metavar="FILE", help="with --kube: this kubeconfig file"
    )
    serve.add_argument(
        "--node-name",
        metavar="NODE",
        default=os.environ.get("NODE_NAME") or None,
        help="with --kube: list only the slices this node can see (default: $NODE_NAME, "
        "set by the Downward API; unset: every slice of the driver)",
    )
    serve.add_argument(
        "--pod-uid",
        metavar="UID",
        help="this plugin pod's UID (the Downward API's metadata.uid): sockets named per pod, "
        "so an old and a new plugin can run side by side during a rolling update",
    )
    serve.add_argument(
        "--grace",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="on stop, how long calls in flight may finish (default: 5)",
    )
    serve.add_argument(
        "--health-port",
        type=int,
        default=0,
        metavar="PORT",
        help="serve grpc.health.v1 on this TCP port for probes (default: 0, off)",
    )
    serve.add_argument(
        "--metrics-address",
        default="",
        metavar="HOST:PORT",
        help="serve Prometheus metrics on http://HOST:PORT/metrics (:PORT: every IPv4 address; "
        "default: empty, off)",
    )
    add_kube_api_arguments(serve)
    add_logging_arguments(serve, "plugin")
    serve.set_defaults(run=_run)


def _run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        server, plugin = _build(args)
        metrics_address = Address.parse(args.metrics_address)
    except (UsageError, SchemaError) as e:
        err.write(f"kvdev-host serve: {e}\n")
        return EXIT_INVALID
    health = (
        HealthServer(server.sockets, args.driver, args.health_port) if args.health_port else None
    )
    metrics = MetricsServer(plugin.metrics.registry, metrics_address) if metrics_address else None
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        logging.getLogger(__name__).info("%s: stopping", signal.Signals(signum).name)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    try:
        _start(server, health, metrics)
    except UsageError as e:
        err.write(f"kvdev-host serve: {e}\n")
        return EXIT_INVALID
    except KvdevError as e:
        err.write(f"kvdev-host serve: {e}\n")
        return EXIT_CANNOT_SERVE
    extra = f" health={health.port}" if health else ""
    extra += f" metrics=http://{_hostport(metrics)}/metrics" if metrics else ""
    out.write(f"serving {args.driver}: {server.sockets.dra} {server.sockets.registration}{extra}\n")
    out.flush()
    stop.wait()
    if health is not None:
        health.stop()
    server.stop(args.grace)
    if metrics is not None:
        metrics.stop()
    return EXIT_OK


def _start(
    server: PluginServer, health: HealthServer | None, metrics: MetricsServer | None
) -> None:
    """Metrics, then the sockets, then health; what started is stopped again on a failure."""
    if metrics is not None:
        try:
            metrics.start()
        except OSError as e:
            where = f"{metrics.address.host}:{metrics.address.port}"
            raise PermanentError(f"--metrics-address {where}: cannot listen: {e}") from e
    try:
        server.start()
        if health is not None:
            try:
                health.start()
            except BaseException:
                server.stop(0)
                raise
    except BaseException:
        if metrics is not None:
            metrics.stop()
        raise


def _hostport(metrics: MetricsServer) -> str:
    host = metrics.address.host or EVERY_ADDRESS
    return f"[{host}]:{metrics.port}" if ":" in host else f"{host}:{metrics.port}"


def _build(args: argparse.Namespace) -> tuple[PluginServer, Plugin]:
    if args.kubeconfig is not None and not args.kube:
        raise UsageError("--kubeconfig needs --kube")
    if args.grace < 0:
        raise UsageError("--grace must not be negative")
    if not 0 <= args.health_port <= 65535:
        raise UsageError(f"--health-port {args.health_port}: must be 1-65535, or 0 for off")
    layout = layout_from(args)  # validates the driver name
    source: ClaimSource
    status: DeviceStatusSink | None = None
    if args.kube:
        kube = KubeClaimSource(
            args.driver, node=args.node_name, kubeconfig=args.kubeconfig, bucket=bucket_from(args)
        )
        source, status = kube, KubeDeviceStatus(args.driver, kube.wire)
    else:
        source = FileClaimSource(args.claims_dir, args.driver)
    sockets = Sockets.default(
        args.driver, layout.plugin_data_dir, args.registry_dir, pod_uid=args.pod_uid
    )
    plugin = Plugin(layout, source, status)
    return PluginServer(plugin, sockets, driver=args.driver), plugin
