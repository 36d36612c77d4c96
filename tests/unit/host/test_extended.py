"""The special claim of extended resources backed by DRA (KEP-5004): pure synthesis."""

import pytest

from kvdev.host.allocation.cluster import cluster_state
from kvdev.host.allocation.extended import (
    claim_name,
    class_mapping,
    status_for,
    synthesize,
)
from kvdev.host.k8s import DeviceClass, Node, Pod

GPU = "example.com/gpu"


def synthesize_claims(pods, classes, node_allocatable=()):
    """The special claims of ``synthesize``, without the Pod statuses."""
    return [s.claim for s in synthesize(pods, classes, node_allocatable)]


def device_class(name, extended=None, created=None):
    meta = {"name": name}
    if created:
        meta["creationTimestamp"] = created
    spec = {"extendedResourceName": extended} if extended else {}
    return DeviceClass.model_validate(
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": meta, "spec": spec}
    )


def container(name, requests=None, limits=None, restart=None):
    c = {"name": name, "resources": {}}
    if requests:
        c["resources"]["requests"] = requests
    if limits:
        c["resources"]["limits"] = limits
    if restart:
        c["restartPolicy"] = restart
    return c


def pod(containers, init=None, name="p", namespace="ns", node=None, status=None):
    spec = {"containers": containers}
    if init:
        spec["initContainers"] = init
    if node:
        spec["nodeName"] = node
    data = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    if status:
        data["status"] = status
    return Pod.model_validate(data)


def requests_of(claim):
    return [
        (r.name, r.exactly.device_class_name, r.exactly.allocation_mode, r.exactly.count)
        for r in claim.spec.devices.requests
    ]


def test_explicit_name():
    [claim] = synthesize_claims(
        [pod([container("c", {GPU: "1"})])], [device_class("gpu.example.com", GPU)]
    )
    assert requests_of(claim) == [("container-0-request-0", "gpu.example.com", "ExactCount", 1)]
    assert claim.metadata.namespace == "ns"
    assert claim.metadata.name.startswith("p-extended-resources-")
    assert len(claim.metadata.name) == len("p-extended-resources-") + 5


def test_implicit_name():
    implicit = "deviceclass.resource.kubernetes.io/gpu.example.com"
    [claim] = synthesize_claims(
        [pod([container("c", {implicit: 1})])], [device_class("gpu.example.com", GPU)]
    )
    assert requests_of(claim) == [("container-0-request-0", "gpu.example.com", "ExactCount", 1)]


def test_request_index_counts_every_sorted_resource_and_limits_default_requests():
    # sorted names: cpu, example.com/gpu, memory -> the gpu is request 1
    c = container("c", {"cpu": "1", "memory": "1Gi"}, limits={GPU: "2"})
    [claim] = synthesize_claims([pod([c])], [device_class("gpu", GPU)])
    assert requests_of(claim) == [("container-0-request-1", "gpu", "ExactCount", 2)]


def test_two_containers_and_status_mappings():
    pods = [pod([container("a", {GPU: "1"}), container("b", {GPU: "3"})])]
    [special] = synthesize(pods, [device_class("gpu", GPU)])
    assert requests_of(special.claim) == [
        ("container-0-request-0", "gpu", "ExactCount", 1),
        ("container-1-request-0", "gpu", "ExactCount", 3),
    ]
    status = status_for(special)["extendedResourceClaimStatus"]
    assert status["resourceClaimName"] == special.claim.metadata.name
    assert status["requestMappings"] == [
        {"containerName": "a", "resourceName": GPU, "requestName": "container-0-request-0"},
        {"containerName": "b", "resourceName": GPU, "requestName": "container-1-request-0"},
    ]


def test_init_container_reuses_the_containers_devices():
    p = pod([container("main", {GPU: "2"})], init=[container("init", {GPU: "1"})])
    [special] = synthesize([p], [device_class("gpu", GPU)])
    # init container is index 0, main index 1; main's two devices cover init's one
    assert requests_of(special.claim) == [("container-1-request-0", "gpu", "ExactCount", 2)]
    names = {m.container_name: m.request_name for m in special.status.request_mappings}
    assert names == {"main": "container-1-request-0", "init": "container-1-request-0"}


