"""``kvdev-host allocate``: allocate one pod's claims on one node, like the scheduler.

Reads Kubernetes objects from files, splits them into the cluster state (classes, slices,
taint rules, claims already allocated, the node) and the claims to allocate, runs the pure
allocator (``kvdev.host.allocation``) and prints the allocated claims. Exit 0 allocated,
1 does not fit, 2 usage error, invalid input or an allocator error.
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import time
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from kvdev.errors import KvdevError, SchemaError, UsageError
from kvdev.host.allocation.allocator import (
    DEFAULT_FILTER_TIMEOUT,
    Allocated,
    Clock,
    Failed,
    Features,
    allocate,
)
from kvdev.host.allocation.cluster import ClusterState, cluster_state
from kvdev.host.allocation.extended import status_for
from kvdev.host.commands.common import (
    EXIT_INVALID,
    EXIT_OK,
    EXIT_UNSCHEDULABLE,
    GATES,
    Commands,
    Parser,
    add_files_argument,
    add_logging_arguments,
    add_output_argument,
    parse_feature_gates,
    print_objects,
)
from kvdev.host.commands.inputs import load_files
from kvdev.host.k8s import ResourceClaim
from kvdev.host.k8s.claim import AllocationResult

if TYPE_CHECKING:
    from kvdev.host.allocation.explain import RequestReport
    from kvdev.host.k8s.resource import ResourceSlice

_ALLOCATE_EPILOG = f"""\
input:
  YAML or JSON documents (multi-document streams, or 'kind: List' as 'kubectl get -o yaml'
  prints them) of resource.k8s.io/v1 DeviceClass, ResourceSlice, ResourceClaim and
  DeviceTaintRule, and v1 Node and Pod; other kinds are skipped with a warning.
  Extended resources backed by DRA (KEP-5004, gate DRAExtendedResource): a Pod whose
  containers ask for a resource a DeviceClass maps (spec.extendedResourceName, or the
  implicit deviceclass.resource.kubernetes.io/<class>) gets the special claim the scheduler
  would make, <pod>-extended-resources-<hash> with one ExactCount request
  container-<i>-request-<j> per container and resource, allocated with the other claims.
  Pods bound to another node, or whose status already names their claim, are skipped.
  Claims that carry status.allocation are in use: their devices are taken (or, for results
  with a shareID, their consumedCapacity is). All other claims are allocated together on
  NODE, all or nothing, the way the scheduler allocates one pod's claims. NODE must match a
  Node object if any are given (its labels decide nodeSelector slices); with no Node object
  the node has no labels. DeviceTaintRules add their taint to the devices they select.

