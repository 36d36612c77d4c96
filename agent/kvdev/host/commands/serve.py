"""``kvdev-host serve``: run as a DRA driver's kubelet plugin until SIGTERM or SIGINT.

Parses the options, builds the claim source (a directory of files, or the Kubernetes API),
the writer layout and the ``PluginServer``, and waits for a signal; then it stops gracefully
(registration socket first, in-flight calls finish) and removes its sockets. Exit 0 after a
clean stop, 1 when it cannot serve (a socket in use, an unwritable directory), 2 usage error
or invalid options. The services live in ``kvdev.host.plugin.service`` and
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

from kvdev.errors import KvdevError, SchemaError, UsageError
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
from kvdev.host.plugin.kube import KubeClaimSource
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

examples:
  kvdev-host serve --driver sriov.example.com --kube
  kvdev-host serve --driver sriov.example.com --claims-dir /etc/kvdev/claims \\
      --plugin-data-dir /tmp/plugin --cdi-dir /tmp/cdi --registry-dir /tmp/registry

exit status: 0 stopped by SIGTERM/SIGINT, 1 cannot serve (socket in use, directory not
  writable), 2 usage error or invalid options.
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
    add_kube_api_arguments(serve)
    add_logging_arguments(serve, "plugin")
    serve.set_defaults(run=_run)


def _run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        server = _build(args)
    except (UsageError, SchemaError) as e:
        err.write(f"kvdev-host serve: {e}\n")
        return EXIT_INVALID
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        logging.getLogger(__name__).info("%s: stopping", signal.Signals(signum).name)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    try:
        server.start()
    except UsageError as e:
        err.write(f"kvdev-host serve: {e}\n")
        return EXIT_INVALID
    except KvdevError as e:
        err.write(f"kvdev-host serve: {e}\n")
        return EXIT_CANNOT_SERVE
    out.write(f"serving {args.driver}: {server.sockets.dra} {server.sockets.registration}\n")
    out.flush()
    stop.wait()
    server.stop(args.grace)
    return EXIT_OK


def _build(args: argparse.Namespace) -> PluginServer:
    if args.kubeconfig is not None and not args.kube:
        raise UsageError("--kubeconfig needs --kube")
    if args.grace < 0:
        raise UsageError("--grace must not be negative")
    layout = layout_from(args)  # validates the driver name
    source: ClaimSource
    if args.kube:
        source = KubeClaimSource(
            args.driver, node=args.node_name, kubeconfig=args.kubeconfig, bucket=bucket_from(args)
        )
    else:
        source = FileClaimSource(args.claims_dir, args.driver)
    sockets = Sockets.default(
        args.driver, layout.plugin_data_dir, args.registry_dir, pod_uid=args.pod_uid
    )
    return PluginServer(Plugin(layout, source), sockets, driver=args.driver)
