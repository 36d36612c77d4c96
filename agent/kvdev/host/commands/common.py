"""What the ``kvdev-host`` commands share: exit codes, the parser class, feature gates, output.

Exit codes are a contract: 0 success, 1 does not fit (allocate, schedule), 2 usage error,
invalid input (the object and field are named) or an allocator error.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any, NoReturn, TextIO, TypeAlias

import yaml

from kvdev.errors import UsageError
from kvdev.host.allocation.features import Features

EXIT_OK = 0
EXIT_UNSCHEDULABLE = 1
EXIT_INVALID = 2

OBJECT_OUTPUTS = ("yaml", "json", "name")  # -o of the commands that print objects

FILES_HELP = (
    "a YAML/JSON file of objects, a directory (its *.yaml, *.yml, *.json files, sorted) or - "
    "(standard input); repeat for several"
)

GATES = ", ".join(sorted(f.name for f in fields(Features)))

Run = Callable[[argparse.Namespace, TextIO, TextIO], int]
"""A command's body: parsed arguments, stdout, stderr -> exit status."""


class Parser(argparse.ArgumentParser):
    """An argparse parser whose usage errors raise instead of exiting (exit 2 all the same)."""

    def error(self, message: str) -> NoReturn:
        """Raise ``UsageError`` with ``message`` (argparse would print and exit)."""
        raise UsageError(f"{self.prog}: {message}")


Commands: TypeAlias = "argparse._SubParsersAction[Parser]"  # noqa: SLF001 - a string: not subscriptable at run time
"""The sub-parsers object each command module's ``register`` adds its parser to."""


def add_files_argument(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """The ``-f/--filename FILE`` option every command that reads objects takes."""
    parser.add_argument(
        "-f",
        "--filename",
        dest="files",
        action="append",
        required=required,
        metavar="FILE",
        help=FILES_HELP,
    )


def parse_feature_gates(text: str) -> Features:
    """``A=false,B=true`` -> ``Features``.

    Raises:
        UsageError: malformed, or a gate kvdev does not know.
    """
    overrides: dict[str, bool] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep or value.strip().lower() not in ("true", "false"):
            raise UsageError(f"--feature-gates: {item!r} is not GATE=true or GATE=false")
        overrides[name.strip()] = value.strip().lower() == "true"
    try:
        return Features.from_overrides(overrides)
    except ValueError as e:
        raise UsageError(f"--feature-gates: {e} (known: {GATES})") from e


def add_output_argument(
    parser: argparse.ArgumentParser,
    choices: Sequence[str] = OBJECT_OUTPUTS,
    default: str = "yaml",
    what: str = "",
) -> None:
    """``-o/--output`` (one convention with ``kvdev``'s) and ``--json``, an alias of ``-o json``."""
    names = {"yaml": "YAML documents", "json": "a JSON v1 List", "name": "kind.group/name lines"}
    shown = "; ".join(f"{c}: {names.get(c, what)}" for c in choices)
    parser.add_argument(
        "-o",
        "--output",
        choices=choices,
        default=default,
        help=f"{shown} (default: {default})",
    )
    parser.add_argument(
        "--json",
        dest="output",
        action="store_const",
        const="json",
        help="the same as -o json",
    )


def object_name(obj: dict[str, Any]) -> str:
    """``resourceclaim.resource.k8s.io/vm1``, as ``kubectl get -o name`` prints it."""
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    kind = str(obj.get("kind", "")).lower()
    name = (obj.get("metadata") or {}).get("name", "")
    return f"{kind}.{group}/{name}" if group else f"{kind}/{name}"


def print_objects(objects: Sequence[dict[str, Any]], output: str, out: TextIO) -> None:
    """``-o yaml``: one document per object; ``-o json``: a v1 List of them; ``-o name``."""
    if output == "name":
        out.writelines(f"{object_name(o)}\n" for o in objects)
    elif output == "json":
        items = {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": list(objects)}
        out.write(json.dumps(items, indent=2) + "\n")
    elif objects:
        out.write(yaml.safe_dump_all(objects, sort_keys=False))
