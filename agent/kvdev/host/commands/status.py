"""``kvdev-host status``: the ``status.devices[]`` a driver would apply to its prepared claims.

Prints, per claim with devices of ``--driver``, an apply configuration for server-side apply
(``kubectl apply --server-side --subresource=status --field-manager kvdev-host/<driver> -f -``:
what ``kvdev-host serve --kube`` applies itself after a prepare), built by the pure
``kvdev.host.publish.devicestatus``. Exit 0 ok, 2 usage error or invalid input.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import TextIO

from kvdev.errors import KvdevError, Problem, SchemaError
from kvdev.host.commands.common import (
    EXIT_OK,
    Commands,
    Parser,
    add_files_argument,
    add_logging_arguments,
    add_output_argument,
    print_objects,
)
from kvdev.host.commands.prepare import (
    add_network_argument,
    network_for,
    read_network_data,
    read_objects,
    report_error,
)
from kvdev.host.publish.devicestatus import apply_configuration
from kvdev.host.publish.metadata import driver_results

_EPILOG = """\
input: as for prepare (-f: allocated ResourceClaims; slices are not needed).
  Network data: the claims' own status.devices[].networkData, overridden per device by
  --network-data (a list of {driver, pool, device, networkData}).

output: per claim that has devices of NAME, a ResourceClaim apply configuration
  (apiVersion, kind, metadata name/namespace/uid, status.devices[] with NAME's entries:
  driver, pool, device, shareID, a Ready condition, networkData). -o yaml: one document per
  claim; -o json: a v1 List. A Ready condition already True keeps its lastTransitionTime.
  'kvdev-host serve --kube' applies the same to each claim it prepares (field manager
  kvdev-host/NAME); by hand, use that manager, so serve's unprepare removes the entries.

examples:
  kvdev-host status -f claims.yaml --driver dra.net
  kvdev-host status -f claims.yaml --driver dra.net -o json --network-data net.yaml |
      kubectl apply --server-side --subresource=status --field-manager kvdev-host/dra.net -f -

exit status: 0 ok, 2 usage error or invalid input (names the object and field).
"""


def register(commands: Commands) -> None:
    """Add ``status`` to the ``kvdev-host`` sub-parsers."""
    sub: Parser = commands.add_parser(
        "status",
        help="print the status.devices[] a driver applies to its claims (server-side apply)",
        description="Print the status.devices[] entries --driver would apply to each claim.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_files_argument(sub)
    sub.add_argument("--driver", required=True, metavar="NAME", help="the DRA driver name")
    add_network_argument(sub)
    add_output_argument(sub)
    add_logging_arguments(sub, "status")
    sub.set_defaults(run=_run)


def _run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    now = datetime.now(UTC)
    try:
        claims, _ = read_objects(args.files, err)
        if not claims:
            raise SchemaError([Problem("no ResourceClaim in the input files")])
        explicit = read_network_data(args.network_data, args.driver)
        objects = [
            apply_configuration(
                claim, args.driver, now=now, network_data=network_for(claim, explicit)
            )
            for claim in claims
            if driver_results(claim, args.driver)
        ]
    except KvdevError as e:
        return report_error("status", e, err)
    print_objects(objects, args.output, out)
    return EXIT_OK
