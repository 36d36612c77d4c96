"""packaging/kubernetes/*.yaml as shipped, on the real API server: every object accepted by a
server-side dry run and then created; the controller run as its Deployment's ServiceAccount
(a bound token, the manifests' RBAC, the real authorizer and OwnerReferencesPermissionEnforcement)
writes the VMI's ConfigMap and never meets a 403; what its ClusterRole does not grant is
refused 403."""

import pytest
from clusterlab import SYSTEM, apply, documents, kvdev_host, minimal_vmi, refusals, wait_for
from kubernetes import client
from kubernetes.client.exceptions import ApiException


def test_every_shipped_object_is_accepted(shipped):
    assert ("ClusterRole", "kvdev-host-controller") in shipped
    assert ("Deployment", "kvdev-host-controller") in shipped
    assert ("DaemonSet", "kvdev-host-plugin") in shipped
    assert ("DaemonSet", "kvdev-host-relay") in shipped
    assert ("MutatingAdmissionPolicy", "kvdev-kvdev-system-vmi-wiring") in shipped
    # controller.yaml: 13 objects, plugin.yaml: 7, relay.yaml: 7 (helm template)
    assert len(shipped) == 27


def test_the_example_vmi_and_claims_are_accepted(kube, shipped):
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": "vms"}})
    wait_for(
        "ServiceAccount vms/default", lambda: core.list_namespaced_service_account("vms").items
    )
    made = apply(kube, documents("vmi-example.yaml"))
    assert [m.kind for m in made] == [
        "ResourceClaim",
        "ResourceClaimTemplate",
        "VirtualMachineInstance",
        "VirtualMachineInstance",  # vm1-sriov: KubeVirt <= v1.9's shape
    ]
    vmi = made[2]
    # The CRD is structural: what kvdev reads survives, typed.
    assert vmi.spec.networks[1].resourceClaim.requestName == "nic-1"


def as_controller(controller_config):
    from kubernetes import config  # noqa: PLC0415

    return config.new_client_from_config(str(controller_config))


@pytest.mark.parametrize(
    ("call", "verb"),
    [
        (lambda k: client.CoreV1Api(k).list_namespaced_secret(SYSTEM), "list secrets"),
        (
            lambda k: client.CoreV1Api(k).delete_namespaced_config_map("x", SYSTEM),
            "delete configmaps",
        ),
        (lambda k: client.CoreV1Api(k).create_namespaced_pod(SYSTEM, _POD), "create pods"),
        (
            lambda k: client.CustomObjectsApi(k).delete_namespaced_custom_object(
                "kubevirt.io", "v1", SYSTEM, "virtualmachineinstances", "x"
            ),
            "delete VMIs",
        ),
        (
            lambda k: client.CoordinationV1Api(k).list_namespaced_lease("default"),
            "leases elsewhere",
        ),
    ],
)
def test_a_verb_the_controller_does_not_hold_is_refused_403(controller_config, call, verb):
    with pytest.raises(ApiException) as refused:
        call(as_controller(controller_config))
    assert refused.value.status == 403, verb


_POD = {"metadata": {"name": "x"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}


def test_the_controller_as_its_service_account_writes_the_owned_configmap(
    kube, controller_config, namespace, tmp_path
):
    """OwnerReferencesPermissionEnforcement: blockOwnerDeletion needs update on
    virtualmachineinstances/finalizers (the shipped ClusterRole lacked it: 403)."""
    apply(kube, [minimal_vmi("vm1", namespace)])
    core = client.CoreV1Api(kube)
    env = {"POD_NAMESPACE": SYSTEM, "POD_NAME": "ctl-0"}
    args = ("controller", "--kubeconfig", str(controller_config), "--leader-elect")
    with kvdev_host(tmp_path / "controller.log", *args, env=env) as ctl:

        def made():
            assert ctl.alive(), ctl.text()
            assert refusals(ctl.text()) == []
            found = core.list_namespaced_config_map(
                namespace, field_selector="metadata.name=kvdev-vm1"
            )
            return found.items

        (cm,) = wait_for("ConfigMap kvdev-vm1", made)
    (owner,) = cm.metadata.owner_references
    assert (owner.kind, owner.name, owner.block_owner_deletion) == (
        "VirtualMachineInstance",
        "vm1",
        True,
    )
    assert refusals(ctl.text()) == []
    assert ctl.proc.returncode == 0, ctl.text()
