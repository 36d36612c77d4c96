"""``schedule`` throughput: 10,000 one-claim pods over 1,000 nodes x 8 GPUs x 2 NICs.

Reports, never asserts: ``.venv/bin/python tests/bench/bench_schedule.py [--quick]
[--profile] [--filter-off-at N]`` (``make bench-schedule``).

The cluster: every node publishes a GPU slice (8 GPUs, ``numaNode`` 0 for gpu-0..3, 1 for
gpu-4..7, 80Gi memory) and a NIC slice (2 NICs, ``numaNode`` 0 and 1, shareable:
``allowMultipleAllocations`` with 100G of bandwidth). Every pod gets a claim from one
template: one GPU with a CEL selector plus 25G of one NIC, ``matchAttribute
resource.kubernetes.io/numaNode``, and asks for 1 cpu and 4Gi. So 8,000 pods fit (8 GPUs per
node) and the last 2,000 are unschedulable. Timed: ``schedule()`` only (objects are built
before), on one core, at 2,500 / 5,000 / 10,000 pods with the selector cache on, then the
same with it off (2,500 and 10,000 pods), and without the rejection cache at 8,200 pods
(200 unschedulable; each scans all 1,000 nodes when nothing is cached). Times are CPU
seconds of this process (``time.process_time``; the wall time is printed too); the objects
are frozen for the garbage collector first, as ``kvdev-host schedule`` does after loading.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import sys
import time
from typing import Any

from kvdev.host.k8s import KINDS, K8sObject
from kvdev.host.scheduling import schedule

GPU = "gpu.example.com"
NIC = "nic.example.com"
NUMA = "resource.kubernetes.io/numaNode"
SELECTOR = (
    f'device.attributes["{GPU}"].model == "A100" && '
    f'device.capacity["{GPU}"].memory.compareTo(quantity("40Gi")) >= 0'
)


def _obj(data: dict[str, Any]) -> K8sObject:
    return KINDS[(data["apiVersion"], data["kind"])].model_validate(data, strict=True)


def _slice(node: str, driver: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver}"},
        "spec": {
            "driver": driver,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "nodeName": node,
            "devices": devices,
        },
    }


def cluster(nodes: int, pods: int) -> list[K8sObject]:
    """The benchmark's objects (module docstring)."""
    out: list[dict[str, Any]] = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": driver},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
        }
        for driver in (GPU, NIC)
    ]
    out.append(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "gpu-nic", "namespace": "bench"},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpu",
                                "exactly": {
                                    "deviceClassName": GPU,
                                    "selectors": [{"cel": {"expression": SELECTOR}}],
                                },
                            },
                            {
                                "name": "nic",
                                "exactly": {
                                    "deviceClassName": NIC,
                                    "capacity": {"requests": {"bandwidth": "25G"}},
                                },
                            },
                        ],
                        "constraints": [{"requests": ["gpu", "nic"], "matchAttribute": NUMA}],
                    }
                }
            },
        }
    )
    for n in range(nodes):
        name = f"node-{n:04d}"
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {"rack": f"r{n // 40}"}},
                "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"}},
            }
        )
        gpus = [
            {
                "name": f"gpu-{g}",
                "attributes": {"model": {"string": "A100"}, NUMA: {"int": g // 4}},
                "capacity": {"memory": {"value": "80Gi"}},
            }
            for g in range(8)
        ]
        nics = [
            {
                "name": f"nic-{i}",
                "attributes": {NUMA: {"int": i}},
                "allowMultipleAllocations": True,
                "capacity": {"bandwidth": {"value": "100G"}},
            }
            for i in range(2)
        ]
        out += [_slice(name, GPU, gpus), _slice(name, NIC, nics)]
    out += [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"pod-{p:05d}", "namespace": "bench"},
            "spec": {
                "resourceClaims": [{"name": "gpu-nic", "resourceClaimTemplateName": "gpu-nic"}],
                "containers": [
                    {"name": "main", "resources": {"requests": {"cpu": "1", "memory": "4Gi"}}}
                ],
            },
        }
        for p in range(pods)
    ]
    return [_obj(d) for d in out]


def _run(objects: list[K8sObject], label: str, **caches: bool) -> float:
    """One timed ``schedule()``; returns its CPU seconds (the machine may be shared)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = schedule(objects, **caches)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    pods = len(result.placed) + len(result.unplaced)
    print(
        f"{label:34} {pods:6} pods  cpu {cpu:6.2f} s  wall {wall:6.2f} s  "
        f"{result.allocated_claims / cpu:6.0f} claims/s  {pods / cpu:6.0f} pods/s  "
        f"placed {len(result.placed)}  unschedulable {len(result.unplaced)}",
        flush=True,
    )
    return cpu


def main() -> int:
    """Time the runs of the module docstring; print one line per run."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="100 nodes, 1,000 pods")
    parser.add_argument("--profile", action="store_true", help="cProfile the full run")
    parser.add_argument(
        "--filter-off-at",
        type=int,
        default=8200,
        help="pods for the runs without the rejection cache (0: skip them; they are slow)",
    )
    args = parser.parse_args()
    nodes, pods = (100, 1000) if args.quick else (1000, 10000)
    everything = cluster(nodes, pods)
    gc.freeze()  # as the command does after loading its input
    base = [o for o in everything if o.kind != "Pod"]
    all_pods = [o for o in everything if o.kind == "Pod"]
    print(f"{nodes} nodes x 8 GPUs x 2 NICs, {pods} pods; GPU selector: {SELECTOR}")
    on = {}
    for n in (pods // 4, pods // 2, pods):
        on[n] = _run(base + all_pods[:n], "selector cache on")
    print("time per pod: " + ", ".join(f"{n}: {on[n] / n * 1e3:.3f} ms" for n in on))
    marks: dict[int, float] = {}
    begin = time.process_time()

    def mark(done: int, total: int) -> None:
        if done % (total // 10) == 0:
            marks[done] = time.process_time() - begin

    schedule(base + all_pods, progress=mark)
    print(
        "one run, CPU s per tenth of the pods: "
        + " ".join(f"{marks[k] - marks.get(k - pods // 10, 0):.2f}" for k in sorted(marks))
    )
    for n in (pods // 4, pods):
        off = _run(base + all_pods[:n], "selector cache off", selector_cache=False)
        print(f"  selector cache off / on at {n} pods: {off / on[n]:.2f}x")
    if args.filter_off_at:
        n = min(args.filter_off_at, pods) if not args.quick else pods * 82 // 100
        with_sel = _run(base + all_pods[:n], "rejection cache off", filter_cache=False)
        both = _run(
            base + all_pods[:n],
            "selector + rejection cache off",
            selector_cache=False,
            filter_cache=False,
        )
        ref = _run(base + all_pods[:n], "both caches on (reference)")
        print(
            f"  at {n} pods: rejection cache off {with_sel / ref:.1f}x, "
            f"both off {both / ref:.1f}x slower than both on"
        )
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        schedule(base + all_pods, selector_cache=True)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
