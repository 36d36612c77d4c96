"""What the ``kvdev-host`` commands share: exit codes, parser, feature gates, output, logs.

Also the logging options every command takes and the client rate limit of those that talk to
the API server.

Exit codes are a contract: 0 success, 1 does not fit (allocate, schedule), 2 usage error,
invalid input (the object and field are named) or an allocator error.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Callable, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any, NoReturn, TextIO, TypeAlias

import yaml

from kvdev.errors import UsageError
from kvdev.host import logs
from kvdev.host.allocation.features import Features
from kvdev.host.ratelimit import DEFAULT_BURST, DEFAULT_QPS, TokenBucket

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


def add_logging_arguments(parser: argparse.ArgumentParser, component: str) -> None:
    """``--log-format`` and ``--log-level``; records name component ``kvdev-host-<component>``."""
    parser.add_argument(
        "--log-format",
        choices=logs.FORMATS,
        default="text",
        help="logs on stderr: text (one line a record) or json (one object a line: ts, level, "
        "msg, component, and kind, namespace, name, uid of the object concerned) "
        "(default: text)",
    )
    parser.add_argument(
        "--log-level",
        choices=logs.LEVELS,
        default="info",
        help="the least severe record logged (default: info)",
    )
    parser.set_defaults(component=f"kvdev-host-{component}")


def logging_as_asked(args: argparse.Namespace) -> contextlib.AbstractContextManager[object]:
    """For the command's run: logging as its ``--log-format`` and ``--log-level`` ask."""
    return logs.configured(args.log_format, args.log_level, args.component)


def add_kube_api_arguments(parser: argparse.ArgumentParser) -> None:
    """``--kube-api-qps`` and ``--kube-api-burst``: the client-side rate limit (client-go's)."""
    parser.add_argument(
        "--kube-api-qps",
        type=float,
        default=DEFAULT_QPS,
        metavar="QPS",
        help="requests a second to the API server, on average, watches included; a negative "
        "value: no limit "
        f"(default: {DEFAULT_QPS:g}, client-go's)",
    )
    parser.add_argument(
        "--kube-api-burst",
        type=int,
        default=DEFAULT_BURST,
        metavar="N",
        help="how many requests may go at once before --kube-api-qps paces them "
        f"(default: {DEFAULT_BURST}, client-go's)",
    )


def bucket_from(args: argparse.Namespace) -> TokenBucket | None:
    """The token bucket ``--kube-api-qps``/``--kube-api-burst`` ask for (None: no limit).

    Raises:
        UsageError: a zero QPS or a burst below 1.
    """
    if args.kube_api_qps < 0:
        return None
    if args.kube_api_qps == 0:
        raise UsageError("--kube-api-qps: 0 would never send a request (negative: no limit)")
    if args.kube_api_burst < 1:
        raise UsageError(f"--kube-api-burst: must be at least 1, not {args.kube_api_burst}")
    return TokenBucket(args.kube_api_qps, args.kube_api_burst)


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


SA_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def own_namespace(given: str | None, default: str) -> str:
    """``given``, else the pod's service account's namespace, else ``default``."""
    if given:
        return given
    try:
        return SA_NAMESPACE_FILE.read_text(encoding="utf-8").strip() or default
    except OSError:
        return default
