"""The whole host path on the real control plane, with the controller as its ServiceAccount.

A DeviceClass and a ResourceSlice published as objects; a virt-launcher pod with a claim and a
ResourceClaimTemplate, its template claim made by the real ResourceClaim controller and both
allocated by the real kube-scheduler's DRA plugin on a kubelet-less Node; the VMI using them;
``kvdev-<vmi>`` rendered; the driver's ``status.devices`` network data changed -> the ConfigMap
follows; the claim re-created under the same name -> its stream's generation restarts at 1; the
VMI deleted -> the real garbage collector deletes the ConfigMap.
"""

import json

import pytest
from clusterlab import SYSTEM, add_node, apply, kvdev_host, resource_slice, wait_for
from kubernetes import client


def first_object(text):
    """The first JSON object of a stream (a stream may hold several versions)."""
    return json.JSONDecoder().raw_decode(text)[0]


class World:
    """The objects of one test namespace, and the calls that read them."""

    def __init__(self, kube, namespace):
        self.kube, self.ns = kube, namespace
        self.core = client.CoreV1Api(kube)
        self.resource = client.ResourceV1Api(kube)
        self.custom = client.CustomObjectsApi(kube)
        self.node = f"node-{namespace}"
        self.driver = f"{namespace}.sriov.example.com"
        self.cls = f"vf-{namespace}"

    def publish(self, devices=4):
        add_node(self.core, self.node)
        selector = f'device.driver == "{self.driver}"'
        apply(
            self.kube,
            [
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "DeviceClass",
                    "metadata": {"name": self.cls},
                    "spec": {"selectors": [{"cel": {"expression": selector}}]},
                },
                resource_slice(
                    f"{self.node}-vfs",
                    self.driver,
                    [
                        {
                            "name": f"vf-{i}",
                            "attributes": {
                                "resource.kubernetes.io/pciBusID": {"string": f"0000:3b:02.{i}"}
                            },
                        }
                        for i in range(devices)
                    ],
                    nodeName=self.node,
                ),
            ],
        )

    def unpublish(self):
        self.resource.delete_resource_slice(f"{self.node}-vfs")
        self.resource.delete_device_class(self.cls)
        self.core.delete_node(self.node)

    def claim(self, name="vm1-devices"):
        request = {"name": "nic-1", "exactly": {"deviceClassName": self.cls}}
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": self.ns},
            "spec": {"devices": {"requests": [request]}},
        }
        return apply(self.kube, [body])[0]

    def template(self):
        request = {"name": "nic", "exactly": {"deviceClassName": self.cls}}
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "fast-nic", "namespace": self.ns},
            "spec": {"spec": {"devices": {"requests": [request]}}},
        }
        apply(self.kube, [body])

    def vmi(self, name="vm1"):
        body = {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": name, "namespace": self.ns},
            "spec": {
                "resourceClaims": [
                    {"name": "devices", "resourceClaimName": "vm1-devices"},
                    {"name": "fast-nic", "resourceClaimTemplateName": "fast-nic"},
                ],
                "networks": [
                    {"name": "default", "pod": {}},
                    {
                        "name": "data0",
                        "resourceClaim": {"claimName": "devices", "requestName": "nic-1"},
                    },
                    {
                        "name": "fast",
                        "resourceClaim": {"claimName": "fast-nic", "requestName": "nic"},
                    },
                ],
                "domain": {
                    "devices": {
                        "interfaces": [
                            {"name": "default", "masquerade": {}},
                            {
                                "name": "data0",
                                "sriov": {},
                                "macAddress": "02:00:00:3b:02:01",
                                "tag": "data0",
                            },
                            {"name": "fast", "sriov": {}, "pciAddress": "0000:07:00.0"},
                        ]
                    }
                },
            },
        }
        return apply(self.kube, [body])[0]

    def launcher(self, vmi, suffix="abcde"):
        """The virt-launcher pod KubeVirt would make for the VMI (owned by it)."""
        owner = {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "name": vmi.metadata.name,
            "uid": vmi.metadata.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"virt-launcher-{vmi.metadata.name}-{suffix}",
                "namespace": self.ns,
                "labels": {"kubevirt.io": "virt-launcher"},
                "ownerReferences": [owner],
            },
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": self.node},
                "resourceClaims": [
                    {"name": "devices", "resourceClaimName": "vm1-devices"},
                    {"name": "fast-nic", "resourceClaimTemplateName": "fast-nic"},
                ],
                "containers": [
                    {
                        "name": "compute",
                        "image": "registry.invalid/virt-launcher:1",
                        "resources": {"claims": [{"name": "devices"}, {"name": "fast-nic"}]},
                    }
                ],
            },
        }
        return apply(self.kube, [body])[0]

    def scheduled(self, pod_name):
        """The pod bound and every claim of it allocated: {pod claim name: claim}."""

        def check():
            pod = self.core.read_namespaced_pod(pod_name, self.ns)
            statuses = {
                s.name: s.resource_claim_name for s in pod.status.resource_claim_statuses or []
            }
            names = {"devices": "vm1-devices", **statuses}
            if not pod.spec.node_name or "fast-nic" not in names:
                return None
            claims = {
                k: self.resource.read_namespaced_resource_claim(v, self.ns)
                for k, v in names.items()
            }
            if not all(c.status and c.status.allocation for c in claims.values()):
                return None
            return pod, claims

        return wait_for(f"pod {pod_name} scheduled and its claims allocated", check)

    def configmap(self, name="kvdev-vm1"):
        found = self.core.list_namespaced_config_map(
            self.ns, field_selector=f"metadata.name={name}"
        )
        return found.items[0] if found.items else None

    def stream(self, key, cm=None):
        cm = cm or self.configmap()
        value = (cm.data or {}).get(key) if cm else None
        return first_object(value) if value else None


