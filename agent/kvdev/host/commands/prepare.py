"""``kvdev-host prepare``, ``update`` and ``unprepare``: a driver's metadata files on this host.

Reads allocated ResourceClaims and the ResourceSlices of their devices from files (as
``allocate`` does), and network data from the claims' ``status.devices[]`` or a file, then
calls ``kvdev.host.publish.writer``. Every claim is checked before anything is written. Exit 0 ok,
1 a file could not be written or removed (the message names it), 2 usage error or invalid
input (the object and field are named).
"""

from __future__ import annotations

import argparse
import json
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml
from pydantic import ValidationError

from kvdev.errors import KvdevError, Problem, SchemaError
from kvdev.host.commands.common import (
    EXIT_INVALID,
    EXIT_OK,
    Commands,
    Parser,
    add_files_argument,
    add_logging_arguments,
    add_output_argument,
)
from kvdev.host.commands.inputs import load_files
from kvdev.host.k8s import ResourceClaim, ResourceSlice
from kvdev.host.k8s.device import NetworkDeviceData
from kvdev.host.k8s.model import problems_from
from kvdev.host.publish import writer
from kvdev.host.publish.metadata import build_metadata, claim_identity, network_from_status

EXIT_IO = 1
EXIT_NOTHING = 1  # prepare/update: no claim has a device of --driver (a typo, most likely)

_COMMON = """\
input:
  -f: YAML or JSON documents (multi-document streams or 'kind: List', as kubectl prints
  them) of resource.k8s.io/v1 ResourceClaim (allocated: status.allocation set) and
  ResourceSlice; other kinds are skipped with a warning. Only the devices of --driver count.
  --network-data: YAML/JSON list of {{driver, pool, device, networkData}} entries (the shape
  of status.devices[]; driver defaults to --driver), or an object with such a 'devices'
  list. It overrides the claims' own status.devices[].networkData per device.

files (upstream's KEP-5304 layout):
  DIR/dra-device-metadata/<namespace>_<claim>/<request>/metadata.json   (DIR = --plugin-data-dir)
  CDIDIR/<driver>_metadata_<claimUID>_<request>.json                     (CDIDIR = --cdi-dir)
  Written atomically (fsync, rename), mode 0644, directories 0755.
"""

_EXIT = """\
exit status: 0 ok, 1 a file could not be written or removed (disk full, read-only, ...) or
  (prepare, update) no claim has a device of --driver (a warning names the claims' drivers),
  2 usage error or invalid input (names the object and field).
"""

_PREPARE_EPILOG = f"""\
{_COMMON}
output: per device, the claim, request(s), pool/device and the CDI device ID to hand to the
  container runtime (-o json: a PreparedClaimList with the files written).

examples:
  kvdev-host prepare -f claims.yaml -f slices.yaml --driver gpu.nvidia.com
  kvdev-host prepare -f claims.yaml -f slices.yaml --driver dra.net \\
      --plugin-data-dir /tmp/p --cdi-dir /tmp/cdi -o json

{_EXIT}"""

_UPDATE_EPILOG = f"""\
{_COMMON}
update rewrites the files with metadata.generation + 1, as a driver does when network data
arrives after prepare (upstream's UpdateRequestMetadata).

examples:
  kvdev-host update -f claims.yaml -f slices.yaml --driver dra.net --network-data net.yaml

{_EXIT}"""

_UNPREPARE_EPILOG = f"""\
Removes exactly what prepare wrote for each ResourceClaim in the files (namespace, name and
uid are read from them; no allocation needed) and the directories that leaves empty.
Succeeds when the files are gone already. Prints the files removed.

examples:
  kvdev-host unprepare -f claims.yaml --driver gpu.nvidia.com
  kvdev-host unprepare -f claims.yaml --driver dra.net --plugin-data-dir /tmp/p --cdi-dir /tmp/cdi

{_EXIT}"""


