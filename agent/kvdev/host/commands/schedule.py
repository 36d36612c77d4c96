"""``kvdev-host schedule``: place many pods over many nodes like kube-scheduler's DRA plugin.

Reads Kubernetes objects from files, runs the pure scheduler (``kvdev.host.scheduling``)
and prints the placed pods (``spec.nodeName`` set) and the claims it changed (with
``status.allocation`` and ``reservedFor``); the loading and a progress bar on stderr when
stderr is a terminal (or with ``--progress``); a summary on stderr at the end. With
``--events``, a stream of watch events is replayed after the first placement
(``scheduling.clusterevents``), unschedulable pods retried as the queueing hints say (or all of
them: ``--no-hints``; both: ``--compare``). Exit 0 every pod placed, 1 some unschedulable,
2 usage error or invalid input.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml
from pydantic import BaseModel

from kvdev.errors import KvdevError, Problem, SchemaError, TransientReadError
from kvdev.host.allocation.allocator import Clock
from kvdev.host.allocation.extended import status_for
from kvdev.host.allocation.features import Features
from kvdev.host.commands.allocate import add_filter_timeout_argument, filter_clock
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
from kvdev.host.k8s import K8sObject, load
from kvdev.host.scheduling import (
    ClusterEvent,
    EventRun,
    Placement,
    ScheduleResult,
    replay,
    schedule,
)
from kvdev.host.scheduling.clusterevents import EVENT_TYPES
from kvdev.printable import unescaped

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
  stderr: on a terminal (or with --progress) the files as they load and a progress bar;
  then the summary: pods placed,
  unschedulable pods per reason ("0/N nodes are available: ..."), claims per second.

feature gates (all on by default): {GATES}

events (--events FILE, queueing hints):
  Kubernetes watch events, {{type: ADDED|MODIFIED|DELETED, object: ...}}: JSON values one
  after another as 'kubectl get ... --watch --output-watch-events -o json' prints them, or a
  YAML stream (documents separated by ---, no aliases), replayed in order
  after the first placement: ResourceSlices added, changed, removed; ResourceClaims created,
  changed (an allocation dropped: deallocated), deleted; Pods added (tried at once) and
  deleted (their node resources, template claims and last reservations given back);
  DeviceClasses; Nodes added or changed. After each event the pods waiting in the
  unschedulable queue are retried, in queue order: only those the event can help (queueing
  hints, indexed by the claims, classes and drivers each waits on), or with --no-hints every
  one of them. The summary gives attempts per pod (scheduler_attempts_total) and the time;
  --compare runs both and prints both summaries (the objects are those with hints).

examples:
  kvdev-host schedule -f cluster.yaml -f pods.yaml
  kvdev-host schedule -f cluster.yaml -f pods.yaml --events changes.json --compare
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
    add_output_argument(sub)
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
    sub.add_argument(
        "--events",
        metavar="FILE",
        help="replay a stream of watch events after the first placement (see below)",
    )
    mode = sub.add_mutually_exclusive_group()
    mode.add_argument(
        "--no-hints",
        action="store_true",
        help="with --events: retry every unschedulable pod after every event",
    )
    mode.add_argument(
        "--compare",
        action="store_true",
        help="with --events: replay with and without queueing hints, print both summaries",
    )
    sub.add_argument(
        "--progress",
        action="store_true",
        help="show the loading and placing progress on stderr even when it is no terminal "
        "(default: only on a terminal)",
    )
    add_logging_arguments(sub, "schedule")
    sub.set_defaults(run=_run)


class _Loading:
    """``-f`` files as they are read (stderr): a large input takes half a run to load."""

    def __init__(self, err: TextIO, files: int) -> None:
        self.err, self.files, self.read = err, files, 0
        self.start = time.perf_counter()
        err.write(f"kvdev-host: schedule: loading {files} file argument(s)\n")
        err.flush()

    def __call__(self, path: str, size: int, objects: int) -> None:
        self.read += 1
        took = time.perf_counter() - self.start
        self.err.write(
            f"kvdev-host: schedule: read {path} ({size / 2**20:.1f} MiB): "
            f"{objects} objects so far, {took:.1f} s\n"
        )
        self.err.flush()

    def done(self, objects: int) -> None:
        """The last line: every file loaded."""
        took = time.perf_counter() - self.start
        self.err.write(f"kvdev-host: schedule: loaded {objects} objects in {took:.1f} s\n")
        self.err.flush()


class _Bar:
    """A one-line progress bar, redrawn at most every 1/20 of the run.

    It draws only figures, so its carriage returns go to the terminal as they are.
    """

    def __init__(self, err: TextIO) -> None:
        self.err = unescaped(err)
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
        events=args.events,
        hints="both" if args.compare else "off" if args.no_hints else "on",
        progress=args.progress,
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
    events: str | None = None,
    hints: str = "on",
    progress: bool = False,
) -> int:
    """``kvdev-host schedule``; returns the exit status."""
    show_progress = progress or err.isatty()
    try:
        clock = filter_clock(filter_timeout)
        features = parse_feature_gates(feature_gates)
        loading = _Loading(err, len(files)) if show_progress else None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            objects = load_files(files, loading)
        if loading is not None:
            loading.done(len(objects))
        # The input lives as long as the run: keep the garbage collector from walking it
        # again on every collection (that was half of a big schedule's time).
        gc.freeze()
        err.writelines(f"kvdev-host: warning: {w.message}\n" for w in caught)
        stream = load_events(events) if events else None
    except SchemaError as e:
        err.writelines(f"kvdev-host: schedule: {p}\n" for p in e.problems)
        return EXIT_INVALID
    except KvdevError as e:
        err.write(f"kvdev-host: schedule: {e}\n")
        return EXIT_INVALID
    if stream is not None:
        return _replay(
            objects,
            stream,
            hints=hints,
            features=features,
            clock=clock,
            summary_only=summary_only,
            output=output,
            out=out,
            err=err,
        )
    bar = _Bar(err) if show_progress else None
    start = time.perf_counter()
    result = schedule(
        objects,
        features=features,
        selector_cache=selector_cache,
        progress=bar,
        clock=clock,
    )
    seconds = time.perf_counter() - start
    _print(result, summary_only, output, out)
    _summary(result, seconds, err)
    return EXIT_UNSCHEDULABLE if result.unplaced else EXIT_OK


def _print(result: ScheduleResult, summary_only: bool, output: str, out: TextIO) -> None:
    if summary_only:
        return
    objs = [_pod_output(p) for p in result.placed]
    objs += [_full(c) for c in result.claims]
    if output == "yaml" and objs:
        # libyaml's emitter when available: thousands of objects, ~10x faster.
        out.write(yaml.dump_all(objs, Dumper=_DUMPER, sort_keys=False))
    else:
        print_objects(objs, output, out)


def _replay(  # noqa: PLR0913 - the command's inputs, passed on
    objects: Sequence[K8sObject],
    stream: list[ClusterEvent],
    *,
    hints: str,
    features: Features,
    clock: Clock,
    summary_only: bool,
    output: str,
    out: TextIO,
    err: TextIO,
) -> int:
    runs: list[tuple[str, EventRun, float]] = []
    for mode in ("on", "off") if hints == "both" else (hints,):
        start = time.perf_counter()
        try:
            run = replay(objects, stream, hints=mode == "on", features=features, clock=clock)
        except ValueError as e:
            err.write(f"kvdev-host: schedule: {e}\n")
            return EXIT_INVALID
        runs.append((mode, run, time.perf_counter() - start))
    _print(runs[0][1].result, summary_only, output, out)
    for mode, run, seconds in runs:
        _summary(run.result, seconds, err)
        _event_summary(mode, run, seconds, len(stream), err)
    return EXIT_UNSCHEDULABLE if runs[0][1].result.unplaced else EXIT_OK


def _event_summary(mode: str, run: EventRun, seconds: float, events: int, err: TextIO) -> None:
    tries = list(run.attempts.values()) or [0]
    label = "queueing hints" if mode == "on" else "no hints (every pod on every event)"
    err.write(
        f"kvdev-host: schedule: {label}: {events} events, {sum(run.retried)} retries, "
        f"{run.total_attempts} attempts (scheduler_attempts_total) for {len(run.attempts)} "
        f"pods (mean {sum(tries) / len(tries):.1f}, max {max(tries)}), "
        f"{sum(run.placed_by)} pods placed after an event, {seconds:.2f} s\n"
    )


class _NoAliases(yaml.SafeLoader):
    """A YAML loader that refuses aliases (an event stream needs none; a bomb needs them)."""

    def compose_node(self, parent: Any, index: Any) -> Any:  # noqa: ANN401 - PyYAML's API
        if self.check_event(yaml.AliasEvent):
            raise yaml.YAMLError("YAML aliases are not allowed in an event stream")
        return super().compose_node(parent, index)


def _yaml_stream(text: str) -> list[Any]:
    return list(yaml.load_all(text, Loader=_NoAliases))


def _json_stream(text: str) -> list[Any]:
    """JSON values one after another, as ``kubectl get --watch -o json`` prints them."""
    decoder = json.JSONDecoder()
    out: list[Any] = []
    at = 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            return out
        value, at = decoder.raw_decode(text, at)
        out.append(value)


def load_events(path: str) -> list[ClusterEvent]:
    """The watch events of a file, in order (module docstring).

    Raises:
        SchemaError: not YAML/JSON, not watch events, or an invalid object (all reported).
        TransientReadError: the file could not be read.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise TransientReadError(f"{path}: {e.strerror or e}") from e
    try:
        documents = _json_stream(text) if text.lstrip().startswith("{") else _yaml_stream(text)
    except (yaml.YAMLError, ValueError) as e:
        raise SchemaError([Problem(f"not a YAML/JSON event stream: {e}", path)]) from e
    events: list[ClusterEvent] = []
    problems: list[Problem] = []
    for index, doc in enumerate(d for d in documents if d is not None):
        where = f"{path}: event {index}"
        if not isinstance(doc, dict) or doc.get("type") not in EVENT_TYPES:
            problems.append(Problem(f"type must be one of {', '.join(EVENT_TYPES)}", where))
            continue
        if not isinstance(doc.get("object"), dict):
            problems.append(Problem("object: a Kubernetes object is needed", where))
            continue
        try:
            found = load(json.dumps(doc["object"]), f"{where}: object")
        except SchemaError as e:
            problems.extend(e.problems)
            continue
        if len(found) != 1:
            problems.append(Problem("object: exactly one object kvdev reads is needed", where))
            continue
        events.append(ClusterEvent(doc["type"], found[0]))
    if problems:
        raise SchemaError(problems)
    return events