@pytest.fixture
def world(kube, namespace):
    w = World(kube, namespace)
    w.publish()
    yield w
    w.unpublish()


@pytest.fixture
def controller(controller_config, tmp_path):
    env = {"POD_NAMESPACE": SYSTEM, "POD_NAME": "ctl-host-path"}
    args = ("controller", "--kubeconfig", str(controller_config), "--leader-elect")
    with kvdev_host(tmp_path / "controller.log", *args, env=env) as ctl:
        yield ctl
    assert "403" not in ctl.text(), ctl.text()


def test_the_whole_host_path(world, controller, capsys):
    world.claim()
    world.template()
    vmi = world.vmi()
    pod = world.launcher(vmi)
    pod, claims = world.scheduled(pod.metadata.name)
    assert pod.spec.node_name == world.node
    for claim in claims.values():
        (result,) = claim.status.allocation.devices.results
        assert (result.driver, result.pool) == (world.driver, f"{world.node}-vfs")
    # virt-handler's part: the VMI runs on the pod's node
    world.custom.patch_namespaced_custom_object(
        "kubevirt.io", "v1", world.ns, "virtualmachineinstances", "vm1",
        {"status": {"nodeName": world.node, "phase": "Running"}},
    )  # fmt: skip
    devices_key = f"vm1-devices.nic-1.{world.driver}-metadata.json"
    fast_key = f"fast-nic.nic.{world.driver}-metadata.json"

    def rendered():
        assert controller.alive(), controller.text()
        cm = world.configmap()
        return cm if cm is not None and {devices_key, fast_key} <= set(cm.data or {}) else None

    cm = wait_for("kvdev-vm1 with both claims' streams", rendered)
    assert set(cm.data) == {devices_key, fast_key, "guest-hints.json"}
    (owner,) = cm.metadata.owner_references
    assert (owner.uid, owner.controller, owner.block_owner_deletion) == (
        vmi.metadata.uid,
        True,
        True,
    )
    first = world.stream(devices_key, cm)
    assert first["metadata"]["uid"] == claims["devices"].metadata.uid
    assert first["metadata"]["generation"] == 1
    hints = json.loads(cm.data["guest-hints.json"])
    assert "02:00:00:3b:02:01" in json.dumps(hints)

    # The driver reports the NIC's network data: the ConfigMap follows (generation 2).
    (result,) = claims["devices"].status.allocation.devices.results
    status = {
        "status": {
            "devices": [
                {
                    "driver": result.driver,
                    "pool": result.pool,
                    "device": result.device,
                    "networkData": {"interfaceName": "net1", "ips": ["10.1.0.5/24"]},
                }
            ]
        }
    }
    world.resource.patch_namespaced_resource_claim_status("vm1-devices", world.ns, status)
    followed = wait_for(
        "the network data in the stream",
        lambda: (s := world.stream(devices_key)) and "10.1.0.5/24" in json.dumps(s) and s,
    )
    assert followed["metadata"]["generation"] == 2

    # The claim re-created under the same name (the launcher pod replaced): generation 1 again.
    world.core.delete_namespaced_pod(pod.metadata.name, world.ns, grace_period_seconds=0)
    world.resource.delete_namespaced_resource_claim("vm1-devices", world.ns)

    def gone():
        names = {
            c.metadata.name for c in world.resource.list_namespaced_resource_claim(world.ns).items
        }
        return "vm1-devices" not in names

    wait_for("the old claim deleted (reservation lifted by the ResourceClaim controller)", gone)
    again = world.claim()
    assert again.metadata.uid != claims["devices"].metadata.uid
    world.scheduled(world.launcher(vmi, suffix="fghij").metadata.name)
    restarted = wait_for(
        "the new claim's stream",
        lambda: (
            (s := world.stream(devices_key)) and s["metadata"]["uid"] == again.metadata.uid and s
        ),
    )
    assert restarted["metadata"]["generation"] == 1

    # The VMI deleted: the real garbage collector deletes its ConfigMap.
    world.custom.delete_namespaced_custom_object(
        "kubevirt.io", "v1", world.ns, "virtualmachineinstances", "vm1"
    )
    wait_for("the garbage collector deletes kvdev-vm1", lambda: world.configmap() is None)
