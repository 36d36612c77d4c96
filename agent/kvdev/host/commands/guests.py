"""``kvdev-host guests``: per VMI, what its drivers described against what its guest reports.

Reads VMIs and the controller's ``kvdev-<vmi>`` ConfigMaps from the API server (or, with
``-f``, from files), judges each described NIC with the controller's own comparison
(``kvdev.host.controller.guests``: described vs the VMI's ``status.interfaces[]`` from the
guest agent) and prints a table per VMI (text) or one JSON document with a ``state`` per NIC.
Judged now, without the controller's grace; the controller's own verdict (with grace) is its
``kvdev.io/guest`` annotation, printed beside. Exit 0 every NIC Applied or Pending, 1 some NIC
Differs or Unreported, 2 usage error, invalid input or an API failure.
"""

from __future__ import annotations

import argparse
import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from kvdev.errors import KvdevError, Problem, SchemaError
from kvdev.host.commands.common import (
    EXIT_INVALID,
    EXIT_OK,
    FILES_HELP,
    Commands,
    Parser,
    add_kube_api_arguments,
    add_logging_arguments,
    bucket_from,
)
from kvdev.host.commands.inputs import load_files_of
from kvdev.host.contract import CONTROLLER, GUEST_ANNOTATION, MANAGED_BY, configmap_name
from kvdev.host.controller.guests import (
    GuestReport,
    NicReport,
    NicState,
    compare,
    described_nics,
)
from kvdev.host.controller.render import uses_dra
from kvdev.host.k8s.core import ConfigMap
from kvdev.host.k8s.kubevirt import VirtualMachineInstance
from kvdev.host.k8s.load import KUBEVIRT_KINDS

EXIT_NOT_APPLIED = 1
PAGE = 500
CONFIGMAP_PAGE = 10  # ConfigMaps are up to 1 MiB each: a page of them is held whole
_BAD = (NicState.DIFFERS, NicState.UNREPORTED)

_EPILOG = f"""\
what it compares, per VMI that has spec.resourceClaims and a ConfigMap kvdev-<vmi>:
  described  each NIC of the ConfigMap's metadata streams and guest hints (the bundle the
             controller keeps for the guest): its MAC (hints' guest.macAddress, else the
             metadata's networkData.hardwareAddress, else the VMI status's MAC for its
             network), the interface name the hints ask for, its addresses (networkData.ips
             and the hints' network.addresses)
  reported   the VMI's status.interfaces[] entry with that MAC whose infoSource holds
             guest-agent: what qemu-guest-agent in the guest told KubeVirt (interfaceName,
             ipAddresses without prefix length; linkState from the domain)

states (one per NIC; a VMI shows its worst: Differs > Unreported > Pending > Applied):
  Applied     the guest reports the NIC as described
  Differs     it does not, and WHY says what ("10.1.0.5/24 not on the guest's data0", "the
              guest names it eth1, not data0", "the guest's data0 link is down")
  Unreported  no guest-agent data for the MAC: vmi_not_running, no_guest_agent (no entry comes
              from the guest agent: is qemu-guest-agent installed and running in the guest?),
              mac_not_seen (the agent reports other interfaces, not this MAC), mac_unknown (no
              MAC is described for the NIC)
  Pending     described, nothing to apply yet (the driver's deferred metadata, metadata kvdev
              cannot act on). The controller also keeps a NIC Pending for its --guest-grace
              after the VMI starts Running or its metadata changes; this command judges now,
              without grace, and prints the controller's verdict (annotation {GUEST_ANNOTATION})

input: live (default), the in-cluster service account, --kubeconfig FILE or the default
  kubeconfig: lists VirtualMachineInstances (every namespace) and the ConfigMaps labelled
  {MANAGED_BY}={CONTROLLER}
  (every namespace, or -n NAMESPACE's): the controller's read RBAC; -n NAMESPACE keeps that
  namespace's VMIs; VMI names keep those VMIs. -f FILE: read the VMIs and ConfigMaps from
  files instead ('kubectl get vmi,cm -o yaml'); nothing is asked of a cluster.

output: -o text (default): per VMI a line (namespace/name, state, the controller's verdict)
  and a table: NIC (the VMI network, else the device), MAC, STATE, DESCRIBED (name, addresses),
  REPORTED (the guest's name and addresses), WHY. -o json: {{"vmis": [{{"namespace", "name",
  "state", "annotation", "nics": [{{"nic", "device", "network", "mac", "macFrom", "state",
  "reason", "detail", "described": {{"interfaceName", "addresses"}}, "reported":
  {{"interfaceName", "addresses", "linkState", "infoSource"}} or null}}]}}]}}.

examples:
  kvdev-host guests                       every VMI of the cluster
  kvdev-host guests -n vms vm1 -o json    one VMI, as JSON
  kubectl get vmi,cm -n vms -o yaml > vms.yaml && kvdev-host guests -f vms.yaml
  kubectl get cm -A -l {MANAGED_BY}={CONTROLLER} -o custom-columns=\\
'NAMESPACE:.metadata.namespace,NAME:.metadata.name,GUEST:.metadata.annotations.kvdev\\.io/guest'

exit status: 0 every NIC Applied or Pending, 1 some NIC Differs or Unreported, 2 usage error,
  invalid input (names the object and field) or the API server could not be asked.
"""