def test_init_containers_share_the_largest_shortfall():
    p = pod(
        [container("main", {"cpu": "1"})],
        init=[container("i0", {GPU: "1"}), container("i1", {GPU: "3"})],
    )
    [special] = synthesize([p], [device_class("gpu", GPU)])
    assert requests_of(special.claim) == [("container-1-request-0", "gpu", "ExactCount", 3)]
    assert {m.request_name for m in special.status.request_mappings} == {"container-1-request-0"}


def test_sidecar_is_long_lived():
    p = pod([container("main")], init=[container("side", {GPU: "1"}, restart="Always")])
    [claim] = synthesize_claims([p], [device_class("gpu", GPU)])
    assert requests_of(claim) == [("container-0-request-0", "gpu", "ExactCount", 1)]


def test_quantity_two():
    [claim] = synthesize_claims([pod([container("c", {GPU: 2})])], [device_class("gpu", GPU)])
    assert requests_of(claim)[0][3] == 2


def test_unknown_resource_and_fractions_are_ignored():
    pods = [
        pod([container("c", {"example.com/other": "1", GPU: "500m"})], name="a"),
        pod([container("c", {GPU: "0"})], name="b"),
        pod([container("c")], name="c"),
    ]
    assert synthesize_claims(pods, [device_class("gpu", GPU)]) == []


def test_two_resources_one_claim():
    c = container("c", {GPU: "1", "example.com/nic": "1"})
    [claim] = synthesize_claims(
        [pod([c])], [device_class("gpu", GPU), device_class("nic", "example.com/nic")]
    )
    assert requests_of(claim) == [
        ("container-0-request-0", "gpu", "ExactCount", 1),
        ("container-0-request-1", "nic", "ExactCount", 1),
    ]


@pytest.mark.parametrize("order", [1, -1])
def test_newest_class_wins_then_lowest_name(order):
    classes = [
        device_class("old", GPU, "2025-01-01T00:00:00Z"),
        device_class("new-b", GPU, "2025-06-01T00:00:00Z"),
        device_class("new-a", GPU, "2025-06-01T00:00:00Z"),
        device_class("undated", GPU),
    ][::order]
    assert class_mapping(classes)[GPU] == "new-a"
    undated = [device_class("b", GPU), device_class("a", GPU)][::order]
    assert class_mapping(undated)[GPU] == "a"


def test_implicit_name_always_maps_its_own_class():
    mapping = class_mapping([device_class("x", GPU)])
    assert mapping["deviceclass.resource.kubernetes.io/x"] == "x"


def test_name_is_deterministic_and_cut_to_the_generator_limit():
    long = pod([container("c")], name="p" * 70)
    assert claim_name(long) == claim_name(long)
    assert len(claim_name(long)) == 63
    assert claim_name(pod([container("c")], namespace="a")) != claim_name(
        pod([container("c")], namespace="b")
    )


def _node(name, allocatable=None):
    data = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
    if allocatable:
        data["status"] = {"allocatable": allocatable}
    return Node.model_validate(data)


def test_cluster_state_skips_pods_elsewhere_or_already_claimed():
    cls = device_class("gpu", GPU)
    mine = pod([container("c", {GPU: "1"})], name="mine", node="node-a")
    free = pod([container("c", {GPU: "1"})], name="free")
    elsewhere = pod([container("c", {GPU: "1"})], name="elsewhere", node="node-b")
    claimed = pod(
        [container("c", {GPU: "1"})],
        name="claimed",
        status={
            "extendedResourceClaimStatus": {
                "resourceClaimName": "claimed-extended-resources-abcde",
                "requestMappings": [],
            }
        },
    )
    state = cluster_state([cls, mine, free, elsewhere, claimed], "node-a")
    assert [s.pod.metadata.name for s in state.special] == ["mine", "free"]
    assert len(state.pending) == 2
    assert cluster_state([cls, mine], "node-a", extended_resources=False).pending == []


def test_device_plugin_resources_on_the_node_are_not_asked_of_dra():
    cls = device_class("gpu", GPU)
    p = pod([container("c", {GPU: "1"})])
    assert cluster_state([_node("node-a", {GPU: "4"}), cls, p], "node-a").pending == []
    assert len(cluster_state([_node("node-a"), cls, p], "node-a").pending) == 1
