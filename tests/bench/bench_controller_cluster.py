"""``kvdev-host controller`` against the real v1.37.2 API server: 1,000 and 10,000 VMIs.

Reports, never asserts: ``.venv/bin/python tests/bench/bench_controller_cluster.py
[--sizes 1000,10000] [--changes 1000] [--workers N] [--baseline TREE] [--profile DIR]
[--gil] [--tracemalloc]`` (``make bench-controller``). With ``--baseline TREE`` (a checkout,
e.g. a worktree of main) each size is measured first with TREE's controller (its ``agent/``
first on ``PYTHONPATH``), then with this tree's, each on a fresh control plane: side by side on
the same machine.

For each size N, on a fresh control plane (``tests/cluster/controlplane.py``): one Node, N
ResourceClaims each allocated one VF (the allocation written as the scheduler would, through
the status subresource) from ResourceSlices of 128 VFs, and N VMIs each naming its claim. Then:

* **start**: ``kvdev-host controller`` started (a process, admin kubeconfig) -> every
  ``kvdev-<vmi>`` ConfigMap written (seen by one watch on the namespace's ConfigMaps);
* **change**: ``--changes`` claims, one at a time, get ``status.devices[].networkData``; the
  time from the PATCH's answer to the ConfigMap's watch event carrying the new address: p50,
  p99, max;
* **requests per change**: the API server's own ``apiserver_request_total`` for configmaps
  (every verb but WATCH), before and after the changes, over the number of changes;
* **RSS** of the controller process (``VmRSS``) once every ConfigMap is written;
* **syncs**: the controller's own ``kvdev_controller_configmap_renders_total`` and its
  ``configmap_writes_total{result="unchanged"}`` when every ConfigMap is written and after the
  changes (how much work was still queued when the ConfigMaps were all there);
* **load**: the machine's 1-minute load average when the start began and when it ended;
* **Events**: the API server's count of requests on Events during the start (the controller's
  ``ConfigMapCreated``, one per VMI unless its spam filter held them back);
* **after the first**: when the first ConfigMap appeared, the writes/s from it to the last, and
  the controller's cores over that window (its lists and parses are done by then);
* **cores**: CPU seconds over wall seconds during the start, of the controller and of the
  control plane (etcd, kube-apiserver, its controller-manager and scheduler), and of the
  control plane during client-go's run at the same concurrency;
* **against client-go**: right after the start, on the same control plane, client-go (the
  release kvdev targets: ``build/upstream/bin/configmapwriter``) creates N ConfigMaps of the
  size of one of the controller's (its JSON body, as the controller sends it) in a namespace
  of its own, with as many concurrent writers as the controller has workers and again with 16,
  no client rate limit: writes/s of each, and the controller's over the whole start (process
  start to the last ConfigMap) as a ratio to the baseline's at the same concurrency.

``--profile DIR``: py-spy (``pip install py-spy``) samples the controller from its start until
every ConfigMap is written (100 Hz, without stopping it); the folded stacks go to
``DIR/controller-<N>.txt`` and the top entries (own time, and time including callees) are
printed; with ``--gil``, only the thread holding the GIL is sampled (Python's own CPU: a thread
waiting for the API server, or for the GIL, is not). ``--tracemalloc``: after the measured
process, the same controller runs inside this process under tracemalloc (25 frames) on the
same control plane until it has synced every VMI (the ConfigMaps exist: nothing is written),
and the allocations it still holds are printed by line, largest first.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "cluster"))

from controlplane import Cluster, build  # noqa: E402
from crds import install  # noqa: E402

NS = "bench"
DRIVER = "sriov.bench.example.com"
PER_SLICE = 128
NODE = "bench-node"
KVDEV_HOST = Path(sys.executable).with_name("kvdev-host")
PY_SPY = Path(sys.executable).with_name("py-spy")
WRITER = REPO / "build" / "upstream" / "bin" / "configmapwriter"
DEFAULT_WORKERS = 4  # the controller's --workers default (controller/workqueue.py)
CEILING_WRITERS = 16  # the baseline again with this many writers: the API server's ceiling
# A configmap's metadata the API server sets: not part of what the controller sends.
SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")


def _client(cluster: Cluster) -> Any:
    from kubernetes import client, config  # noqa: PLC0415

    api = config.new_client_from_config(str(cluster.kubeconfig))
    api.configuration.connection_pool_maxsize = 16
    return client, api


def populate(cluster: Cluster, n: int) -> None:
    """Node, slices, N allocated claims and N VMIs (8 client threads)."""
    client, api = _client(cluster)
    core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
    custom = client.CustomObjectsApi(api)
    core.create_namespace({"metadata": {"name": NS}})
    for s in range((n + PER_SLICE - 1) // PER_SLICE):
        devices = [
            {
                "name": f"vf-{i}",
                "attributes": {"resource.kubernetes.io/pciBusID": {"string": _pci(i)}},
            }
            for i in range(s * PER_SLICE, min(n, (s + 1) * PER_SLICE))
        ]
        pool = {
            "name": NODE,
            "generation": 1,
            "resourceSliceCount": (n + PER_SLICE - 1) // PER_SLICE,
        }
        spec = {"driver": DRIVER, "pool": pool, "nodeName": NODE, "devices": devices}
        resource.create_resource_slice({"metadata": {"name": f"bench-{s}"}, "spec": spec})

    def one(i: int) -> None:
        name = f"vm-{i}"
        request = {"name": "nic", "exactly": {"deviceClassName": "vf"}}
        claim = {"metadata": {"name": f"{name}-nic"}, "spec": {"devices": {"requests": [request]}}}
        resource.create_namespaced_resource_claim(NS, claim)
        result = {"request": "nic", "driver": DRIVER, "pool": NODE, "device": f"vf-{i}"}
        status = {"status": {"allocation": {"devices": {"results": [result]}}}}
        resource.patch_namespaced_resource_claim_status(f"{name}-nic", NS, status)
        vmi = {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": name},
            "spec": {
                "resourceClaims": [{"name": "nic", "resourceClaimName": f"{name}-nic"}],
                "networks": [
                    {"name": "data", "resourceClaim": {"claimName": "nic", "requestName": "nic"}}
                ],
                "domain": {"devices": {"interfaces": [{"name": "data", "sriov": {}}]}},
            },
        }
        custom.create_namespaced_custom_object(
            "kubevirt.io", "v1", NS, "virtualmachineinstances", vmi
        )

    with ThreadPoolExecutor(8) as pool_:
        list(pool_.map(one, range(n)))


def _pci(i: int) -> str:
    return f"0000:{i // 256 % 256:02x}:{i // 8 % 32:02x}.{i % 8}"


class Follower:
    """One watch on the namespace's ConfigMaps: which exist (ours), when each address appeared."""

    def __init__(self, core: Any) -> None:
        from kubernetes import watch  # noqa: PLC0415

        self.core = core
        self.names: set[str] = set()
        self.seen: dict[str, float] = {}
        self.cond = threading.Condition()
        self.stream = watch.Watch()
        self.stopped = False
        self.rv = core.list_namespaced_config_map(NS, limit=1).metadata.resource_version
        threading.Thread(target=self._follow, daemon=True).start()

    def _follow(self) -> None:
        try:
            self._events()
        except Exception:  # the stream is cut when the bench stops it
            if not self.stopped:
                raise

    def _events(self) -> None:
        for event in self.stream.stream(
            self.core.list_namespaced_config_map,
            NS,
            resource_version=self.rv,
            label_selector="app.kubernetes.io/managed-by",
            timeout_seconds=3600,
        ):
            obj = event["object"]
            blob = "".join((obj.data or {}).values())
            now = time.monotonic()
            with self.cond:
                self.names.add(obj.metadata.name)
                for ip in re.findall(r"10\.200\.\d+\.\d+/32", blob):
                    self.seen.setdefault(ip, now)
                self.cond.notify_all()

    def wait(self, done: Any, guard: float = 3600) -> bool:
        with self.cond:
            return bool(self.cond.wait_for(lambda: done(self), timeout=guard))


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) ``pid`` has used (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def plane_cpu_s(cluster: Cluster) -> float:
    """CPU seconds the control plane's processes (etcd, kube-apiserver ...) have used."""
    return sum(cpu_s(p.pid) for p in cluster.procs.values() if p.poll() is None)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def configmap_requests(cluster: Cluster, resource: str = "configmaps") -> int:
    """The API server's count of requests on ``resource`` (every verb but WATCH)."""
    with cluster.urlopen(f"{cluster.server}/metrics") as answer:
        text = answer.read().decode()
    total = 0
    for line in text.splitlines():
        ours = line.startswith("apiserver_request_total{") and f'resource="{resource}"' in line
        if ours and 'verb="WATCH"' not in line:
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def controller_metrics(port: int) -> dict[str, float]:
    """renders and unchanged writes, from the controller's own /metrics."""
    import urllib.request  # noqa: PLC0415

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    out = {"renders": 0.0, "unchanged": 0.0}
    for line in text.splitlines():
        if line.startswith("kvdev_controller_configmap_renders_total "):
            out["renders"] = float(line.split()[-1])
        elif line.startswith('kvdev_controller_configmap_writes_total{result="unchanged"}'):
            out["unchanged"] = float(line.split()[-1])
    return out


def _load() -> float:
    return round(os.getloadavg()[0], 1)


def body_bytes(cluster: Cluster, name: str) -> int:
    """The JSON body the controller sends for ConfigMap ``name`` (as the stored one, less
    what the API server sets), in bytes: the Python client's ``json.dumps``."""
    url = f"{cluster.server}/api/v1/namespaces/{NS}/configmaps/{name}"
    with cluster.urlopen(url) as answer:
        stored = json.loads(answer.read())
    meta = stored.get("metadata") or {}
    for key in SERVER_FIELDS:
        meta.pop(key, None)
    stored.update({"apiVersion": "v1", "kind": "ConfigMap"})
    return len(json.dumps(stored).encode())


def client_go(cluster: Cluster, n: int, writers: int, size: int) -> dict[str, Any]:
    """client-go creating ``n`` ConfigMaps of ``size`` bytes with ``writers`` writers."""
    namespace = f"baseline-{writers}"
    done = subprocess.run(
        [
            str(WRITER),
            f"--kubeconfig={cluster.kubeconfig}",
            f"--namespace={namespace}",
            f"--count={n}",
            f"--writers={writers}",
            f"--bytes={size}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"configmapwriter: {done.stderr.strip()}")
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def against_client_go(cluster: Cluster, n: int, concurrency: int, size: int) -> dict[str, Any]:
    """client-go's writes/s at ``concurrency`` and at 16; the control plane's cores meanwhile."""
    load = _load()
    plane_before = plane_cpu_s(cluster)
    began = time.monotonic()
    same = client_go(cluster, n, concurrency, size)
    wall = time.monotonic() - began
    plane = plane_cpu_s(cluster) - plane_before
    ceiling = client_go(cluster, n, CEILING_WRITERS, size)
    print(f"client-go, {n} ConfigMaps: {json.dumps([same, ceiling])}", flush=True)
    return {
        f"client_go_{concurrency}_writes_per_s": round(same["writes_per_s"], 1),
        f"client_go_{CEILING_WRITERS}_writes_per_s": round(ceiling["writes_per_s"], 1),
        "load_client_go": f"{load}-{_load()}",
        "plane_cores_client_go": round(plane / wall, 2),
    }


class Profiler:
    """py-spy sampling one process (100 Hz, never stopping it) into folded stacks."""

    def __init__(self, pid: int, out: Path, *, gil: bool = False) -> None:
        if not PY_SPY.exists() and shutil.which("py-spy") is None:
            raise RuntimeError("--profile needs py-spy: .venv/bin/pip install py-spy")
        spy = str(PY_SPY) if PY_SPY.exists() else "py-spy"
        self.out = out
        args = [spy, "record", "--pid", str(pid), "--rate", "100", "--nonblocking"]
        args += ["--format", "raw", "--output", str(out), *(["--gil"] if gil else [])]
        self.what = "the thread holding the GIL" if gil else "threads not idle"
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def stop(self) -> str:
        """Stop sampling; the top entries as text."""
        self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=120)
        if not self.out.exists():
            return f"py-spy wrote nothing: {err.decode(errors='replace')[-2000:]}"
        return summarize(self.out, self.what)


def summarize(folded: Path, what: str = "threads not idle", top: int = 25) -> str:
    """Own and inclusive samples per function of py-spy's folded stacks, largest first."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in folded.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        samples = int(count)
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]
        total += samples
        own[frames[-1]] += samples
        for frame in set(frames):
            inclusive[frame] += samples
    lines = [f"{total} samples (100 Hz, {what})", "own:"]
    lines += [f"  {c / total:6.1%}  {f}" for f, c in own.most_common(top)]
    lines.append("including callees:")
    lines += [f"  {c / total:6.1%}  {f}" for f, c in inclusive.most_common(top)]
    return "\n".join(lines)


def held_memory(cluster: Cluster, n: int, workers: int | None, top: int = 20) -> str:
    """The controller in this process under tracemalloc, synced over the N VMIs: what it holds."""
    import tracemalloc  # noqa: PLC0415

    from kvdev.host.controller.live import Controller  # noqa: PLC0415
    from kvdev.host.kube.wire import KubeApi  # noqa: PLC0415

    tracemalloc.start(25)
    api = KubeApi.connect(cluster.kubeconfig, None, connections=(workers or DEFAULT_WORKERS) + 8)
    controller = Controller(api, workers=workers or DEFAULT_WORKERS)
    stop = threading.Event()
    runner = threading.Thread(target=controller.run, args=(stop,), daemon=True)
    runner.start()
    if not controller.synced.wait(3600):
        raise RuntimeError("the in-process controller never synced")
    while controller.stats.syncs < n or not controller.idle.wait(1):
        time.sleep(0.5)  # a bench, not a test: polled until the N syncs are done
    gc_before = tracemalloc.get_traced_memory()[0]
    snapshot = tracemalloc.take_snapshot()
    stop.set()
    runner.join(timeout=30)
    tracemalloc.stop()
    lines = [f"traced, held: {gc_before / 2**20:.1f} MiB after {controller.stats.syncs} syncs"]
    for stat in snapshot.statistics("lineno")[:top]:
        frame = stat.traceback[0]
        where = f"{frame.filename.rsplit('/agent/', 1)[-1]}:{frame.lineno}"
        lines.append(f"  {stat.size / 2**20:7.1f} MiB  {stat.count:8d} blocks  {where}")
    lines.append("by the kvdev line that allocated (the innermost frame in agent/kvdev):")
    ours: collections.Counter[str] = collections.Counter()
    for stat in snapshot.statistics("traceback"):
        mine = next((f for f in reversed(stat.traceback) if "/agent/kvdev/" in f.filename), None)
        if mine is not None:
            ours[f"{mine.filename.rsplit('/agent/', 1)[-1]}:{mine.lineno}"] += stat.size
    lines += [f"  {size / 2**20:7.1f} MiB  {where}" for where, size in ours.most_common(top)]
    return "\n".join(lines)


def written(
    follower: Follower, proc: subprocess.Popen[bytes], n: int, started: float, root: Path
) -> tuple[float, float, dict[str, Any]]:
    """Wait for every ConfigMap: seconds from the start, the controller's CPU seconds, and
    when the first appeared, the writes/s and the controller's cores from it to the last."""
    if not follower.wait(lambda f: len(f.names) >= 1):
        raise RuntimeError((root / "controller.log").read_text()[-3000:])
    first_s, first_cpu = time.monotonic() - started, cpu_s(proc.pid)
    if not follower.wait(lambda f: len(f.names) >= n):
        raise RuntimeError((root / "controller.log").read_text()[-3000:])
    start_s = time.monotonic() - started
    controller_cpu = cpu_s(proc.pid)
    span = max(start_s - first_s, 1e-9)
    return (
        start_s,
        controller_cpu,
        {
            "first_written_s": round(first_s, 1),
            "writes_per_s_after_first": round((n - 1) / span, 1),
            "controller_cores_after_first": round((controller_cpu - first_cpu) / span, 2),
        },
    )


def measure(
    n: int,
    changes: int,
    root: Path,
    tree: Path | None = None,
    workers: int | None = None,
    profile: Path | None = None,
    *,
    memory: bool = False,
    gil: bool = False,
) -> dict[str, Any]:
    """One size on a fresh control plane; ``tree``: the controller from that checkout."""
    cluster = Cluster(root).start()
    try:
        install(cluster.kubeconfig)
        began = time.monotonic()
        populate(cluster, n)
        populated = time.monotonic() - began
        client, api = _client(cluster)
        core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
        log = (root / "controller.log").open("wb")
        port = _free_port()
        env = dict(os.environ)
        if tree is not None:
            env["PYTHONPATH"] = str(tree / "agent")
        args = [
            str(KVDEV_HOST),
            "controller",
            "--kubeconfig",
            str(cluster.kubeconfig),
            "--log-level=warning",
            "--kube-api-qps=-1",  # measure the controller, not client-go's default 5 QPS
            f"--http-address=127.0.0.1:{port}",
            *([f"--workers={workers}"] if workers is not None else []),
        ]
        follower = Follower(core)
        load_before = _load()
        started = time.monotonic()
        plane_before = plane_cpu_s(cluster)
        events_before = configmap_requests(cluster, "events")
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
        profiler = Profiler(proc.pid, profile / f"controller-{n}.txt", gil=gil) if profile else None
        try:
            start_s, controller_cpu, window = written(follower, proc, n, started, root)
            events = configmap_requests(cluster, "events") - events_before
            window["event_requests_in_start"] = events
            plane_cpu = plane_cpu_s(cluster) - plane_before
            load_after = _load()
            if profiler is not None:
                print(f"profile of the start, {n} VMIs:\n{profiler.stop()}", flush=True)
            rss = rss_mib(proc.pid)
            at_start = controller_metrics(port)
            size = body_bytes(cluster, "kvdev-vm-0")
            concurrency = workers or DEFAULT_WORKERS
            go = against_client_go(cluster, n, concurrency, size)
            latencies = change_latencies(follower, resource, n, changes, cluster)
            rss_after = rss_mib(proc.pid)
            after = controller_metrics(port)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
            log.close()
        if memory:
            print(f"held by the controller, {n} VMIs:\n{held_memory(cluster, n, workers)}")
        rate = n / start_s
        return {
            "controller": "baseline" if tree is not None else "this tree",
            "workers": workers if workers is not None else ("1" if tree is not None else "default"),
            "vmis": n,
            "populate_s": round(populated, 1),
            "start_to_all_written_s": round(start_s, 1),
            "load_start_end": f"{load_before}-{load_after}",
            "syncs_at_all_written": int(at_start["renders"]),
            "unchanged_syncs_during_changes": int(after["unchanged"] - at_start["unchanged"]),
            "writes_per_s": round(rate, 1),
            **window,
            "configmap_bytes": size,
            **go,
            "controller_cores": round(controller_cpu / start_s, 2),
            "plane_cores": round(plane_cpu / start_s, 2),
            "ratio_to_client_go": round(rate / go[f"client_go_{concurrency}_writes_per_s"], 2),
            "rss_mib": round(rss, 1),
            "rss_after_changes_mib": round(rss_after, 1),
            **latencies,
        }
    finally:
        cluster.stop()


def change_latencies(
    follower: Follower, resource: Any, n: int, changes: int, cluster: Cluster
) -> dict[str, Any]:
    """Patch ``changes`` claims' network data, one at a time; time until each ConfigMap shows it."""
    before = configmap_requests(cluster)
    out = []
    for k in range(changes):
        i = k * (n // changes) % n  # spread over the VMIs
        ip = f"10.200.{k // 250}.{k % 250 + 1}/32"
        status = {
            "status": {
                "devices": [
                    {
                        "driver": DRIVER,
                        "pool": NODE,
                        "device": f"vf-{i}",
                        "networkData": {"ips": [ip]},
                    }
                ]
            }
        }
        resource.patch_namespaced_resource_claim_status(f"vm-{i}-nic", NS, status)
        sent = time.monotonic()
        if not follower.wait(lambda f, ip=ip: ip in f.seen, guard=300):
            raise RuntimeError(f"no ConfigMap update for {ip}")
        out.append((follower.seen[ip] - sent) * 1000)
    requests = configmap_requests(cluster) - before
    follower.stopped = True
    follower.stream.stop()
    slowest = max(range(len(out)), key=out.__getitem__)
    first = out[0]
    out.sort()
    return {
        "changes": changes,
        "p50_ms": round(statistics.median(out), 1),
        "p99_ms": round(out[min(len(out) - 1, int(len(out) * 0.99))], 1),
        "max_ms": round(out[-1], 1),
        "max_at_change": slowest + 1,
        "first_change_ms": round(first, 1),
        "configmap_requests_per_change": round(requests / changes, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--changes", type=int, default=1000, help="claim changes timed, in turn")
    parser.add_argument("--workers", type=int, help="this tree's controller: --workers N")
    parser.add_argument(
        "--baseline", type=Path, metavar="TREE", help="also measure TREE's controller, first"
    )
    parser.add_argument("--profile", type=Path, metavar="DIR", help="py-spy over each start")
    parser.add_argument(
        "--gil", action="store_true", help="--profile: sample only the thread holding the GIL"
    )
    parser.add_argument(
        "--tracemalloc", action="store_true", help="what this tree's controller holds, by line"
    )
    args = parser.parse_args()
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    build()
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        runs: list[tuple[Path | None, int | None]] = [(None, args.workers)]
        if args.baseline is not None:
            runs.insert(0, (args.baseline.resolve(), None))
        for tree, workers in runs:
            with tempfile.TemporaryDirectory(prefix="kvdev-bench-cluster-") as tmp:
                row = measure(
                    n,
                    args.changes,
                    Path(tmp),
                    tree,
                    workers,
                    args.profile,
                    memory=args.tracemalloc and tree is None,
                    gil=args.gil,
                )
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(
        f"\nmeasured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores"
    )
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(str(row.get(k, "-")) for k in keys) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