@dataclass(frozen=True, slots=True)
class Judged:
    """One VMI's NICs judged, and the controller's verdict (its annotation)."""

    vmi: VirtualMachineInstance
    report: GuestReport
    annotation: str | None


def register(commands: Commands) -> None:
    """Add ``guests`` to the ``kvdev-host`` sub-parsers."""
    sub: Parser = commands.add_parser(
        "guests",
        help="per VMI: whether its guest applied the NICs its drivers described",
        description="Per KubeVirt VMI: each NIC its DRA drivers described (the ConfigMap\n"
        "kvdev-<vmi>) against what its guest reports through the guest agent\n"
        "(status.interfaces[]): Applied, Differs, Unreported or Pending, and why.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub.add_argument("vmis", nargs="*", metavar="VMI", help="only these VMIs (names)")
    sub.add_argument("-n", "--namespace", metavar="NAMESPACE", help="only this namespace")
    sub.add_argument("--kubeconfig", type=Path, metavar="FILE", help="live: this kubeconfig file")
    sub.add_argument(
        "-f",
        "--filename",
        dest="files",
        action="append",
        metavar="FILE",
        help=f"read VMIs and ConfigMaps from files, not a cluster: {FILES_HELP}",
    )
    sub.add_argument(
        "-o",
        "--output",
        choices=("text", "json"),
        default="text",
        help="text: a table per VMI; json: one document, a state per NIC (default: text)",
    )
    add_kube_api_arguments(sub)
    add_logging_arguments(sub, "guests")
    sub.set_defaults(run=_run)


def _run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        vmis, configmaps = _from_files(args.files, err) if args.files else _from_cluster(args)
    except KvdevError as e:
        problems = e.problems if isinstance(e, SchemaError) else (str(e),)
        err.writelines(f"kvdev-host guests: {p}\n" for p in problems)
        return EXIT_INVALID
    judged = judge(vmis, configmaps, args.namespace, args.vmis)
    if args.output == "json":
        json.dump(to_json(judged), out, indent=2)
        out.write("\n")
    else:
        out.write(tables(judged))
    if any(n.state in _BAD for j in judged for n in j.report.nics):
        return EXIT_NOT_APPLIED
    return EXIT_OK


def _from_files(
    files: Sequence[str], err: TextIO
) -> tuple[list[VirtualMachineInstance], list[ConfigMap]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        objects = load_files_of(files, KUBEVIRT_KINDS)
    err.writelines(f"kvdev-host: warning: {w.message}\n" for w in caught)
    vmis = [o for o in objects if isinstance(o, VirtualMachineInstance)]
    configmaps = [o for o in objects if isinstance(o, ConfigMap)]
    return vmis, configmaps


def _from_cluster(
    args: argparse.Namespace,
) -> tuple[list[VirtualMachineInstance], list[ConfigMap]]:
    """Every VMI and every controller ConfigMap, listed in pages.

    Raises:
        KvdevError: no configuration, bad flags, the API failed, an object does not parse.
    """
    from kvdev.host.controller.index import Kind, parse  # noqa: PLC0415 - live only
    from kvdev.host.controller.reflector import OWN_SELECTOR, collection  # noqa: PLC0415
    from kvdev.host.kube.wire import KubeApi, configmaps  # noqa: PLC0415

    api = KubeApi.connect(args.kubeconfig, bucket_from(args))
    found: dict[Kind, list[Any]] = {Kind.VMI: [], Kind.CONFIGMAP: []}
    problems: list[Problem] = []
    listed = (
        (Kind.VMI, collection(Kind.VMI), PAGE),
        (Kind.CONFIGMAP, configmaps(OWN_SELECTOR, args.namespace), CONFIGMAP_PAGE),
    )
    for kind, what, limit in listed:
        token: str | None = None
        while True:
            page = api.list_page(what, limit=limit, token=token)
            for item in page.items:
                try:
                    stored = parse(kind, item)  # a ConfigMap's data only where it is ours
                    found[kind].append(
                        stored.model
                        if kind is Kind.VMI
                        else ConfigMap.model_validate(
                            {"apiVersion": "v1", "kind": "ConfigMap", **stored.raw}, strict=True
                        )
                    )
                except SchemaError as e:
                    problems.extend(e.problems)
            token = page.token
            if token is None:
                break
    if problems and not found[Kind.VMI]:
        raise SchemaError(problems)
    return found[Kind.VMI], found[Kind.CONFIGMAP]


def judge(
    vmis: Sequence[VirtualMachineInstance],
    configmaps: Sequence[ConfigMap],
    namespace: str | None = None,
    names: Sequence[str] = (),
) -> list[Judged]:
    """Each DRA-using VMI (of ``namespace``, named in ``names``) with its ConfigMap, judged."""
    by_key = {(c.metadata.namespace or "", c.metadata.name): c for c in configmaps}
    out = []
    for vmi in sorted(vmis, key=lambda v: (v.metadata.namespace or "", v.metadata.name)):
        ns = vmi.metadata.namespace or ""
        if namespace is not None and ns != namespace:
            continue
        if names and vmi.metadata.name not in names:
            continue
        if not uses_dra(vmi):
            continue
        cm = by_key.get((ns, configmap_name(vmi.metadata.name)))
        data = (cm.data or {}) if cm is not None else {}
        annotation = (cm.metadata.annotations or {}).get(GUEST_ANNOTATION) if cm else None
        out.append(Judged(vmi, compare(vmi, described_nics(vmi, data)), annotation))
    return out


def _nic_json(nic: NicReport) -> dict[str, Any]:
    seen = nic.reported
    return {
        "nic": nic.nic.label,
        "device": nic.nic.ref,
        "network": nic.nic.network,
        "mac": nic.nic.mac,
        "macFrom": nic.nic.mac_from or None,
        "state": nic.state.value,
        "reason": nic.reason.value if nic.reason is not None else None,
        "detail": nic.detail,
        "described": {"interfaceName": nic.nic.name, "addresses": list(nic.nic.addresses)},
        "reported": (
            {
                "interfaceName": seen.interface_name,
                "addresses": list(seen.addresses),
                "linkState": seen.link_state,
                "infoSource": seen.info_source,
            }
            if seen is not None
            else None
        ),
    }


def to_json(judged: Sequence[Judged]) -> dict[str, Any]:
    """``{"vmis": [...]}``: a ``state`` per NIC (see the epilog)."""
    return {
        "vmis": [
            {
                "namespace": j.vmi.metadata.namespace,
                "name": j.vmi.metadata.name,
                "state": j.report.state.value if j.report.state is not None else None,
                "annotation": j.annotation,
                "nics": [_nic_json(n) for n in j.report.nics],
            }
            for j in judged
        ]
    }


_COLUMNS = ("NIC", "MAC", "STATE", "DESCRIBED", "REPORTED", "WHY")


def _row(nic: NicReport) -> tuple[str, ...]:
    described = " ".join([*([nic.nic.name] if nic.nic.name else []), *nic.nic.addresses])
    seen = nic.reported
    reported = " ".join([seen.interface_name or "?", *seen.addresses]) if seen is not None else "-"
    why = nic.reason.value + ": " + nic.detail if nic.reason is not None else nic.detail
    return (nic.nic.label, nic.nic.mac or "-", nic.state.value, described or "-", reported, why)


def tables(judged: Sequence[Judged]) -> str:
    """A line and a table per VMI."""
    if not judged:
        return "no VMI with DRA claims found\n"
    blocks = []
    for j in judged:
        state = j.report.state.value if j.report.state is not None else "no NIC described"
        controller = j.annotation or "no verdict yet"
        head = (
            f"{j.vmi.metadata.namespace}/{j.vmi.metadata.name}: {state} (controller: {controller})"
        )
        rows = [_COLUMNS, *(_row(n) for n in j.report.nics)]
        widths = [max(len(r[i]) for r in rows) for i in range(len(_COLUMNS) - 1)]
        lines = [
            "  ".join([*(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)), r[-1]])
            for r in rows
        ]
        blocks.append("\n".join([head, *lines]) + "\n")
    return "\n".join(blocks)


__all__ = ["EXIT_NOT_APPLIED", "Judged", "judge", "register", "tables", "to_json"]
