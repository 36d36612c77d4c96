"""The objects of a host-path test in one namespace (``World``): a Node, a DeviceClass and a
ResourceSlice of VFs, a claim, a ResourceClaimTemplate, a VMI using both and its virt-launcher
pod; and reading back what the controller wrote."""

import json

from clusterlab import add_node, apply, resource_slice, wait_for
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

    DEVICES_KEY = "vm1-devices.nic-1.{driver}-metadata.json"

    @property
    def devices_key(self):
        return self.DEVICES_KEY.format(driver=self.driver)

    def running(self):
        """Claim, template, VMI, launcher pod scheduled, the VMI Running on its node."""
        self.claim()
        self.template()
        vmi = self.vmi()
        pod, claims = self.scheduled(self.launcher(vmi).metadata.name)
        self.custom.patch_namespaced_custom_object(
            "kubevirt.io", "v1", self.ns, "virtualmachineinstances", vmi.metadata.name,
            {"status": {"nodeName": self.node, "phase": "Running"}},
        )  # fmt: skip
        return vmi, pod, claims

    def report_network(self, claim, ip):
        """What the driver does: status.devices[].networkData of the claim's device."""
        (result,) = claim.status.allocation.devices.results
        device = {"driver": result.driver, "pool": result.pool, "device": result.device}
        status = {
            "status": {
                "devices": [{**device, "networkData": {"interfaceName": "net1", "ips": [ip]}}]
            }
        }
        self.resource.patch_namespaced_resource_claim_status(claim.metadata.name, self.ns, status)

    def stream_with(self, text, what="the stream"):
        """Wait until the devices claim's stream holds ``text``; that stream."""
        return wait_for(
            f"{what} holds {text}",
            lambda: (s := self.stream(self.devices_key)) and text in json.dumps(s) and s,
        )
