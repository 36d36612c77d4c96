"""``kvdev-host serve --kube``'s claim source (``KubeClaimSource``) on the real API server, with
the plugin DaemonSet's ServiceAccount token and the shipped RBAC (get claims, list slices): the
field selectors return this node's slices and the node-less ones, never another node's."""

import pytest
from clusterlab import SYSTEM, add_node, apply, resource_slice, token_for
from controlplane import token_kubeconfig
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kvdev.host.plugin.liveclaims import KubeClaimSource


def slice_body(name, driver, **where):
    return resource_slice(name, driver, [{"name": "d0"}], **where)


@pytest.fixture
def plugin_config(cluster, kube, shipped, tmp_path):
    token = token_for(kube, SYSTEM, "kvdev-host-plugin")
    return token_kubeconfig(
        tmp_path / "plugin.kubeconfig", cluster.server, cluster.pki / "ca.crt", token
    )


def test_only_this_nodes_slices_and_the_node_less_ones(kube, namespace, plugin_config):
    core, resource = client.CoreV1Api(kube), client.ResourceV1Api(kube)
    driver = f"{namespace}.net.example.com"
    a, b = f"{namespace}-a", f"{namespace}-b"
    for node in (a, b):
        add_node(core, node)
    slices = [
        slice_body(f"{a}-own", driver, nodeName=a),
        slice_body(f"{b}-own", driver, nodeName=b),
        slice_body(f"{namespace}-fabric", driver, allNodes=True),
        slice_body(f"{a}-other-driver", f"other.{driver}", nodeName=a),
    ]
    apply(kube, slices)
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "x"}}]}},
    }
    apply(kube, [claim])
    try:
        fetched = KubeClaimSource(driver, node=a, kubeconfig=plugin_config).fetch(namespace, "c")
        assert fetched.claim.metadata.name == "c"
        assert sorted(s.metadata.name for s in fetched.slices) == [
            f"{a}-own",
            f"{namespace}-fabric",
        ]
        every = KubeClaimSource(driver, kubeconfig=plugin_config).fetch(namespace, "c")
        assert len(every.slices) == 3
        # The plugin's own RBAC: nothing beyond get claims and list slices.
        from kubernetes import config  # noqa: PLC0415

        as_plugin = client.ResourceV1Api(config.new_client_from_config(str(plugin_config)))
        with pytest.raises(ApiException) as refused:
            as_plugin.list_namespaced_resource_claim(namespace)
        assert refused.value.status == 403
        with pytest.raises(ApiException) as refused:
            as_plugin.delete_resource_slice(f"{a}-own")
        assert refused.value.status == 403
    finally:
        for body in slices:
            resource.delete_resource_slice(body["metadata"]["name"])
        for node in (a, b):
            core.delete_node(node)
