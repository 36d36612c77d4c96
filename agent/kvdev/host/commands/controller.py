"""``kvdev-host controller``: keep every DRA-using VMI's guest bundle in a ConfigMap.

Live (default): watch VMIs, virt-launcher pods, ResourceClaims, ResourceSlices, the
controller's own ConfigMaps and the relay records of ``--relay-namespace`` only, and create or
update each VMI's ConfigMap
(``kvdev.host.controller.live``), under a Lease when ``--leader-elect``, recording Events on
the VMIs and serving ``/healthz``, ``/readyz``, ``/leader``, ``/metrics`` on
``--http-address``. ``--once -f FILE...``: the same index and renderer over objects read
from files; prints what it would apply and changes nothing. Exit 0 ok (live: stopped by
SIGTERM/SIGINT), 1 some VMI's bundle could not be rendered (--once) or the controller cannot
go on (live: lost its lease, API unusable, the --http-address cannot be listened on), 2 usage
error or invalid input.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import threading
import uuid
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

import yaml

from kvdev.errors import KvdevError, Problem, SchemaError, Severity, UsageError
from kvdev.host.commands.common import (
    EXIT_INVALID,
    EXIT_OK,
    FILES_HELP,
    Commands,
    Parser,
    add_kube_api_arguments,
    add_logging_arguments,
    add_output_argument,
    bucket_from,
    own_namespace,
    print_objects,
)
from kvdev.host.commands.inputs import load_files_of
from kvdev.host.contract import CONTROLLER, HINTS_KEY, MANAGED_BY, RELAY, configmap_name
from kvdev.host.controller.guestwatch import GRACE_SECONDS
from kvdev.host.controller.index import CONFIGMAPS, Index, Kind, Stored
from kvdev.host.controller.render import Rendered, Verb, render
from kvdev.host.controller.workqueue import WORKERS
from kvdev.host.k8s import Pod, ResourceClaim, ResourceSlice
from kvdev.host.k8s.core import ConfigMap
from kvdev.host.k8s.kubevirt import VirtualMachineInstance
from kvdev.host.k8s.load import KUBEVIRT_KINDS

if TYPE_CHECKING:
    from kvdev.host.controller.election import LeaseElector
    from kvdev.host.controller.endpoints import Endpoints
    from kvdev.host.controller.live import Controller
    from kvdev.host.kube.wire import KubeApi

GRACE_MAX = 86400.0  # a day: a grace longer than that hides what it is meant to show
EXIT_NOT_RENDERED = 1
EXIT_CANNOT_RUN = 1
DEFAULT_RELAY_NAMESPACE = "kvdev-system"
_SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

_EPILOG = """\
Per VMI with spec.resourceClaims: ConfigMap kvdev-<vmi> in its namespace, owned by the VMI,
holding one KEP-5304 stream per claim request (the driver's own file when the node relay has
it, else rebuilt from claim status and slices) and guest-hints.json. Its names, keys, labels,
Events and endpoints: docs/reference/controller.md.

--once: render from -f files ('kubectl get -o yaml' shapes: VMIs, virt-launcher pods,
  ResourceClaims, ResourceSlices, existing ConfigMaps, relay records); print what it would
  create or update, one line per VMI on stderr; change nothing.
live: in-cluster service account, --kubeconfig FILE, or the default kubeconfig;
  --retry-period < --renew-deadline < --lease-duration (2 < 10 < 15 s).
guests (live): each sync judges whether the guest applied the NICs it describes, from the
  VMI's status.interfaces[] (qemu-guest-agent): Applied, Differs, Unreported or Pending (within
  --guest-grace after the VMI starts Running or its metadata changes); annotation
  kvdev.io/guest on the ConfigMap, GuestNIC<state> Events, kvdev_controller_guest_* metrics.
  The VMI's status is never written. kvdev-host guests prints it per NIC.

examples:
  kubectl get vmi,pods,resourceclaims,configmaps -n vms -o yaml > ns.yaml
  kubectl get resourceslices -o yaml > slices.yaml
  kvdev-host controller --once -f ns.yaml -f slices.yaml
  kvdev-host controller --once -f ns.yaml -f slices.yaml -o json | kubectl apply -f -
  kvdev-host controller --leader-elect --lease-namespace kvdev-system --http-address :8080
  kubectl get events -n vms --field-selector involvedObject.name=vm1

exit status: 0 ok (live: stopped by SIGTERM/SIGINT), 1 a VMI's bundle could not be rendered
  (--once; the others are still printed) or the controller cannot go on (live: lost its lease),
  2 usage error or invalid input (names the object and field).
