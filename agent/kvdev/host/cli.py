"""``kvdev-host``: the host tools' command line.

It owns the top-level parser (``--help``, ``--version``, the list of commands) and the
dispatch: each command lives in its own module under ``kvdev.host.commands`` and registers
its sub-parser there. Only the module of the command being run is imported (the others cost
start-up time: gRPC, the allocator's CEL); ``build_parser()`` without a command has them all.
Exit codes are a contract (``kvdev.host.commands.common``): 0 success, 1 does not fit, 2
usage error, invalid input or an allocator error.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import TextIO, cast

from kvdev import __version__
from kvdev.errors import UsageError
from kvdev.host.commands.common import EXIT_INVALID, Parser, logging_as_asked
from kvdev.printable import PrintableStream

# command -> its module under kvdev.host.commands, in --help order
_COMMANDS = {
    "allocate": "allocate",
    "schedule": "schedule",
    "prepare": "prepare",
    "update": "prepare",
    "unprepare": "prepare",
    "status": "status",
    "bundle": "bundle",
    "serve": "serve",
    "controller": "controller",
    "guests": "guests",
    "relay": "relay",
}

_MAIN_EPILOG = """\
the round trip:
  allocate / schedule   decide which devices each claim gets, as kube-scheduler would
  prepare / update      write the KEP-5304 metadata files and CDI specs, as a kubelet plugin
  unprepare / status    remove them again / print the claim status a driver would apply
  bundle                turn the container-side tree into what the guest's kvdev-agent reads
  serve                 run as a kubelet DRA plugin (gRPC) that does prepare/unprepare
  controller            keep each KubeVirt VMI's guest bundle in a ConfigMap (--once: print it)
  guests                per VMI: whether its guest applied the NICs its drivers described
  relay                 relay the drivers' own metadata files of a node to the controller

examples:
  kvdev-host allocate -f state.yaml --node node-a
  kvdev-host schedule -f cluster.yaml -f pods.yaml --summary-only
  kvdev-host prepare -f claims.yaml -f slices.yaml --driver dra.net
  kvdev-host bundle --from-cdi /var/run/cdi --domain-xml vm1.xml --out /srv/vm1
  kvdev-host serve --driver dra.net --claims-dir /srv/claims
  kvdev-host controller --once -f vms.yaml -f slices.yaml
  kvdev-host guests -n vms
  kvdev-host COMMAND --help

exit status:
  0  success
  1  the claims do not fit (allocate), some pods are unschedulable (schedule), a file
     could not be written or removed (prepare, update, unprepare, bundle), serve
     cannot listen, a VMI's bundle could not be rendered (controller --once), the
     controller cannot go on, or a guest's NIC Differs or is Unreported (guests)
  2  usage error, invalid input or an allocator error

The manual: kvdev-host(1) (man kvdev-host).
"""
_MANUAL = "The manual: kvdev-host(1) (man kvdev-host)."


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``kvdev-host`` parser with its commands; with ``command``, only that one in full."""
    parser = Parser(
        prog="kvdev-host",
        description="kvdev host tools: allocate DRA devices like the scheduler does, publish\n"
        "what was allocated as KEP-5304 metadata files and CDI specs, and bundle them for a\n"
        "KubeVirt guest's kvdev-agent.",
        epilog=_MAIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"kvdev-host {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    wanted = (
        [_COMMANDS[command]] if command in _COMMANDS else list(dict.fromkeys(_COMMANDS.values()))
    )
    for module in wanted:
        importlib.import_module(f"kvdev.host.commands.{module}").register(commands)
    for sub in commands.choices.values():  # each command's help ends by naming the manual
        sub.epilog = f"{sub.epilog.rstrip()}\n\n{_MANUAL}\n" if sub.epilog else _MANUAL
    if command in _COMMANDS:
        for name, module in _COMMANDS.items():
            if module != _COMMANDS[command]:
                commands.add_parser(name)  # a name only: its module is not needed
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kvdev-host`` console script; returns the exit status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(args_list[0] if args_list else None)
    argv = args_list
    try:
        args = parser.parse_args(argv)
    except UsageError as e:
        sys.stderr.write(f"{e}\n")
        return EXIT_INVALID
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_INVALID
    # what people read is escaped (kvdev.printable); JSON and YAML stay exact
    exact = getattr(args, "output", None) in {"json", "yaml"}
    out = sys.stdout if exact else cast("TextIO", PrintableStream(sys.stdout))
    with logging_as_asked(args):
        status: int = args.run(args, out, cast("TextIO", PrintableStream(sys.stderr)))
    return status
