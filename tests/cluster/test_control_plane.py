"""The session's control plane is the one the README promises: v1.37.2 everywhere, the DRA gates
on, OwnerReferencesPermissionEnforcement admitting, a kubelet-less Node that the real scheduler
binds pods to."""

from clusterlab import add_node, wait_for
from controlplane import GATES
from kubernetes import client


def test_every_component_is_v1_37_2(cluster):
    versions = cluster.versions()
    assert versions == {
        "kube-apiserver": "Kubernetes v1.37.2",
        "kube-controller-manager": "Kubernetes v1.37.2",
        "kube-scheduler": "Kubernetes v1.37.2",
        "served": "v1.37.2",
    }


def test_the_gates_and_admission_plugins_are_the_ones_asked_for(cluster):
    args = " ".join(cluster.args("kube-apiserver"))
    for gate in GATES:
        assert f"{gate}=true" in args
    assert "OwnerReferencesPermissionEnforcement" in args
    with cluster.urlopen(f"{cluster.server}/metrics") as answer:
        metrics = answer.read().decode()
    for gate in GATES:
        assert f'kubernetes_feature_enabled{{name="{gate}",stage="' in metrics
        line = next(m for m in metrics.splitlines() if f'name="{gate}"' in m)
        assert line.endswith(" 1"), line


def test_a_gated_field_is_kept_only_because_its_gate_is_on(kube):
    """DRAConsumableCapacity (alpha): a device's allowMultipleAllocations survives the write."""
    resource = client.ResourceV1Api(kube)
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "gate-probe"},
        "spec": {
            "driver": "probe.example.com",
            "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
            "nodeName": "gate-probe-node",
            "devices": [
                {"name": "d", "allowMultipleAllocations": True, "capacity": {"bw": {"value": "10"}}}
            ],
        },
    }
    made = resource.create_resource_slice(body, dry_run="All")
    assert made.spec.devices[0].allow_multiple_allocations is True


def test_a_node_object_gets_pods_from_the_real_scheduler(kube, namespace):
    core = client.CoreV1Api(kube)
    name = f"node-{namespace}"
    add_node(core, name)
    try:
        pod = {
            "metadata": {"name": "p"},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": name},
                "containers": [{"name": "c", "image": "registry.invalid/none:1"}],
            },
        }
        core.create_namespaced_pod(namespace, pod)
        bound = wait_for(
            "the scheduler binds the pod",
            lambda: core.read_namespaced_pod("p", namespace).spec.node_name,
        )
        assert bound == name
    finally:
        core.delete_node(name)
