"""``kvdev-host schedule``: place many pods over many nodes like kube-scheduler's DRA plugin.

Reads Kubernetes objects from files, runs the pure scheduler (``kvdev.host.scheduling``)
and prints the placed pods (``spec.nodeName`` set) and the claims it changed (with
``status.allocation`` and ``reservedFor``); a progress bar on stderr when stderr is a
terminal; a summary on stderr at the end. Exit 0 every pod placed, 1 some unschedulable,
2 usage error or invalid input.
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Sequence
from typing import Any, TextIO

import yaml
from pydantic import BaseModel

from kvdev.errors import KvdevError, SchemaError
from kvdev.host.allocation.extended import status_for
from kvdev.host.commands.allocate import add_filter_timeout_argument, filter_clock
from kvdev.host.commands.common import (
    EXIT_INVALID,
    EXIT_OK,
    EXIT_UNSCHEDULABLE,
    GATES,
    Commands,
    Parser,
    add_files_argument,
    parse_feature_gates,
    print_objects,
)
from kvdev.host.commands.inputs import load_files
from kvdev.host.scheduling import Placement, ScheduleResult, schedule

_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

_EPILOG = f"""\
input:
  The objects of 'kvdev-host allocate' (DeviceClass, ResourceSlice, ResourceClaim,
  DeviceTaintRule, Node, Pod) plus ResourceClaimTemplate and scheduling.k8s.io PodGroup.
  Pods without spec.nodeName are placed one after another in input order; pods with
  spec.nodeName are already bound and only use their node's allocatable resources.

placement (as kube-scheduler's DRA plugin filters nodes):
  A pod's claims are its named claims, claims made from its templates (named
  <pod>-<claim>-<5 chars>, the suffix a hash instead of random), its PodGroup's claims
  (spec.schedulingGroup.podGroupName; allocated once for the group, reserved for the
  PodGroup) and the claim for DRA-backed extended resources. A node fits when claims
  already allocated are reachable from it (their nodeSelector), the allocator finds
  devices for all pending claims together on it, and the pod's requests plus what the
  devices declare in nodeAllocatableResources fit the Node's status.allocatable. The first
  fitting node of a scan that starts after the previous pod's node is taken (no scoring).
  Allocations are written back: later pods see the devices and capacity in use.

output:
  The placed pods (spec.nodeName, status.resourceClaimStatuses for template claims) and
  the claims the run allocated or reserved, as -o yaml documents (default) or a -o json
  v1 List, with every field of the input kept. --summary-only prints no objects.
  stderr: a progress bar when it is a terminal, then the summary: pods placed,
  unschedulable pods per reason ("0/N nodes are available: ..."), claims per second.

feature gates (all on by default): {GATES}

examples:
  kvdev-host schedule -f cluster.yaml -f pods.yaml
  kvdev-host schedule -f cluster.yaml -f pods.yaml -o json \\
    | jq -r '.items[] | select(.kind == "Pod") | .spec.nodeName'
  kvdev-host schedule -f state.yaml --summary-only
  kvdev-host schedule -f state.yaml --feature-gates DRAExtendedResource=false

exit status: 0 every pod placed, 1 some pods are unschedulable,
  2 usage error or invalid input (names the object and field).