"""


def register(commands: Commands) -> None:
    """Add ``controller`` to the ``kvdev-host`` sub-parsers."""
    sub: Parser = commands.add_parser(
        "controller",
        help="keep each DRA-using VMI's guest bundle in a ConfigMap (or --once: print it)",
        description="Keep, for every KubeVirt VMI that uses DRA, a ConfigMap holding its guest\n"
        "bundle: the KEP-5304 metadata streams of its claims and kvdev guest hints.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub.add_argument(
        "--once", action="store_true", help="render from -f files, print, change nothing"
    )
    sub.add_argument(
        "-f",
        "--filename",
        dest="files",
        action="append",
        metavar="FILE",
        help=f"with --once: {FILES_HELP}",
    )
    add_output_argument(sub)
    sub.add_argument("--kubeconfig", type=Path, metavar="FILE", help="live: this kubeconfig file")
    sub.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="live: lead through a Lease before writing (for more than one replica)",
    )
    sub.add_argument(
        "--lease-namespace",
        metavar="NS",
        default=os.environ.get("POD_NAMESPACE") or None,
        help="the Lease's namespace (default: $POD_NAMESPACE, else the service account's)",
    )
    sub.add_argument(
        "--relay-namespace",
        metavar="NS",
        default=os.environ.get("POD_NAMESPACE") or None,
        help="where the node relays' records are trusted (default: $POD_NAMESPACE, else the "
        f"service account's, else {DEFAULT_RELAY_NAMESPACE}); records elsewhere are ignored",
    )
    sub.add_argument(
        "--lease-name", default=CONTROLLER, metavar="NAME", help=f"(default: {CONTROLLER})"
    )
    sub.add_argument(
        "--identity",
        default=os.environ.get("POD_NAME") or None,
        metavar="ID",
        help="the holder identity in the Lease (default: $POD_NAME, else host name + random)",
    )
    sub.add_argument(
        "--resync",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="live: render every VMI again this often, writing only changes (default: 600)",
    )
    sub.add_argument(
        "--workers",
        type=int,
        default=WORKERS,
        metavar="N",
        help="live: sync this many VMIs at once, never one VMI twice at once; all share "
        f"--kube-api-qps (default: {WORKERS})",
    )
    sub.add_argument(
        "--guest-grace",
        type=float,
        default=GRACE_SECONDS,
        metavar="SECONDS",
        help="live: a guest's NICs are Pending, not Differs or Unreported, this long after its "
        f"VMI starts Running or its metadata changes (default: {GRACE_SECONDS:g})",
    )
    sub.add_argument(
        "--lease-duration",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="live: a candidate takes a Lease not renewed for this long (default: 15)",
    )
    sub.add_argument(
        "--renew-deadline",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="live: the leader stops (exit 1) when it could not renew for this long (default: 10)",
    )
    sub.add_argument(
        "--retry-period",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="live: how often to renew the Lease, or try to take it (default: 2)",
    )
    sub.add_argument(
        "--http-address",
        default="0",
        metavar="HOST:PORT",
        help="live: serve /healthz, /readyz, /leader and /metrics there (':8080': every "
        "address, port 8080; '127.0.0.1:0': a free port, logged); '0' or '' (default): no server",
    )
    add_kube_api_arguments(sub)
    add_logging_arguments(sub, "controller")
    sub.set_defaults(run=_run)


def _run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.once:
        if not args.files:
            err.write("kvdev-host controller: --once needs -f FILE\n")
            return EXIT_INVALID
        return run_once(args.files, args.output, out, err, _relay_namespace(args))
    if args.files:
        err.write("kvdev-host controller: -f needs --once\n")
        return EXIT_INVALID
    return _run_live(args, err)


# --------------------------------------------------------------------------- --once


def _relay_namespace(args: argparse.Namespace) -> str:
    return own_namespace(args.relay_namespace, DEFAULT_RELAY_NAMESPACE)


def index_of_files(
    files: Sequence[str], err: TextIO, relay_namespace: str = DEFAULT_RELAY_NAMESPACE
) -> Index:
    """The controller's index filled from object files (other kinds warned about).

    Raises:
        SchemaError, TransientReadError: a file cannot be read or holds an invalid object.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        objects = load_files_of(files, KUBEVIRT_KINDS)
    err.writelines(f"kvdev-host: warning: {w.message}\n" for w in caught)
    kinds: list[tuple[type[Any], Kind]] = [
        (VirtualMachineInstance, Kind.VMI),
        (Pod, Kind.POD),
        (ResourceClaim, Kind.CLAIM),
        (ResourceSlice, Kind.SLICE),
        (ConfigMap, Kind.CONFIGMAP),
        (ConfigMap, Kind.RECORD),
    ]
    index = Index(relay_namespace)
    for model, kind in kinds:
        items = [
            Stored(o, o.to_json_dict() if kind in CONFIGMAPS else {})
            for o in objects
            if isinstance(o, model) and (kind is Kind.RECORD) == _is_record(o, relay_namespace)
        ]
        index.replace(kind, items)
    return index


