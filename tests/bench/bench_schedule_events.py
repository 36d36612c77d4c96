"""Event mode of ``schedule``: queueing hints against retrying every pod on every event.

Reports, never asserts: ``.venv/bin/python tests/bench/bench_schedule_events.py [--quick]``.

The cluster: 100 nodes x 8 GPUs, filled by 800 one-GPU pods; then W more pods wait, half for
a GPU, half for a NIC (no NIC exists yet). The events, in turn: an FPGA slice appears on a
node (no waiting pod can use it), one more NIC appears on a node (one NIC pod fits), one more
GPU appears (one GPU pod fits). For W in (100, 400, 1,600) and E in (30, 120) events, each run
is replayed with queueing hints and without (every waiting pod retried after every event):
the attempts (scheduler_attempts_total, every try of every pod, the first ones included),
the retries after events, and CPU seconds of ``replay()``. Without hints the retries grow as
W x E; with hints as the pods the events can help.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from kvdev.host.k8s import KINDS, K8sObject
from kvdev.host.scheduling import ClusterEvent, replay

GPU, NIC, FPGA = "gpu.example.com", "nic.example.com", "fpga.example.com"


def _obj(data: dict[str, Any]) -> K8sObject:
    return KINDS[(data["apiVersion"], data["kind"])].model_validate(data, strict=True)


def _slice(name: str, node: str, driver: str, devices: int) -> K8sObject:
    return _obj(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": {
                "driver": driver,
                "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                "nodeName": node,
                "devices": [{"name": f"d-{i}"} for i in range(devices)],
            },
        }
    )


def _pod(name: str, template: str) -> K8sObject:
    return _obj(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "bench"},
            "spec": {
                "containers": [{"name": "main"}],
                "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": template}],
            },
        }
    )


def _base(nodes: int) -> list[K8sObject]:
    objs: list[K8sObject] = []
    for driver in (GPU, NIC, FPGA):
        expression = f'device.driver == "{driver}"'
        objs.append(
            _obj(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "DeviceClass",
                    "metadata": {"name": driver},
                    "spec": {"selectors": [{"cel": {"expression": expression}}]},
                }
            )
        )
        request = {"name": "dev", "exactly": {"deviceClassName": driver}}
        objs.append(
            _obj(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaimTemplate",
                    "metadata": {"name": driver.split(".")[0], "namespace": "bench"},
                    "spec": {"spec": {"devices": {"requests": [request]}}},
                }
            )
        )
    for n in range(nodes):
        name = f"node-{n:03d}"
        objs.append(_obj({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}))
        objs.append(_slice(f"{name}-gpu", name, GPU, 8))
    objs += [_pod(f"fill-{i:04d}", "gpu") for i in range(8 * nodes)]
    return objs


def case(nodes: int, waiting: int, events: int) -> tuple[list[K8sObject], list[ClusterEvent]]:
    """The cluster, pods and events of the module docstring."""
    objs = _base(nodes)
    objs += [_pod(f"wait-{i:05d}", "gpu" if i % 2 else "nic") for i in range(waiting)]
    stream = []
    for e in range(events):
        node = f"node-{e % nodes:03d}"
        driver, devices = [(FPGA, 1), (NIC, 1), (GPU, 1)][e % 3]
        stream.append(ClusterEvent("ADDED", _slice(f"{node}-extra-{e}", node, driver, devices)))
    return objs, stream


def main() -> int:
    """Print one line per (waiting pods, events, mode)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="20 nodes, fewer pods and events")
    args = parser.parse_args()
    nodes = 20 if args.quick else 100
    grid = (
        [(w, e) for w in (50, 200) for e in (15, 60)]
        if args.quick
        else [(w, e) for w in (100, 400, 1600) for e in (30, 120)]
    )
    print(f"{nodes} nodes x 8 GPUs, {8 * nodes} pods filling them")
    print(
        f"{'waiting':>8} {'events':>7} {'mode':>8} {'attempts':>9} {'per pod':>8} "
        f"{'retries':>8} {'placed':>7} {'CPU s':>7}"
    )
    for waiting, events in grid:
        objs, stream = case(nodes, waiting, events)
        for hints in (True, False):
            start = time.process_time()
            run = replay(objs, stream, hints=hints)
            seconds = time.process_time() - start
            per_pod = run.total_attempts / len(run.attempts)
            print(
                f"{waiting:8} {events:7} {'hints' if hints else 'all':>8} "
                f"{run.total_attempts:9} {per_pod:8.2f} {sum(run.retried):8} "
                f"{sum(run.placed_by):7} {seconds:7.2f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
