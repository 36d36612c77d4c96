"""``kvdev-host bundle``: publish the guest bundle (metadata tree + kvdev guest hints).

Reads the container-side metadata tree (``--from-tree``, or rebuilt from CDI specs with
``--from-cdi``), the guest placement (``--domain-xml`` or ``--guest-plan``), builds the bundle
(``kvdev.host.bundle.build``) and publishes it atomically in ``--out``
(``kvdev.host.bundle.writer``).
Prints a summary: per device its guest PCI address and how it was matched, and the unpinned
ones. Exit 0 published (or unchanged), 2 usage error or invalid input, 1 an I/O failure.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from kvdev.errors import KvdevError, PermanentError, RetryableError, SchemaError
from kvdev.host.bundle import build, source, writer
from kvdev.host.bundle.domainxml import parse_domain
from kvdev.host.bundle.plan import load_plan
from kvdev.host.cdi.ondisk import DEFAULT_HOST_DIRS
from kvdev.host.commands.common import (
    EXIT_INVALID,
    EXIT_OK,
    Commands,
    Parser,
    add_logging_arguments,
    add_output_argument,
)

EXIT_IO = 1

_EPILOG = """\
input:
  --from-tree DIR   DIR is the tree a container sees at
                    /var/run/kubernetes.io/dra-device-attributes
  --from-cdi DIR    rebuild that tree from the '<driver>/metadata' CDI specs in DIR
                    (/var/run/cdi): each mount's hostPath is read and placed at its
                    containerPath; --claim-uid UID (repeatable) keeps those claims only.
                    Each hostPath must lie beneath a --host-dir DIR (repeatable; default
                    /var/lib/kubelet/plugins) and is read there without following a link;
                    only a regular file with one link is opened (a device, a FIFO, a link
                    or a path outside is refused, named). At most 128 devices and 256
                    mounts per spec, YAML aliases counted expanded.
  --domain-xml FILE the VM's libvirt domain ('virsh dumpxml'): <hostdev> elements are
                    matched by source PCI address = resource.kubernetes.io/pciBusID,
                    <interface> elements by <mac address> = networkData.hardwareAddress
                    (or by source PCI address); their <address type='pci'> is the guest
                    address. A DOCTYPE or entity declaration is refused.
  --guest-plan FILE a GuestPlan (YAML/JSON): per claim/request[/driver/device] the guest
                    pciAddress, tag, interfaceName, mtu, routes
  Neither: every device gets a tag and no pin.

output (--out DIR):
  DIR/current -> DIR/.gen-N, swapped atomically; point the agent's --metadata-root at
  DIR/current (share DIR into the VM). Same content: nothing is written.
  The bundle is every metadata file unchanged plus kvdev/guest-hints.json; the hints'
  generation grows by one whenever the content changes.

examples:
  kvdev-host bundle --from-tree ./dra-device-attributes --domain-xml vm1.xml --out /srv/vm1
  kvdev-host bundle --from-cdi /var/run/cdi --claim-uid 8c1d2f55-... \\
      --guest-plan plan.yaml --out /srv/vm1 -o json

exit status: 0 published or unchanged, 1 the output cannot be written,
  2 usage error or invalid input (the file and field are named).
"""


def register(commands: Commands) -> None:
    """Add ``bundle`` to the ``kvdev-host`` sub-parsers."""
    p: Parser = commands.add_parser(
        "bundle",
        help="publish the guest bundle: metadata files plus guest hints (guest PCI pins, tags)",
        description="Build the bundle a VM's kvdev-agent reads: the container-side metadata\n"
        "tree plus kvdev guest hints pinning each device to its guest PCI address,\n"
        "and publish it atomically as a whole.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    given = p.add_mutually_exclusive_group(required=True)
    given.add_argument("--from-tree", type=Path, metavar="DIR", help="the container-side tree")
    given.add_argument("--from-cdi", type=Path, metavar="DIR", help="a CDI spec directory")
    p.add_argument(
        "--claim-uid",
        action="append",
        default=[],
        metavar="UID",
        help="with --from-cdi: only this claim's specs (repeatable)",
    )
    p.add_argument(
        "--host-dir",
        action="append",
        metavar="DIR",
        help="with --from-cdi: read hostPath files only beneath DIR (repeatable; default: "
        f"{', '.join(DEFAULT_HOST_DIRS)})",
    )
    plan = p.add_mutually_exclusive_group()
    plan.add_argument("--domain-xml", type=Path, metavar="FILE", help="libvirt domain XML")
    plan.add_argument("--guest-plan", type=Path, metavar="FILE", help="a GuestPlan file")
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="output directory")
    add_output_argument(p, ("text", "json"), "text", "the summary in lines")
    add_logging_arguments(p, "bundle")
    p.set_defaults(run=_run)


def _placement(args: argparse.Namespace, tree: build.Tree) -> build.Placement:
    if args.domain_xml is not None:
        data = source.read_file(args.domain_xml)
        return build.place_by_domain(
            tree, parse_domain(data, str(args.domain_xml)), str(args.domain_xml)
        )
    if args.guest_plan is not None:
        data = source.read_file(args.guest_plan)
        return build.place_by_plan(
            tree, load_plan(data, str(args.guest_plan)), str(args.guest_plan)
        )
    return build.Placement({})


def make_bundle(
    tree: build.Tree, placement: build.Placement, previous: Mapping[str, bytes] | None
) -> build.Bundle:
    """The bundle, its hints' generation carried on from ``previous`` (+1 when content changes)."""
    old = previous.get(build.HINTS_FILE) if previous else None
    generation = (build.hints_generation(old) if old is not None else None) or 0
    same = build.build(tree, placement, generation=max(generation, 1))
    if generation == 0 or dict(same.files) == dict(previous or {}):
        return same  # the first generation, or unchanged: no second build
    return build.build(tree, placement, generation=generation + 1)