output:
  The newly allocated claims, as full ResourceClaim objects with status.allocation filled
  as upstream writes it (results, config, nodeSelector). -o yaml (default): one YAML
  document per claim ('---' between them). -o json: a v1 List whose items are the claims.

  With -o json a failure prints {{"reason": KEYWORD, "message": ...}} on stdout as well;
  KEYWORD is 'unschedulable', 'invalid-input', 'usage', or the allocator's error keyword
  (class-not-found, cel-compile-error, cel-runtime-error, cel-cost-limit, too-many-devices,
  invalid-pool, pool-incomplete, constraint-unsatisfiable, feature-disabled, ...), or
  filter-timeout: the search ran longer than --filter-timeout (default 10s, as
  kube-scheduler's DynamicResources filterTimeout; 0 turns the limit off).

  --explain writes to stderr, per claim and request, each device and the first reason it
  is rejected (other-node, pool-incomplete/-invalid/-obsolete, in-use, gated, selector,
  capacity, counters, taint, constraint), judging each device on its own against the
  claims already in use (not against the other picks of this run); then, for every allocated
  device (in use or allocated now) that carries a taint (its slice's, or a DeviceTaintRule's),
  each taint and the claim's toleration that lets it keep the device, or that none does (a
  NoExecute taint nothing tolerates evicts the pods using the device: a VM's launcher pod).

feature gates (all on by default): {GATES}

examples:
  kvdev-host allocate -f cluster.yaml -f claim.yaml --node node-a
  kubectl get deviceclasses,resourceslices,resourceclaims,nodes -A -o yaml > state.yaml
  kvdev-host allocate -f state.yaml --node node-a -o json | jq '.items[].status.allocation'
  kvdev-host allocate -f state.yaml --node node-a --explain
  kvdev-host allocate -f state.yaml --node node-a --feature-gates DRADeviceTaints=false
  kvdev-host allocate -f classes.yaml -f slices.yaml -f pod.yaml --node node-a

exit status: 0 every claim allocated, 1 the claims do not fit on NODE,
  2 usage error, invalid input (names the object and field) or an allocator error.
"""


def register(commands: Commands) -> None:
    """Add ``allocate`` to the ``kvdev-host`` sub-parsers."""
    alloc: Parser = commands.add_parser(
        "allocate",
        help="allocate ResourceClaims on one node like the scheduler's DRA allocator",
        description="Allocate every ResourceClaim without status.allocation together on one\n"
        "node, all or nothing, with the upstream structured-parameters allocator's\n"
        "first-fit search, and print the claims with status.allocation filled.",
        epilog=_ALLOCATE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_files_argument(alloc)
    alloc.add_argument("--node", required=True, metavar="NAME", help="the node to allocate on")
    add_output_argument(alloc)
    alloc.add_argument(
        "--explain",
        action="store_true",
        help="print to stderr, per claim and request, why each device fits or not",
    )
    alloc.add_argument(
        "--feature-gates",
        default="",
        metavar="GATE=BOOL,...",
        help="switch allocator features, e.g. DRADeviceTaints=false (all are on by default)",
    )
    add_filter_timeout_argument(alloc)
    add_logging_arguments(alloc, "allocate")
    alloc.set_defaults(run=_run)


_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m)?\s*\Z")


def parse_duration(text: str) -> float:
    """``10s``, ``500ms``, ``1m`` or a number of seconds -> seconds.

    Raises:
        UsageError: not a duration.
    """
    m = _DURATION.match(text)
    if m is None:
        raise UsageError(f"--filter-timeout: {text!r} is not a duration (10s, 500ms, 1m, 0)")
    return float(m[1]) * {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}[m[2]]


def add_filter_timeout_argument(parser: argparse.ArgumentParser) -> None:
    """``--filter-timeout``: how long one node's allocation may search (also ``schedule``)."""
    parser.add_argument(
        "--filter-timeout",
        default=f"{DEFAULT_FILTER_TIMEOUT:g}s",
        metavar="DURATION",
        help="give up on one node's allocation after this long, like kube-scheduler's "
        f"DynamicResources filterTimeout (default {DEFAULT_FILTER_TIMEOUT:g}s; 0: no limit)",
    )


def filter_clock(text: str) -> Clock:
    """The allocator's clock for ``--filter-timeout`` (the process's monotonic clock).

    Raises:
        UsageError: not a duration.
    """
    return Clock(now=time.monotonic, timeout=parse_duration(text))


def _run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    return run_allocate(
        files=args.files,
        node=args.node,
        output=args.output,
        explain_=args.explain,
        feature_gates=args.feature_gates,
        filter_timeout=args.filter_timeout,
        out=out,
        err=err,
    )


def _claim_output(claim: ResourceClaim, result: AllocationResult) -> dict[str, Any]:
    data = claim.to_json_dict()
    status = data.setdefault("status", {})
    status["allocation"] = result.to_json_dict()
    return data


def _fail(reason: str, message: str, output: str, out: TextIO, err: TextIO, code: int) -> int:
    err.write(f"kvdev-host: allocate: {message}\n")
    if output == "json":
        out.write(json.dumps({"reason": reason, "message": message}) + "\n")
    return code


def _why(reports: Sequence[RequestReport], claims: Sequence[ResourceClaim], node: str) -> str:
    lines = []
    for claim in claims:
        name = claim.metadata.name
        mine = [r for r in reports if r.claim == name]
        parents: dict[str, list[RequestReport]] = {}
        for r in mine:
            parents.setdefault(r.request.split("/", 1)[0], []).append(r)
        for parent, alts in parents.items():
            if any(a.satisfiable for a in alts):
                continue
            best = max(alts, key=lambda a: a.fitting)
            if best.wanted is None or best.fitting == 0:
                lines.append(f"claim {name}: no device fits request {parent}")
            else:
                lines.append(
                    f"claim {name}: only {best.fitting} device(s) fit request {parent}, "
                    f"{best.wanted} wanted"
                )
    if not lines:
        names = ", ".join(c.metadata.name for c in claims)
        lines.append(
            f"claims {names} do not fit together on node {node}: every request has devices "
            "that fit on their own, but not all at once (the same devices wanted twice, "
            "constraints or shared counters); try --explain"
        )
    return "\n".join(lines)


def _notes(notes: Sequence[str]) -> str:
    return "".join(f"note: {n}\n" for n in notes)


def _explanation(reports: Sequence[RequestReport]) -> str:
    from kvdev.host.allocation.explain import REASONS  # noqa: PLC0415 - only with --explain

    lines = []
    for r in reports:
        wanted = "all" if r.wanted is None else str(r.wanted)
        lines.append(
            f"claim {r.claim}, request {r.request} (wants {wanted}): "
            f"{r.fitting} of {len(r.devices)} device(s) fit on their own"
        )
        for d in r.devices:
            why = "fits" if d.reason is None else f"{d.reason}: {REASONS.get(d.reason, '')}"
            detail = f" ({d.detail})" if d.detail else ""
            lines.append(f"  {d.device}: {why}{detail}")
    return "".join(f"{line}\n" for line in lines)


def _read(
    files: Sequence[str], node: str, feature_gates: str, output: str, out: TextIO, err: TextIO
) -> tuple[ClusterState, Features] | int:
    """The cluster state and features, or the exit status after reporting why not."""
    try:
        features = parse_feature_gates(feature_gates)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            objects = load_files(files)
        # The input lives as long as the run: keep the garbage collector from walking it
        # again on every collection (that was half of a big schedule's time).
        gc.freeze()
        err.writelines(f"kvdev-host: warning: {w.message}\n" for w in caught)
        return cluster_state(
            objects, node, extended_resources=features.DRAExtendedResource
        ), features
    except SchemaError as e:
        err.writelines(f"kvdev-host: allocate: {p}\n" for p in e.problems)
        if output == "json":
            message = "; ".join(str(p) for p in e.problems)
            out.write(json.dumps({"reason": "invalid-input", "message": message}) + "\n")
        return EXIT_INVALID
    except KvdevError as e:
        return _fail("usage", str(e), output, out, err, EXIT_INVALID)


def run_allocate(  # noqa: PLR0913 - the command's options, keyword-only
    *,
    files: Sequence[str],
    node: str,
    output: str,
    explain_: bool,
    feature_gates: str,
    out: TextIO,
    err: TextIO,
    filter_timeout: str = f"{DEFAULT_FILTER_TIMEOUT:g}s",
) -> int:
    """``kvdev-host allocate``; returns the exit status."""
    try:
        clock = filter_clock(filter_timeout)
    except UsageError as e:
        return _fail("usage", str(e), output, out, err, EXIT_INVALID)
    read = _read(files, node, feature_gates, output, out, err)
    if isinstance(read, int):
        return read
    state, features = read
    if not state.pending:
        err.write("kvdev-host: allocate: no claim without status.allocation: nothing to do\n")
        if explain_:
            err.write(_taints(state.in_use, state.slices))
        print_objects([], output, out)
        return EXIT_OK
    inputs: dict[str, Any] = {
        "classes": state.classes,
        "slices": state.slices,
        "allocated_devices": state.allocated_devices,
        "allocated_capacity": state.allocated_capacity,
        "features": features,
    }
    outcome = allocate(state.node, state.pending, clock=clock, **inputs)
    if isinstance(outcome, Failed):
        err.write(_notes(outcome.notes))
        return _fail(outcome.keyword, outcome.message, output, out, err, EXIT_INVALID)
    inputs["clock"] = clock  # the explanation's pass is bounded as the allocation was
    reports = _reports(state, inputs) if explain_ else None
    if reports is not None:
        err.write(_explanation(reports))
    if isinstance(outcome, Allocated):
        if reports is not None:
            err.write(_notes(outcome.notes))
            done = [
                ResourceClaim.model_validate(_claim_output(c, outcome.results[c.metadata.name]))
                for c in state.pending
            ]
            err.write(_taints([*state.in_use, *done], state.slices))
        _print_allocated(state, outcome, output, out, err)
        return EXIT_OK
    notes = list(outcome.notes)
    if outcome.stopped:
        notes.append(
            f"the search stopped before trying every combination: {outcome.stopped} (upstream's "
            "tries them all and comes to the same answer)"
        )
    err.write(_notes(notes))
    why = _why(reports or _reports(state, inputs), state.pending, node)
    return _fail("unschedulable", why, output, out, err, EXIT_UNSCHEDULABLE)


def _taints(claims: Sequence[ResourceClaim], slices: Sequence[ResourceSlice]) -> str:
    """``--explain``'s lines on the taints of the allocated devices, and what tolerates them."""
    from kvdev.host.allocation.taints import allocated_taints, taints_text  # noqa: PLC0415

    return taints_text(allocated_taints(claims, slices))


def _reports(state: ClusterState, inputs: dict[str, Any]) -> list[RequestReport]:
    from kvdev.host.allocation.explain import explain  # noqa: PLC0415 - not on the fast path

    return explain(state.node, state.pending, **inputs)


def _print_allocated(
    state: ClusterState, outcome: Allocated, output: str, out: TextIO, err: TextIO
) -> None:
    for special in state.special:
        pod = special.pod.metadata
        err.write(
            f"kvdev-host: allocate: pod {pod.namespace or 'default'}/{pod.name}: "
            f"extended resources in claim {special.claim.metadata.name}; status "
            f"{json.dumps(status_for(special), separators=(',', ':'))}\n"
        )
    print_objects(
        [_claim_output(c, outcome.results[c.metadata.name]) for c in state.pending],
        output,
        out,
    )
