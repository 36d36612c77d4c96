"""The controller finds the claims KubeVirt makes itself in the launcher pod, and renders them.

KubeVirt main's ``<vmi>-cpu-claim`` (DeviceClass ``dra.cpu``, label ``kubevirt.io/resource:
cpu-dra``) is not in the VMI's ``spec.resourceClaims``: only the launcher pod names it.
"""

import copy

from test_controller_render import KEY, by_kind, docs, index_of, rendered

from kvdev.host.controller.index import Kind, parse
from kvdev.host.controller.render import Verb, render
from kvdev.schema import Role, check_file, metadata_location

CPU_KEY = "vm1-cpu-claim.req-cpu.dra.cpu-metadata.json"

CPU_CLAIM = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {
        "name": "vm1-cpu-claim",
        "namespace": "vms",
        "uid": "5b0e6c7a-1d2f-4e3a-9c8b-7a6f5e4d3c2b",
        "labels": {"kubevirt.io/resource": "cpu-dra"},
    },
    "spec": {
        "devices": {"requests": [{"name": "req-cpu", "exactly": {"deviceClassName": "dra.cpu"}}]}
    },
    "status": {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "req-cpu",
                        "driver": "dra.cpu",
                        "pool": "node-a",
                        "device": "cpudev000",
                    }
                ]
            }
        }
    },
}
CPU_SLICE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceSlice",
    "metadata": {"name": "node-a-dra.cpu-c1"},
    "spec": {
        "driver": "dra.cpu",
        "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
        "nodeName": "node-a",
        "devices": [
            {"name": "cpudev000", "attributes": {"dra.cpu/numaNodeID": {"int": 0}}},
        ],
    },
}


def with_cpu_claim(where):
    objects = [*copy.deepcopy(docs()), copy.deepcopy(CPU_CLAIM), copy.deepcopy(CPU_SLICE)]
    pod = by_kind(objects, "Pod", "virt-launcher-vm1-abcde")
    if where == "status":
        pod["status"]["resourceClaimStatuses"].append(
            {"name": "cpu", "resourceClaimName": "vm1-cpu-claim"}
        )
    else:
        pod["spec"].setdefault("resourceClaims", []).append(
            {"name": "cpu", "resourceClaimName": "vm1-cpu-claim"}
        )
    return objects


def test_a_claim_found_only_in_the_pods_claim_statuses_is_rendered():
    result = rendered(with_cpu_claim("status"))
    assert result.verb is Verb.CREATE
    assert CPU_KEY in result.data
    assert result.problems == ()
    read = check_file(
        CPU_KEY,
        Role.DEVICE_METADATA,
        result.data[CPU_KEY].encode(),
        metadata_location("resourceclaims/vm1-cpu-claim/req-cpu/dra.cpu-metadata.json"),
    )
    (device,) = read.described
    assert (device.driver, device.name, device.cpu) == ("dra.cpu", "cpudev000", True)


def test_a_claim_the_pod_names_in_its_spec_is_rendered_too():
    assert CPU_KEY in rendered(with_cpu_claim("spec")).data


def test_without_the_pod_naming_it_the_claim_is_not_rendered():
    objects = [*copy.deepcopy(docs()), copy.deepcopy(CPU_CLAIM), copy.deepcopy(CPU_SLICE)]
    assert CPU_KEY not in rendered(objects).data


def test_a_vmi_whose_only_claim_kubevirt_made_is_rendered():
    objects = with_cpu_claim("status")
    vmi = by_kind(objects, "VirtualMachineInstance", "vm1")
    vmi["spec"].pop("resourceClaims")
    for device in ("gpus", "hostDevices"):
        vmi["spec"]["domain"]["devices"].pop(device, None)
    vmi["spec"]["networks"] = [n for n in vmi["spec"]["networks"] if "resourceClaim" not in n]
    names = {n["name"] for n in vmi["spec"]["networks"]}
    vmi["spec"]["domain"]["devices"]["interfaces"] = [
        i for i in vmi["spec"]["domain"]["devices"]["interfaces"] if i["name"] in names
    ]
    pod = by_kind(objects, "Pod", "virt-launcher-vm1-abcde")
    pod["status"]["resourceClaimStatuses"] = [{"name": "cpu", "resourceClaimName": "vm1-cpu-claim"}]
    index = index_of(objects)
    assert KEY in index.vmis()
    inputs = index.inputs(KEY)
    assert inputs is not None
    result = render(inputs)
    assert result.verb is Verb.CREATE
    assert set(result.data) >= {CPU_KEY}


def test_a_change_of_a_vmi_whose_only_claim_kubevirt_made_concerns_it():
    objects = with_cpu_claim("status")
    vmi = by_kind(objects, "VirtualMachineInstance", "vm1")
    vmi["spec"].pop("resourceClaims")
    pod = by_kind(objects, "Pod", "virt-launcher-vm1-abcde")
    pod["status"]["resourceClaimStatuses"] = [{"name": "cpu", "resourceClaimName": "vm1-cpu-claim"}]
    index = index_of(objects)
    changed = copy.deepcopy(vmi)
    changed["metadata"]["resourceVersion"] = "2"
    changed["status"]["nodeName"] = "node-b"
    assert index.upsert(Kind.VMI, parse(Kind.VMI, changed)) == {KEY}