def _is_record(obj: object, relay_namespace: str) -> bool:
    """A node relay's record: a ConfigMap with the relay's label in the relay's namespace."""
    if not isinstance(obj, ConfigMap) or obj.metadata.namespace != relay_namespace:
        return False
    return (obj.metadata.labels or {}).get(MANAGED_BY) == RELAY


def describe(result: Rendered) -> str:
    """One line for a person: the verb, the ConfigMap and what it holds."""
    where = f"ConfigMap {result.namespace}/{result.name}"
    held = f"{result.streams} stream(s) + {HINTS_KEY}" if result.data else ""
    if result.verb is Verb.REFUSE:
        return f"{result.vmi}: refused: {where} ({len(result.errors)} error(s))"
    return f"{result.vmi}: {result.verb.value} {where}" + (f" ({held})" if held else "")


def report(results: Sequence[Rendered], err: TextIO, prefix: str) -> None:
    """Each VMI's line, then its problems."""
    for result in results:
        err.write(f"{prefix}: {describe(result)}\n")
        for problem in result.problems:
            label = "error" if problem.severity is Severity.ERROR else "warning"
            err.write(f"{prefix}: {label}: {problem}\n")


class _LiteralDumper(yaml.SafeDumper):
    """YAML with multi-line strings (the JSON streams) as literal blocks."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_LiteralDumper.add_representer(str, _str)


def print_configmaps(bodies: Sequence[dict[str, Any]], output: str, out: TextIO) -> None:
    """-o json: a v1 List; -o name; -o yaml: one document each, streams as literal blocks."""
    if output in {"json", "name"}:
        print_objects(bodies, output, out)
    elif bodies:
        out.write(yaml.dump_all(bodies, Dumper=_LiteralDumper, sort_keys=False, width=1 << 16))


def _render_one(index: Index, key: tuple[str, str]) -> Rendered:
    """The VMI's decision; whatever goes wrong with one VMI is its refusal, not the run's end."""
    try:
        inputs = index.inputs(key)
        assert inputs is not None
        return render(inputs)
    except Exception as e:  # one VMI never stops the others
        logging.getLogger("kvdev.host.controller").debug("%s/%s", *key, exc_info=True)
        problem = Problem(f"could not be rendered: {type(e).__name__}: {e}")
        name = f"{key[0]}/{key[1]}"
        return Rendered(name, key[0], configmap_name(key[1]), Verb.REFUSE, problems=(problem,))


def run_once(
    files: Sequence[str],
    output: str,
    out: TextIO,
    err: TextIO,
    relay_namespace: str = DEFAULT_RELAY_NAMESPACE,
) -> int:
    """``--once``: render every VMI of the files; print what would be applied."""
    prefix = "kvdev-host controller"
    try:
        index = index_of_files(files, err, relay_namespace)
        if index.count(Kind.VMI) == 0:
            raise SchemaError([Problem("no VirtualMachineInstance in the input files")])
    except KvdevError as e:
        problems = e.problems if isinstance(e, SchemaError) else (str(e),)
        err.writelines(f"{prefix}: {p}\n" for p in problems)
        return EXIT_INVALID
    results = [_render_one(index, key) for key in index.vmis()]
    report(results, err, prefix)
    bodies = [r.body for r in results if r.body is not None]
    print_configmaps(bodies, output, out)
    return EXIT_NOT_RENDERED if any(r.errors for r in results) else EXIT_OK


# --------------------------------------------------------------------------- live


def _identity(args: argparse.Namespace) -> str:
    if args.identity:
        return str(args.identity)
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def _lease_namespace(args: argparse.Namespace) -> str | None:
    if args.lease_namespace:
        return str(args.lease_namespace)
    try:
        return _SA_NAMESPACE.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def _lease_timing(args: argparse.Namespace) -> str | None:
    """What is wrong with the leader-election durations, if anything."""
    retry, renew, lease = args.retry_period, args.renew_deadline, args.lease_duration
    if not 0 < retry < renew < lease:
        return (
            f"--retry-period ({retry:g}) must be positive and less than --renew-deadline "
            f"({renew:g}), which must be less than --lease-duration ({lease:g})"
        )
    return None


def _settings_error(args: argparse.Namespace) -> str | None:
    """A usage error in the live settings, naming the flag."""
    if args.resync <= 0:
        return "--resync must be positive"
    if args.workers < 1:
        return f"--workers must be at least 1, not {args.workers}"
    if not 0 <= args.guest_grace <= GRACE_MAX:
        return f"--guest-grace must be between 0 and {GRACE_MAX:g} seconds"
    timing = _lease_timing(args)
    if timing is not None:
        return timing
    from kvdev.host.controller.endpoints import parse_address  # noqa: PLC0415 - live only

    try:
        parse_address(args.http_address)
    except ValueError as e:
        return f"--http-address: {e}"
    return None


def _run_live(args: argparse.Namespace, err: TextIO) -> int:
    from kvdev.host.kube.wire import KubeApi  # noqa: PLC0415 - live only

    log = logging.getLogger("kvdev.host.controller")
    problem = _settings_error(args)
    if problem is not None:
        err.write(f"kvdev-host controller: {problem}\n")
        return EXIT_INVALID
    identity = _identity(args)
    try:
        elector = lease_elector(args, identity)
        # one connection per watched kind, per worker, the Event sender and a spare
        connections = len(Kind) + args.workers + 2
        api = KubeApi.connect(args.kubeconfig, bucket_from(args), connections=connections)
    except KvdevError as e:
        err.write(f"kvdev-host controller: {e}\n")
        return EXIT_INVALID
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("%s: stopping", signal.Signals(signum).name)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    try:
        controller, endpoints = _assemble(api, args, identity)
    except KvdevError as e:
        err.write(f"kvdev-host controller: {e}\n")
        return EXIT_CANNOT_RUN
    try:
        status = controller.run(stop, elector=elector)
    finally:
        if endpoints is not None:
            endpoints.close()
    return EXIT_OK if status else EXIT_CANNOT_RUN


def lease_elector(args: argparse.Namespace, identity: str) -> LeaseElector | None:
    """The Lease's elector with its own client (``lease_client``); None without --leader-elect.

    Raises:
        UsageError: no namespace for the Lease, or bad rate-limit flags.
        PermanentError: no configuration can be loaded.
    """
    from kvdev.host.controller.election import Lease, LeaseElector  # noqa: PLC0415 - live only

    if not args.leader_elect:
        return None
    namespace = _lease_namespace(args)
    if namespace is None:
        raise UsageError("--leader-elect needs --lease-namespace")
    return LeaseElector(
        Lease(namespace, args.lease_name),
        identity,
        lease_seconds=args.lease_duration,
        renew_seconds=args.renew_deadline,
        retry_seconds=args.retry_period,
        api=lease_client(args),
    )


def lease_client(args: argparse.Namespace) -> KubeApi:
    """The Lease's own client, as client-go's leader election makes one (``NewFromKubeconfig``).

    Its own token bucket of the same ``--kube-api-qps``/``--kube-api-burst``, so the watches'
    lists and Events never queue a renewal, and requests that time out after half the renew
    deadline (at least 1 s), so one hung request cannot use up the deadline.

    Raises:
        PermanentError: no configuration can be loaded.
        UsageError: bad rate-limit flags.
    """
    from kvdev.host.controller.election import request_timeout  # noqa: PLC0415 - live only
    from kvdev.host.kube.wire import KubeApi  # noqa: PLC0415

    timeout = request_timeout(args.renew_deadline)
    return KubeApi.connect(args.kubeconfig, bucket_from(args), timeout=timeout)


def _assemble(
    api: KubeApi, args: argparse.Namespace, identity: str
) -> tuple[Controller, Endpoints | None]:
    """The controller with its metrics and Event recorder, and its HTTP endpoints (serving).

    Raises:
        PermanentError: the --http-address cannot be listened on.
    """
    from kvdev.host.controller.endpoints import Endpoints, Probes, parse_address  # noqa: PLC0415
    from kvdev.host.controller.live import Controller  # noqa: PLC0415
    from kvdev.host.controller.metrics import CONTENT_TYPE, Metrics  # noqa: PLC0415
    from kvdev.host.controller.recorder import Recorder  # noqa: PLC0415
    from kvdev.host.controller.vmievents import Correlator  # noqa: PLC0415

    metrics = Metrics()
    recorder = Recorder(api, Correlator(CONTROLLER, identity), metrics)
    controller = Controller(
        api,
        resync=args.resync,
        workers=args.workers,
        metrics=metrics,
        recorder=recorder,
        relay_namespace=_relay_namespace(args),
        guest_grace=args.guest_grace,
    )
    address = parse_address(args.http_address)
    if address is None:
        return controller, None
    probes = Probes(
        controller.healthz, controller.readyz, controller.leader, metrics.exposition, CONTENT_TYPE
    )
    endpoints = Endpoints(address, probes)
    endpoints.start()
    return controller, endpoints