def _run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    for flag, given in (("--claim-uid", args.claim_uid), ("--host-dir", args.host_dir)):
        if given and args.from_cdi is None:
            err.write(f"kvdev-host bundle: {flag} needs --from-cdi\n")
            return EXIT_INVALID
    try:
        if args.from_tree is not None:
            files, root = source.read_tree_dir(args.from_tree), str(args.from_tree)
        else:
            files, root = (
                source.read_cdi_dir(
                    args.from_cdi, args.claim_uid, args.host_dir or DEFAULT_HOST_DIRS
                ),
                "",
            )
        tree = build.read_tree(files, root)
        placement = _placement(args, tree)
        built: list[build.Bundle] = []

        def make(previous: Mapping[str, bytes] | None) -> Mapping[str, bytes]:
            built.append(make_bundle(tree, placement, previous))
            return built[-1].files

        published = writer.publish(args.out, make)
    except SchemaError as e:
        err.write("".join(f"kvdev-host bundle: {p}\n" for p in e.problems))
        return EXIT_INVALID
    except (PermanentError, RetryableError) as e:
        err.write(f"kvdev-host bundle: {e}\n")
        return EXIT_IO
    except KvdevError as e:  # pragma: no cover - every kvdev error is one of the above
        err.write(f"kvdev-host bundle: {e}\n")
        return EXIT_INVALID
    result = built[-1]
    err.writelines(f"kvdev-host bundle: warning: {warning}\n" for warning in result.warnings)
    if args.output == "json":
        out.write(json.dumps(summary(result, published), indent=2) + "\n")
    else:
        out.write(text_summary(result, published))
    return EXIT_OK


def summary(result: build.Bundle, published: writer.Published) -> dict[str, Any]:
    """The ``-o json`` summary."""
    return {
        "root": str(published.root),
        "generationDir": str(published.directory),
        "changed": published.changed,
        "devices": [
            {
                "device": d.ref,
                "hostPCI": d.host_pci,
                "mac": d.mac,
                "guestPCI": d.guest_pci,
                "tag": d.tag,
                "matchedBy": d.matched_by,
                "origin": d.origin,
            }
            for d in result.devices
        ],
        "unpinned": [d.ref for d in result.unpinned],
        "unused": list(result.unused),
        "warnings": [str(p) for p in result.warnings],
    }


def unpinned_lines(unpinned: Sequence[build.BundleDevice]) -> list[str]:
    """What the agent matches each unpinned device by.

    Its MAC when it has one, else only a PCI vendor:device ID no other device shares (so a
    GPU is matched only when it is the only one of its kind).
    """
    by_mac = [d.ref for d in unpinned if d.mac]
    by_id = [d.ref for d in unpinned if not d.mac]
    lines = []
    if by_mac:
        lines.append(f"unpinned, the agent matches them by MAC: {', '.join(by_mac)}")
    if by_id:
        lines.append(
            "unpinned, no MAC: the agent matches them only by a PCI vendor:device ID no other "
            "device shares (pin them with --domain-xml or --guest-plan): " + ", ".join(by_id)
        )
    return lines


def text_summary(result: build.Bundle, published: writer.Published) -> str:
    """The ``-o text`` summary: a table, then the unpinned devices and unused plan items."""
    rows = [("DEVICE", "GUEST PCI", "MATCHED BY", "FROM", "TAG")]
    rows += [
        (d.ref, d.guest_pci or "-", d.matched_by or "-", d.origin or "-", d.tag)
        for d in result.devices
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1] for r in rows
    ]
    lines.extend(unpinned_lines(result.unpinned))
    lines.extend(f"unused: {u}" for u in result.unused)
    state = "published" if published.changed else "unchanged"
    pinned = len(result.devices) - len(result.unpinned)
    lines.append(
        f"{state}: {published.root} -> {published.directory.name}; "
        f"{len(result.devices)} devices, {pinned} pinned"
    )
    return "\n".join(lines) + "\n"