def add_layout_arguments(parser: argparse.ArgumentParser) -> None:
    """``--driver``, ``--plugin-data-dir``, ``--cdi-dir``."""
    parser.add_argument("--driver", required=True, metavar="NAME", help="the DRA driver name")
    parser.add_argument(
        "--plugin-data-dir",
        type=Path,
        metavar="DIR",
        help="the driver's plugin data directory (default: /var/lib/kubelet/plugins/NAME)",
    )
    parser.add_argument(
        "--cdi-dir", type=Path, metavar="DIR", help="CDI spec directory (default: /var/run/cdi)"
    )


def add_network_argument(parser: argparse.ArgumentParser) -> None:
    """``--network-data FILE``."""
    parser.add_argument(
        "--network-data",
        type=Path,
        metavar="FILE",
        help="network data per device (overrides the claims' status.devices[].networkData)",
    )


def register(commands: Commands) -> None:
    """Add ``prepare``, ``update`` and ``unprepare`` to the ``kvdev-host`` sub-parsers."""
    for name, summary, epilog in (
        ("prepare", "write a driver's KEP-5304 metadata files and CDI specs", _PREPARE_EPILOG),
        ("update", "rewrite the files with generation + 1 (late network data)", _UPDATE_EPILOG),
        ("unprepare", "remove what prepare wrote for the claims", _UNPREPARE_EPILOG),
    ):
        sub: Parser = commands.add_parser(
            name,
            help=summary,
            description=summary[0].upper() + summary[1:] + ".",
            epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        add_files_argument(sub)
        add_layout_arguments(sub)
        if name != "unprepare":
            add_network_argument(sub)
        add_output_argument(sub, ("text", "json"), "text", "one line per claim")
        add_logging_arguments(sub, name)
        sub.set_defaults(run=_run, verb=name)


def layout_from(args: argparse.Namespace) -> writer.Layout:
    """The writer layout the options ask for."""
    default = writer.Layout.default(args.driver)
    return writer.Layout(
        args.driver,
        args.plugin_data_dir or default.plugin_data_dir,
        args.cdi_dir or default.cdi_dir,
    )


def read_objects(
    files: Sequence[str], err: TextIO
) -> tuple[list[ResourceClaim], list[ResourceSlice]]:
    """The claims and slices of the files; other kinds are warned about and skipped."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        objects = load_files(files)
    err.writelines(f"kvdev-host: warning: {w.message}\n" for w in caught)
    claims = [o for o in objects if isinstance(o, ResourceClaim)]
    slices = [o for o in objects if isinstance(o, ResourceSlice)]
    return claims, slices


def read_network_data(
    path: Path | None, driver: str
) -> dict[tuple[str, str, str], NetworkDeviceData]:
    """``--network-data``: per (driver, pool, device).

    Raises:
        SchemaError: the file is not YAML/JSON or an entry is invalid (file and entry named).
    """
    if path is None:
        return {}
    source = str(path)
    try:
        value = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise SchemaError([Problem(f"cannot read network data: {e}", source)]) from e
    entries = value.get("devices") if isinstance(value, dict) else value
    if not isinstance(entries, list):
        raise SchemaError([Problem("expected a list of status.devices[] entries", source)])
    out: dict[tuple[str, str, str], NetworkDeviceData] = {}
    problems: list[Problem] = []
    for i, entry in enumerate(entries):
        where = f"devices[{i}]"
        if not isinstance(entry, dict) or not all(
            isinstance(entry.get(k), str) for k in ("pool", "device")
        ):
            problems.append(Problem("needs string fields pool and device", source, path=where))
            continue
        key = (str(entry.get("driver", driver)), entry["pool"], entry["device"])
        try:
            out[key] = NetworkDeviceData.model_validate(entry.get("networkData") or {}, strict=True)
        except ValidationError as e:
            problems.extend(
                Problem(p.message, source, path=f"{where}.networkData.{p.path}")
                for p in problems_from(e, source=source, index=None)
            )
    if problems:
        raise SchemaError(problems)
    return out


def network_for(
    claim: ResourceClaim, explicit: dict[tuple[str, str, str], NetworkDeviceData]
) -> dict[tuple[str, str, str], NetworkDeviceData]:
    """The claim's own network data, overridden per device by the explicit file."""
    return network_from_status(claim) | explicit


def drivers_of(claims: Sequence[ResourceClaim]) -> set[str]:
    """The drivers of the devices allocated to ``claims``."""
    return {
        r.driver
        for c in claims
        if c.status and c.status.allocation and c.status.allocation.devices
        for r in c.status.allocation.devices.results or ()
    }


def _uses(claims: Sequence[ResourceClaim], driver: str, verb: str, err: TextIO) -> bool:
    """Whether a claim has a device of ``driver``; if none has, a warning naming theirs."""
    used = drivers_of(claims)
    if driver in used:
        return True
    named = ", ".join(sorted(used)) or "none: no claim is allocated"
    err.write(
        f"kvdev-host: {verb}: warning: no claim in the input has a device of driver "
        f"{driver} (the claims' drivers: {named}); nothing written\n"
    )
    return False


def report_error(verb: str, error: KvdevError, err: TextIO) -> int:
    """Print an error; its exit status (2 invalid input, 1 I/O)."""
    if isinstance(error, SchemaError):
        err.writelines(f"kvdev-host: {verb}: {p}\n" for p in error.problems)
        return EXIT_INVALID
    err.write(f"kvdev-host: {verb}: {error}\n")
    return EXIT_IO


def _prepared_json(p: writer.Prepared) -> dict[str, Any]:
    return {
        "namespace": p.namespace,
        "name": p.name,
        "uid": p.uid,
        "devices": [
            {
                "requests": list(d.requests),
                "pool": d.pool,
                "device": d.device,
                "cdiDeviceIDs": list(d.cdi_device_ids),
            }
            | ({"shareID": d.share_id} if d.share_id is not None else {})
            for d in p.devices
        ],
        "files": [str(f) for f in p.paths],
    }


def _run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    verb: str = args.verb
    try:
        layout = layout_from(args)
        claims, slices = read_objects(args.files, err)
        if not claims:
            raise SchemaError([Problem("no ResourceClaim in the input files")])
        if verb == "unprepare":
            return _unprepare(claims, layout, args.output, out)
        if not _uses(claims, args.driver, verb, err):
            return EXIT_NOTHING
        explicit = read_network_data(args.network_data, args.driver)
        networks = [network_for(claim, explicit) for claim in claims]
        for claim, network in zip(claims, networks, strict=True):  # check all before writing
            build_metadata(claim, slices, args.driver, network_data=network)
        step = writer.update if verb == "update" else writer.prepare
        done = []
        for claim, network in zip(claims, networks, strict=True):
            prepared = step(claim, slices, layout, network_data=network)
            if not prepared.devices:
                err.write(
                    f"kvdev-host: {verb}: claim {prepared.namespace}/{prepared.name} has no "
                    f"device of {args.driver}: nothing to write\n"
                )
            done.append(prepared)
    except KvdevError as e:
        return report_error(verb, e, err)
    _print_prepared(done, args.output, out)
    return EXIT_OK


def _print_prepared(done: Sequence[writer.Prepared], output: str, out: TextIO) -> None:
    if output == "json":
        body = {
            "apiVersion": "kvdev.io/v1alpha1",
            "kind": "PreparedClaimList",
            "items": [_prepared_json(p) for p in done],
        }
        out.write(json.dumps(body, indent=2) + "\n")
        return
    for p in done:
        for d in p.devices:
            ids = " ".join(d.cdi_device_ids)
            out.write(f"{p.namespace}/{p.name}\t{','.join(d.requests)}\t")
            out.write(f"{d.pool}/{d.device}\t{ids}\n")


def _unprepare(
    claims: Sequence[ResourceClaim], layout: writer.Layout, output: str, out: TextIO
) -> int:
    idents = [claim_identity(c) for c in claims]  # all names checked before removing anything
    removed: list[Path] = []
    for ident in idents:
        removed.extend(writer.unprepare(ident.namespace, ident.name, ident.uid, layout))
    if output == "json":
        body = {"apiVersion": "kvdev.io/v1alpha1", "kind": "RemovedFiles"}
        out.write(json.dumps(body | {"files": [str(p) for p in removed]}, indent=2) + "\n")
    else:
        out.writelines(f"{p}\n" for p in removed)
    return EXIT_OK
