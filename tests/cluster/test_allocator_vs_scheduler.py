"""kvdev's allocator judged by the real kube-scheduler on the same objects.

Two kubelet-less Nodes with two VFs each; pods whose claims ask for one, two or three VFs,
more than fit. The real scheduler places what it can. Then, from the objects it left:
every claim it allocated is allocatable by ``kvdev-host allocate`` on the node it chose,
given the other allocations; every pod it left unschedulable is unschedulable in
``kvdev-host schedule`` too."""

import json
import subprocess

from clusterlab import KVDEV_HOST, add_node, apply, resource_slice, wait_for
from kubernetes import client

# (pod, VFs its claim asks for), created in this order
PODS = [("p1", 1), ("p2", 2), ("p3", 3), ("p4", 1), ("p5", 1), ("p6", 1)]


def plain(api, obj, api_version, kind):
    data = api.sanitize_for_serialization(obj)
    data["metadata"].pop("managedFields", None)
    return {"apiVersion": api_version, "kind": kind, **data}


def settled(core, ns, name):
    pod = core.read_namespaced_pod(name, ns)
    if pod.spec.node_name:
        return "bound"
    for c in pod.status.conditions or []:
        if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
            return "unschedulable"
    return None


def test_the_allocator_agrees_with_the_real_scheduler(kube, namespace, tmp_path):
    core, resource = client.CoreV1Api(kube), client.ResourceV1Api(kube)
    driver, cls = f"{namespace}.vf.example.com", f"vf-{namespace}"
    nodes = [f"{namespace}-a", f"{namespace}-b"]
    for node in nodes:
        add_node(core, node)
    selector = f'device.driver == "{driver}"'
    spec = {"selectors": [{"cel": {"expression": selector}}]}
    meta = {"name": cls}
    objects = [
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": meta, "spec": spec}
    ]
    for node in nodes:
        devices = [{"name": f"vf-{i}", "attributes": {"index": {"int": i}}} for i in range(2)]
        objects.append(resource_slice(f"{node}-vfs", driver, devices, nodeName=node))
    apply(kube, objects)
    try:
        for pod, count in PODS:
            request = {
                "name": "nic",
                "exactly": {"deviceClassName": cls, "allocationMode": "ExactCount", "count": count},
            }
            claim = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": f"{pod}-nic"},
                "spec": {"devices": {"requests": [request]}},
            }
            body = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": pod},
                "spec": {
                    "resourceClaims": [{"name": "nic", "resourceClaimName": f"{pod}-nic"}],
                    "containers": [
                        {"name": "c", "image": "x", "resources": {"claims": [{"name": "nic"}]}}
                    ],
                },
            }
            apply(kube, [claim, body], namespace=namespace)
        outcome = {
            pod: wait_for(
                f"pod {pod} bound or unschedulable", lambda pod=pod: settled(core, namespace, pod)
            )
            for pod, _ in PODS
        }
        assert "bound" in outcome.values()
        assert "unschedulable" in outcome.values()  # p3 cannot fit anywhere: 3 VFs
        assert outcome["p3"] == "unschedulable"
        state = [plain(kube, n, "v1", "Node") for n in (core.read_node(x) for x in nodes)]
        state += [plain(kube, resource.read_device_class(cls), "resource.k8s.io/v1", "DeviceClass")]
        state += [
            plain(
                kube,
                resource.read_resource_slice(f"{n}-vfs"),
                "resource.k8s.io/v1",
                "ResourceSlice",
            )
            for n in nodes
        ]
        claims = {
            c.metadata.name: plain(kube, c, "resource.k8s.io/v1", "ResourceClaim")
            for c in resource.list_namespaced_resource_claim(namespace).items
        }
        pods = {p.metadata.name: p for p in core.list_namespaced_pod(namespace).items}
        allocated = {n: c for n, c in claims.items() if (c.get("status") or {}).get("allocation")}

        # 1. each claim the scheduler allocated: allocatable by kvdev on the chosen node
        for name, chosen in allocated.items():
            node = pods[name.removesuffix("-nic")].spec.node_name
            others = [c for n, c in allocated.items() if n != name]
            mine = {k: v for k, v in chosen.items() if k != "status"}
            path = tmp_path / f"allocate-{name}.json"
            path.write_text(
                json.dumps({"apiVersion": "v1", "kind": "List", "items": [*state, *others, mine]})
            )
            done = subprocess.run(
                [str(KVDEV_HOST), "allocate", "-f", str(path), "--node", node, "-o", "json"],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            assert done.returncode == 0, f"{name} on {node}: {done.stderr}"

        unschedulable_in_kvdev_too(kube, outcome, state, claims, allocated, pods, tmp_path)
        print(f"\n  scheduler: {outcome}")
    finally:
        for n in nodes:
            resource.delete_resource_slice(f"{n}-vfs")
            core.delete_node(n)
        resource.delete_device_class(cls)


def unschedulable_in_kvdev_too(kube, outcome, state, claims, allocated, pods, tmp_path):
    """The pods the scheduler left unschedulable, given what it bound: kvdev places none."""
    waiting = [p for p, o in outcome.items() if o == "unschedulable"]
    bound = [plain(kube, pods[p], "v1", "Pod") for p, o in outcome.items() if o == "bound"]
    pending = []
    for p in waiting:
        pod = plain(kube, pods[p], "v1", "Pod")
        pod.pop("status", None)
        pending.append(pod)
    unallocated = [claims[f"{p}-nic"] for p in waiting]
    path = tmp_path / "schedule.json"
    items = [*state, *allocated.values(), *unallocated, *bound, *pending]
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    done = subprocess.run(
        [str(KVDEV_HOST), "schedule", "-f", str(path), "-o", "json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    placed = {
        i["metadata"]["name"]
        for i in json.loads(done.stdout)["items"]
        if i["kind"] == "Pod" and i["spec"].get("nodeName") and i["metadata"]["name"] in waiting
    }
    assert placed == set(), f"kvdev placed what the scheduler could not: {placed}"
