"""Node-allocatable accounting (KEP-5517): requests, device mappings and overheads."""

from fractions import Fraction

import pytest
from test_schedule_fakes import (
    by_name,
    claim,
    device_class,
    from_template,
    gpu,
    node,
    node_slice,
    pod,
    template,
)

from kvdev.host.k8s import Pod
from kvdev.host.scheduling import schedule
from kvdev.host.scheduling.accounting import pod_requests


def names(result):
    return [p.pod.metadata.name for p in result.placed]


def test_pod_requests_limits_default_requests_and_init_containers_peak():
    p = Pod.model_validate(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {
                "initContainers": [
                    {
                        "name": "side",
                        "restartPolicy": "Always",
                        "resources": {"requests": {"cpu": "1"}},
                    },
                    {"name": "init", "resources": {"limits": {"cpu": "4", "memory": "1Gi"}}},
                ],
                "containers": [
                    {
                        "name": "a",
                        "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "2"}},
                    },
                    {"name": "b", "resources": {"requests": {"cpu": "1", "example.com/gpu": "1"}}},
                ],
            },
        },
        strict=True,
    )
    # long-lived: 1 + 0.5 + 1 = 2.5 cpu; init: 4 + sidecar 1 = 5 cpu, 1Gi
    assert pod_requests(p) == {
        "cpu": Fraction(5),
        "example.com/gpu": Fraction(1),
        "memory": Fraction(2**30),
    }
    assert "example.com/gpu" not in pod_requests(p, skip={"example.com/gpu"})


def test_requests_never_oversubscribe_a_node():
    objs = [node("n1", allocatable={"cpu": "4", "pods": "10"})]
    objs += [pod(f"p{i}", requests={"cpu": "1500m"}) for i in range(4)]
    result = schedule(objs)
    assert names(result) == ["p0", "p1"]  # 3 cpu used, 1.5 more would exceed 4
    assert {u.reason for u in result.unplaced} == {"0/1 nodes are available: 1 Insufficient cpu."}


def test_pods_count_and_unlisted_resources():
    objs = [node("n1", allocatable={"cpu": "8", "pods": "2"})]
    objs += [pod(f"p{i}") for i in range(3)]
    objs += [pod("mem", requests={"memory": "1Gi"})]  # the node lists no memory
    result = schedule(objs)
    assert names(result) == ["p0", "p1"]
    reasons = {u.pod.metadata.name: u.reason for u in result.unplaced}
    assert reasons["p2"] == "0/1 nodes are available: 1 Insufficient pods."
    assert "Insufficient memory, pods" in reasons["mem"]


def test_bound_pods_use_their_nodes_allocatable():
    objs = [node("n1", allocatable={"cpu": "2"}), node("n2", allocatable={"cpu": "2"})]
    objs += [pod("bound", requests={"cpu": "2"}, node_name="n1"), pod("new", requests={"cpu": "1"})]
    result = schedule(objs)
    assert [(p.pod.metadata.name, p.node) for p in result.placed] == [("new", "n2")]


def cpu_cluster(resources, allocatable):
    dev = {"nodeAllocatableResources": resources}
    return [
        device_class(),
        template(),
        node("n1", allocatable=allocatable),
        node_slice(
            "n1",
            [
                gpu("gpu-0", capacity={"memory": {"value": "16Gi"}}, **dev),
                gpu("gpu-1", capacity={"memory": {"value": "16Gi"}}, **dev),
                gpu("gpu-2", capacity={"memory": {"value": "16Gi"}}, **dev),
            ],
        ),
    ]


def test_device_multiplier_is_charged_per_allocated_device():
    objs = cpu_cluster({"cpu": {"mapping": {"deviceMultiplier": "2"}}}, {"cpu": "6"})
    objs += [pod(f"p{i}", [from_template()], requests={"cpu": "1"}) for i in range(3)]
    result = schedule(objs)
    # 1 + 2 per pod: two pods use 6 cpu; a GPU is still free but the node's cpu is not
    assert names(result) == ["p0", "p1"]
    assert result.unplaced[0].reason == "0/1 nodes are available: 1 Insufficient cpu."


def test_mapping_without_multiplier_counts_one_per_device():
    objs = cpu_cluster({"cpu": {"mapping": {}}}, {"cpu": "2"})
    objs += [pod(f"p{i}", [from_template()]) for i in range(3)]
    assert names(schedule(objs)) == ["p0", "p1"]


def test_capacity_multiplier_scales_the_device_capacity():
    objs = cpu_cluster(
        {"memory": {"mapping": {"capacityKey": "memory", "capacityMultiplier": "0.5"}}},
        {"memory": "20Gi"},
    )
    objs += [pod(f"p{i}", [from_template()], requests={"memory": "1Gi"}) for i in range(3)]
    result = schedule(objs)
    # 8Gi + 1Gi per pod: 18Gi for two, a third would need 27Gi
    assert names(result) == ["p0", "p1"]


def test_overhead_per_pod_and_per_container_for_every_pod_of_a_shared_claim():
    objs = cpu_cluster(
        {"memory": {"overhead": {"perPod": "1Gi", "perContainer": "512Mi"}}},
        {"memory": "7Gi"},
    )
    objs.append(claim("shared"))
    # each pod: 1Gi + 2 containers x 512Mi = 2Gi, no mapping: 3 pods fit in 7Gi, not 4
    objs += [pod(f"p{i}", [by_name("gpu", "shared")], containers=2) for i in range(4)]
    result = schedule(objs)
    assert names(result) == ["p0", "p1", "p2"]
    assert len(result.claims[0].status.reserved_for) == 3


@pytest.mark.parametrize(
    "bad", [{"capacityKey": "memory", "deviceMultiplier": "1"}, {"capacityMultiplier": "2"}]
)
def test_invalid_mappings_are_rejected(bad):
    with pytest.raises(ValueError, match="capacity"):
        cpu_cluster({"cpu": {"mapping": bad}}, {"cpu": "1"})
