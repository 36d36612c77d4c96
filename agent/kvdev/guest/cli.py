"""``kvdev``: the guest's command-line tool.

Today it validates metadata offline (``kvdev metadata validate``); the agent's socket client
commands (status, devices, explain, plan, wait) join it as the agent grows. Exit codes are a
contract: 0 success, 1 not converged / not found, 2 usage error or invalid input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from kvdev import __version__
from kvdev.guest import files, report
from kvdev.schema.tree import ROOT

EXIT_OK = 0
EXIT_NOT_READY = 1
EXIT_INVALID = 2

_VALIDATE_EPILOG = f"""\
what is checked:
  KEP-5304 DeviceMetadata streams (metadata.resource.k8s.io v1beta1/v1alpha1): the first
  object whose apiVersion kvdev knows is used, unknown versions are skipped; every upstream
  limit (32 attributes, 64-byte strings, 16 CIDR ips ...); that the file's place in the tree
  matches its content. kvdev GuestHints (guest.kvdev.io) and a KubeVirt config drive's
  meta_data.json (its devices[] list) are checked too.

  Errors name the file, the object's position in the stream and the field, e.g.
    .../nic/sriov.example.com-metadata.json: stream[0]: requests[0].devices[1].networkData.ips[2]:
    '10.0.0.7' is not a CIDR address (address/prefix, e.g. 10.1.0.5/24)

examples:
  kvdev metadata validate                         # the agent's default tree, {ROOT}
  kvdev metadata validate ./tree meta_data.json   # a tree and a config drive file
  kvdev metadata validate --json ./tree | jq '.files[].devices'

exit status: 0 all valid (warnings allowed), 2 an invalid file or a usage error.
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvdev",
        description="Know and check the devices Kubernetes DRA gave this VM.",
        epilog="Run 'kvdev COMMAND --help' for a command's options and examples.",
    )
    parser.add_argument("--version", action="version", version=f"kvdev {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    meta = commands.add_parser(
        "metadata",
        help="work with DRA device metadata files offline",
        description=("Work with DRA device metadata files (KEP-5304) without the agent."),
    )
    meta_commands = meta.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", required=True)
    validate = meta_commands.add_parser(
        "validate",
        help="check metadata files or whole metadata trees",
        description="Check DRA device metadata files, kvdev guest hints and config-drive "
        "metadata against the contract, offline.",
        epilog=_VALIDATE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    validate.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        type=Path,
        help=f"a file or a directory tree to check (default: {ROOT})",
    )
    validate.add_argument(
        "--json", action="store_true", help="print the report, with normalized content, as JSON"
    )
    validate.add_argument(
        "-v", "--verbose", action="store_true", help="also list files that were ignored"
    )
    validate.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour the human report (auto: only on a terminal, and not when NO_COLOR is set)",
    )
    validate.set_defaults(func=_validate)
    return parser


def _use_color(choice: str, stream: TextIO) -> bool:
    if choice != "auto":
        return choice == "always"
    return stream.isatty() and "NO_COLOR" not in os.environ


def _validate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    paths: list[Path] = args.paths or [Path(ROOT)]
    missing = [p for p in paths if not p.exists()]
    if missing:
        err.writelines(f"kvdev: {p}: no such file or directory\n" for p in missing)
        return EXIT_INVALID
    raws = [raw for p in paths for raw in files.read_path(p)]
    result = report.build(raws)
    if args.json:
        json.dump(report.render_json(result), out, indent=2)
        out.write("\n")
    else:
        out.write(
            report.render_text(result, color=_use_color(args.color, out), verbose=args.verbose)
        )
    return EXIT_OK if result.valid else EXIT_INVALID


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kvdev`` console script."""
    args = _parser().parse_args(argv)
    try:
        code: int = args.func(args, sys.stdout, sys.stderr)
    except BrokenPipeError:
        # `kvdev ... | head`: the reader left; that is not an error of ours.
        sys.stderr.close()
        return EXIT_OK
    return code


if __name__ == "__main__":
    sys.exit(main())
