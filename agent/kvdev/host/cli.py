"""``kvdev-host``: the host tools' command line.

It owns the top-level parser (``--help``, ``--version``, the list of commands) and the
dispatch: each command lives in its own module under ``kvdev.host.commands`` and registers
its sub-parser there. Exit codes are a contract (``kvdev.host.commands.common``): 0 success,
1 does not fit, 2 usage error, invalid input or an allocator error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kvdev import __version__
from kvdev.errors import UsageError
from kvdev.host.commands import allocate
from kvdev.host.commands.common import EXIT_INVALID, Parser

_COMMANDS = (allocate,)

_MAIN_EPILOG = """\
examples:
  kvdev-host allocate -f state.yaml --node node-a
  kvdev-host allocate --help

exit status:
  0  success
  1  the claims do not fit (allocate)
  2  usage error, invalid input or an allocator error
"""


def build_parser() -> argparse.ArgumentParser:
    """The ``kvdev-host`` parser with its commands."""
    parser = Parser(
        prog="kvdev-host",
        description="kvdev host tools: allocate DRA devices like the scheduler does.\n"
        "(The metadata writer and the kubelet plugin are not in this build yet.)",
        epilog=_MAIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"kvdev-host {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for command in _COMMANDS:
        command.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kvdev-host`` console script; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as e:
        sys.stderr.write(f"{e}\n")
        return EXIT_INVALID
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_INVALID
    status: int = args.run(args, sys.stdout, sys.stderr)
    return status
