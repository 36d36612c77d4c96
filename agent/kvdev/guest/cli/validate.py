"""``kvdev metadata validate``: check metadata files and trees offline, without the agent.

Owns the subcommand's parser (its help, examples and exit codes) and its run: the files are
read by the agent's own reader (``adapters.files``: the same bounds and link rules), checked
by ``core.check`` and drawn by ``views.validation``. It never asks the agent.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from kvdev.guest.adapters import files
from kvdev.guest.core import check
from kvdev.guest.views import validation
from kvdev.schema.tree import ROOT

EXIT_INVALID = 2

Command = Callable[[argparse.Namespace, TextIO, TextIO], int]

EPILOG = f"""\
what is checked:
  KEP-5304 DeviceMetadata streams (metadata.resource.k8s.io v1, v1beta1, v1alpha1), as upstream's
  reader reads them: the first object of a known apiVersion that decodes is used (unknown
  versions are skipped; a known one that does not decode falls back to the next); then every
  rule a conforming writer follows (32 attributes, 64-byte strings, 16 CIDR ips, names ...):
  a break is a warning marked [upstream], since upstream's reader accepts it. A device the
  agent cannot act on (an IP that is no address) is an error on that device alone. Also: that
  the file's place in the tree matches its content; kvdev GuestHints (guest.kvdev.io) and a
  KubeVirt config drive's meta_data.json (its devices[] list).

  A "note:" under a device is no problem: e.g. that its stream has no v1alpha1 object, which
  KubeVirt up to v1.9 cannot read. "driver mtu N" is the device's mtu attribute, the NIC's MTU
  in the guest unless a hint asks for less.

  Problems name the file, the object's position in the stream and the field, e.g.
    .../nic/sriov.example.com-metadata.json: stream[0]: requests[0].devices[1].networkData.ips[2]:
    'banana' is not an IP address; the device is left as it is

examples:
  kvdev metadata validate                         # the agent's default tree, {ROOT}
  kvdev metadata validate ./tree meta_data.json   # a tree and a config drive file
  kvdev metadata validate --json ./tree | jq '.files[].devices'
  kvdev metadata validate -o json ./tree          # the same; -o may also come before 'metadata'

exit status: 0 all valid and conforming (other warnings allowed), 1 all valid but some value
breaks a writer's rule ([upstream]: report it to the driver), 2 a file or a device kvdev cannot
use, or a usage error.
"""


def add_parser(meta: argparse.ArgumentParser, func: Command) -> None:
    """Add ``validate`` to the ``metadata`` command's parser; ``func`` runs it."""
    meta_commands = meta.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", required=True)
    validate = meta_commands.add_parser(
        "validate",
        help="check metadata files or whole metadata trees",
        description="Check DRA device metadata files, kvdev guest hints and config-drive "
        "metadata against the contract, offline.",
        epilog=EPILOG,
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
        "-o",
        "--output",
        choices=("json",),
        default=argparse.SUPPRESS,  # as --json: kvdev's global -o, given before, applies
        help="json: the report as JSON (the same as --json); the default is the text report",
    )
    validate.add_argument(
        "--json",
        dest="output",
        action="store_const",
        const="json",
        default=argparse.SUPPRESS,  # the global option's default applies (-o json is the same)
        help="print the report, with normalized content, as JSON",
    )
    validate.add_argument(
        "-v", "--verbose", action="store_true", help="also list files that were ignored"
    )
    validate.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default=argparse.SUPPRESS,
        help="colour the human report (auto: only on a terminal, and not when NO_COLOR is set)",
    )
    validate.set_defaults(func=func)


def run(args: argparse.Namespace, out: TextIO, err: TextIO, *, color: bool) -> int:
    """Check ``args.paths`` (default: the agent's tree); 0 valid, 2 invalid or missing."""
    output = getattr(args, "output", None)
    if output not in {None, "json"}:  # kvdev's global -o, given before 'metadata'
        err.write(
            f"kvdev: metadata validate prints its report as text or -o json, not -o {output}\n"
        )
        return EXIT_INVALID
    paths: list[Path] = args.paths or [Path(ROOT)]
    missing = [p for p in paths if not p.exists()]
    if missing:
        err.writelines(f"kvdev: {p}: no such file or directory\n" for p in missing)
        return EXIT_INVALID
    raws = [raw for p in paths for raw in files.read_path(p)]
    result = check.build(raws)
    if output == "json":
        json.dump(validation.render_json(result), out, indent=2)
        out.write("\n")
    else:
        out.write(validation.render_text(result, color=color, verbose=args.verbose))
    return result.exit_code
