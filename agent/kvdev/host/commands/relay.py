"""``kvdev-host relay``: relay the drivers' own metadata files of this node to the controller.

Reads the ``<driver>/metadata`` CDI specs (``relay.finder``), makes one relay record per claim
(``publish.relayed``) and keeps this node's records in the API server (``relay.live``); with
``--once`` prints them instead. The controller copies a record's bytes into the ConfigMap of
a VMI on this node that uses the claim (``controller/render``).
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

from kvdev.errors import KvdevError, UsageError
from kvdev.host.commands.common import (
    EXIT_INVALID,
    EXIT_OK,
    Commands,
    Parser,
    add_kube_api_arguments,
    add_logging_arguments,
    add_output_argument,
    bucket_from,
    own_namespace,
)

EXIT_LEFT_OUT = 1
DEFAULT_NAMESPACE = "kvdev-system"

_EPILOG = """\
Reads the CDI specs of kind '<driver>/metadata' in --cdi-dir (default /etc/cdi and
/var/run/cdi) and the files their mounts name beneath --host-dir (default
/var/lib/kubelet/plugins), without following links, within bounds per spec and per pass;
writes one record per claim, ConfigMap kvdev-relay-<claimUID>.<node> in --namespace, deleted
only after a complete read names its claim in no spec. What it reads, its bounds, the
records' names and whose records it trusts: docs/reference/relay.md.

--once: read the directories, print the records (-o yaml|json|name), change nothing; feed
  them to 'kvdev-host controller --once -f' with the VMIs, pods, claims and slices.
live: in-cluster service account, --kubeconfig FILE, or the default kubeconfig; a pass every
  --interval seconds writes only what changed.
metrics (live, --metrics-address HOST:PORT, :PORT = every IPv4 address, empty or 0 = off):
  kvdev_relay_passes_total{{outcome=complete|failed}}, kvdev_relay_records and
  kvdev_relay_last_complete_pass_timestamp_seconds on http://HOST:PORT/metrics.

examples:
  kvdev-host relay --once --node-name node-a --cdi-dir ./cdi --host-dir ./plugins \\
      -o json > records.json
  kvdev-host controller --once -f vms.yaml -f slices.yaml -f records.json
  kvdev-host relay --node-name "$NODE_NAME" --interval 2 --metrics-address :8082

exit status: 0 ok (live: stopped by SIGTERM/SIGINT), 1 (--once) a spec or file was left out
  (the others are still printed), 2 usage error.
"""


def register(commands: Commands) -> None:
    """Add ``relay`` to the ``kvdev-host`` sub-parsers."""
    p: Parser = commands.add_parser(
        "relay",
        help="relay the drivers' own metadata files on this node (from CDI specs) to the "
        "controller",
        description="Find every KEP-5304 metadata file the DRA drivers wrote on this node,\n"
        "through their CDI specs, and publish each claim's files unchanged as a relay record.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--once", action="store_true", help="print the records, change nothing")
    p.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME") or None,
        metavar="NODE",
        help="this node's name (default: $NODE_NAME)",
    )
    p.add_argument(
        "--cdi-dir",
        action="append",
        metavar="DIR",
        help="a CDI spec directory (repeatable; default: /etc/cdi and /var/run/cdi)",
    )
    p.add_argument(
        "--host-dir",
        action="append",
        metavar="DIR",
        help="read the files the specs mount only beneath DIR (repeatable; default: "
        "/var/lib/kubelet/plugins)",
    )
    p.add_argument(
        "--namespace",
        default=os.environ.get("POD_NAMESPACE") or None,
        metavar="NS",
        help="the records' namespace (default: $POD_NAMESPACE, else the service account's, "
        f"else {DEFAULT_NAMESPACE})",
    )
    p.add_argument(
        "--interval",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="live: read the directories this often (default: 2)",
    )
    p.add_argument("--kubeconfig", type=Path, metavar="FILE", help="live: this kubeconfig file")
    p.add_argument(
        "--metrics-address",
        default="",
        metavar="HOST:PORT",
        help="live: serve Prometheus metrics on http://HOST:PORT/metrics (:PORT: every IPv4 "
        "address; default: empty, off)",
    )
    add_output_argument(p)
    add_kube_api_arguments(p)
    add_logging_arguments(p, "relay")
    p.set_defaults(run=_run)


def _namespace(args: argparse.Namespace) -> str:
    return own_namespace(args.namespace, DEFAULT_NAMESPACE)


def _run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from kvdev.host.relay.finder import cdi_dirs, host_dirs  # noqa: PLC0415
    from kvdev.host.relay.live import Relay  # noqa: PLC0415

    if not args.node_name:
        err.write("kvdev-host relay: --node-name (or $NODE_NAME) is needed\n")
        return EXIT_INVALID
    if args.interval <= 0:
        err.write("kvdev-host relay: --interval must be positive\n")
        return EXIT_INVALID
    dirs, hosts = cdi_dirs(args.cdi_dir), host_dirs(args.host_dir)
    namespace = _namespace(args)
    if args.once:
        from kvdev.host.commands.controller import print_configmaps  # noqa: PLC0415

        bodies, problems = Relay(_NoApi(), args.node_name, namespace, dirs, hosts).desired()
        err.writelines(f"kvdev-host relay: not relayed: {p}\n" for p in problems)
        print_configmaps(bodies, args.output, out)
        return EXIT_LEFT_OUT if problems else EXIT_OK
    from kvdev.host.kube.wire import KubeApi  # noqa: PLC0415
    from kvdev.host.plugin.metrics import Address, MetricsServer  # noqa: PLC0415
    from kvdev.host.relay.metrics import RelayMetrics  # noqa: PLC0415

    try:
        address = Address.parse(args.metrics_address)
        api = KubeApi.connect(args.kubeconfig, bucket_from(args))
    except (UsageError, KvdevError) as e:
        err.write(f"kvdev-host relay: {e}\n")
        return EXIT_INVALID
    metrics = RelayMetrics()
    # the plugin's /metrics server, serving this registry
    server = MetricsServer(metrics.registry, address) if address else None
    if server is not None:
        try:
            server.start()
        except OSError as e:
            err.write(f"kvdev-host relay: --metrics-address {args.metrics_address}: {e}\n")
            return EXIT_INVALID
    stop = threading.Event()
    log = logging.getLogger("kvdev.host.relay")

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("%s: stopping", signal.Signals(signum).name)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    log.info("relaying node %s's metadata files into %s", args.node_name, namespace)
    try:
        Relay(api, args.node_name, namespace, dirs, hosts).run(stop, args.interval, metrics.observe)
    finally:
        if server is not None:
            server.stop()
    return EXIT_OK


class _NoApi:
    """--once writes nothing: the loop's API is never called."""

    def list_configmaps(
        self, namespace: str, selector: str, fields: str = ""
    ) -> list[dict[str, object]]:
        raise AssertionError(namespace, selector, fields)

    def create_configmap(self, namespace: str, body: object) -> dict[str, object]:
        raise AssertionError(namespace, body)

    def replace_configmap(self, namespace: str, body: object) -> dict[str, object]:
        raise AssertionError(namespace, body)

    def delete_configmap(self, namespace: str, name: str) -> None:
        raise AssertionError(namespace, name)