"""


def register(commands: Commands) -> None:
    """Add ``schedule`` to the ``kvdev-host`` sub-parsers."""
    sub: Parser = commands.add_parser(
        "schedule",
        help="place pods over nodes like kube-scheduler's DRA plugin, allocating their claims",
        description="Place every pod without spec.nodeName on a node, in input order, the way\n"
        "kube-scheduler's DRA plugin filters nodes, and print the placed pods and claims.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_files_argument(sub)
    sub.add_argument(
        "-o", "--output", choices=("yaml", "json"), default="yaml", help="default: yaml"
    )
    sub.add_argument("--summary-only", action="store_true", help="print only the summary (stderr)")
    sub.add_argument(
        "--feature-gates",
        default="",
        metavar="GATE=BOOL,...",
        help="switch allocator features, e.g. DRADeviceTaints=false (all are on by default)",
    )
    sub.add_argument(
        "--no-selector-cache",
        action="store_true",
        help="evaluate CEL selectors afresh for every node checked (for comparison)",
    )
    add_filter_timeout_argument(sub)
    sub.set_defaults(run=_run)


class _Bar:
    """A one-line progress bar, redrawn at most every 1/20 of the run."""

    def __init__(self, err: TextIO) -> None:
        self.err = err
        self.last = -1

    def __call__(self, done: int, total: int) -> None:
        step = max(total // 20, 1)
        if done != total and done // step == self.last:
            return
        self.last = done // step
        filled = 30 * done // max(total, 1)
        self.err.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {done}/{total} pods")
        if done == total:
            self.err.write("\n")
        self.err.flush()


def _full(value: object) -> Any:  # noqa: ANN401 - JSON-shaped data
    """A model as JSON data, with the input fields kvdev does not read.

    ``to_json_dict`` drops those; placed pods and claims keep their images, annotations, ...
    """
    if isinstance(value, BaseModel):
        out: dict[str, Any] = {}
        for name, info in type(value).model_fields.items():
            item = getattr(value, name)
            if item is not None:
                out[info.serialization_alias or info.alias or name] = _full(item)
        out.update(value.__pydantic_extra__ or {})
        return out
    if isinstance(value, list | tuple):
        return [_full(v) for v in value]
    if isinstance(value, dict):
        return {k: _full(v) for k, v in value.items()}
    return value


def _pod_output(p: Placement) -> dict[str, Any]:
    data: dict[str, Any] = _full(p.pod)
    data["spec"]["nodeName"] = p.node
    status: dict[str, Any] = data.setdefault("status", {})
    if p.claim_statuses:
        status["resourceClaimStatuses"] = [
            {"name": name, "resourceClaimName": claim} for name, claim in p.claim_statuses
        ]
    if p.special is not None:
        status.update(status_for(p.special))
    if not status:
        del data["status"]
    return data


def _summary(result: ScheduleResult, seconds: float, err: TextIO) -> None:
    total = len(result.placed) + len(result.unplaced)
    rate = result.allocated_claims / seconds if seconds > 0 else 0.0
    err.write(
        f"kvdev-host: schedule: placed {len(result.placed)} of {total} pods, "
        f"unschedulable {len(result.unplaced)}; {result.allocated_claims} claims allocated "
        f"in {seconds:.2f} s ({rate:.0f} claims/s)\n"
    )
    examples: dict[str, list[str]] = {}
    for u in result.unplaced:
        names = examples.setdefault(u.reason, [])
        if len(names) < 3:
            names.append(f"{u.pod.metadata.namespace or 'default'}/{u.pod.metadata.name}")
    for reason, count in result.reasons().items():
        more = ", ..." if count > len(examples[reason]) else ""
        err.write(f"  {count} unschedulable: {reason} (pods {', '.join(examples[reason])}{more})\n")


def _run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    return run_schedule(
        files=args.files,
        output=args.output,
        summary_only=args.summary_only,
        feature_gates=args.feature_gates,
        selector_cache=not args.no_selector_cache,
        filter_timeout=args.filter_timeout,
        out=out,
        err=err,
    )


def run_schedule(  # noqa: PLR0913 - the command's options, keyword-only
    *,
    files: Sequence[str],
    output: str,
    summary_only: bool,
    feature_gates: str,
    selector_cache: bool,
    out: TextIO,
    err: TextIO,
    filter_timeout: str = "10s",
) -> int:
    """``kvdev-host schedule``; returns the exit status."""
    try:
        clock = filter_clock(filter_timeout)
        features = parse_feature_gates(feature_gates)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            objects = load_files(files)
        err.writelines(f"kvdev-host: warning: {w.message}\n" for w in caught)
    except SchemaError as e:
        err.writelines(f"kvdev-host: schedule: {p}\n" for p in e.problems)
        return EXIT_INVALID
    except KvdevError as e:
        err.write(f"kvdev-host: schedule: {e}\n")
        return EXIT_INVALID
    progress = _Bar(err) if err.isatty() else None
    start = time.perf_counter()
    result = schedule(
        objects,
        features=features,
        selector_cache=selector_cache,
        progress=progress,
        clock=clock,
    )
    seconds = time.perf_counter() - start
    if not summary_only:
        objs = [_pod_output(p) for p in result.placed]
        objs += [_full(c) for c in result.claims]
        if output == "yaml" and objs:
            # libyaml's emitter when available: thousands of objects, ~10x faster.
            out.write(yaml.dump_all(objs, Dumper=_DUMPER, sort_keys=False))
        else:
            print_objects(objs, output, out)
    _summary(result, seconds, err)
    return EXIT_UNSCHEDULABLE if result.unplaced else EXIT_OK
