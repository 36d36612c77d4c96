"""kvdev.host.publish.metadata: allocated claim + slices -> KEP-5304 DeviceMetadata (pure)."""

import copy
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from kvdev.errors import SchemaError
from kvdev.host.k8s import ResourceClaim, load
from kvdev.host.k8s.device import NetworkDeviceData
from kvdev.host.publish.devicestatus import apply_configuration, device_status
from kvdev.host.publish.metadata import (
    NUMA_NODE,
    PCI_BUS_ID,
    PCIE_ROOT,
    build_metadata,
    claim_identity,
    network_from_status,
)
from kvdev.schema import DEVICE_METADATA, decode_stream, encode_stream
from pydantic_schema.metadata import DeviceMetadata as JudgeMetadata

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "packaging" / "examples" / "host"
GOLDEN = REPO / "tests" / "data" / "host-prepare"
UID = "8c1d2f55-2a0e-4c8e-9e1b-5f3f0b7d2a11"
NOW = datetime(2026, 11, 30, 4, 0, 0, tzinfo=UTC)


TWO_VFS = GOLDEN / "claims-two-vfs.yaml"  # vm1-devices with one request ("nics") for two VFs


def raw(name):
    return list(yaml.safe_load_all((EXAMPLES / name).read_text()))


def claims():
    found = {c.metadata.name: c for c in load((EXAMPLES / "claims.yaml").read_text(), "claims")}
    return found | {c.metadata.name: c for c in load(TWO_VFS.read_text(), "two-vfs")}


def first_available_nic():
    """The fast-nic claim as a firstAvailable request that got its "rdma" subrequest."""
    data = copy.deepcopy(raw("claims.yaml")[1])
    data["spec"]["devices"]["requests"][0] = {
        "name": "nic",
        "firstAvailable": [
            {"name": "rdma", "deviceClassName": "rdma-nic"},
            {"name": "plain", "deviceClassName": "nic"},
        ],
    }
    data["status"]["allocation"]["devices"]["results"][0]["request"] = "nic/rdma"
    return claim_from(data)


def slices():
    return list(load((EXAMPLES / "slices.yaml").read_text(), "slices"))


def claim_from(data):
    (obj,) = load(json.dumps(data), "test")
    assert isinstance(obj, ResourceClaim)
    return obj


def vm1_raw():
    return copy.deepcopy(next(yaml.safe_load_all(TWO_VFS.read_text())))


def attrs(doc, request=0, device=0):
    return doc.requests[request].devices[device].attributes


def test_nvidia_pcie_bus_id_and_numa_become_standard_attributes_normalized():
    (gpu,) = build_metadata(claims()["vm1-devices"], slices(), "gpu.nvidia.com")
    assert gpu.request == "gpu"
    a = attrs(gpu.document)
    assert a[PCI_BUS_ID].string == "0000:ca:00.0"  # from pcieBusID "0000:CA:00.0"
    assert a[NUMA_NODE].int_ == 1  # from numa
    assert a[PCIE_ROOT].string == "pci0000:c9"  # the slice's own
    assert a["pcieBusID"].string == "0000:CA:00.0"  # the driver's attribute stays as it was
    assert list(a) == sorted(a)  # Go writes map keys sorted


def test_dranet_pci_address_becomes_pci_bus_id():
    (nic,) = build_metadata(claims()["virt-launcher-vm1-fast-nic-q7w2x"], slices(), "dra.net")
    a = attrs(nic.document)
    assert a[PCI_BUS_ID].string == "0000:5e:00.1"
    assert a[NUMA_NODE].ints == [0, 1]  # the slice's list form is kept
    assert PCIE_ROOT not in a  # nothing to derive it from


def test_standard_attribute_in_the_slice_wins_over_driver_specific():
    data = raw("slices.yaml")[0]
    gpu_slice = data["items"][1]
    dev = gpu_slice["spec"]["devices"][0]
    dev["attributes"][PCI_BUS_ID] = {"string": "0000:CB:00.0"}
    (s,) = load(json.dumps(gpu_slice), "s")
    (gpu,) = build_metadata(claims()["vm1-devices"], [s], "gpu.nvidia.com")
    assert attrs(gpu.document)[PCI_BUS_ID].string == "0000:cb:00.0"


def test_template_claim_gets_pod_claim_name_and_keeps_the_subrequest():
    (nic,) = build_metadata(first_available_nic(), slices(), "dra.net")
    doc = nic.document
    assert nic.request == "nic"  # the base request names the file
    assert doc.pod_claim_name == "fast-nic"
    assert [r.name for r in doc.requests] == ["nic/rdma"]  # kept inside the file
    assert doc.metadata.generation == 1


def test_one_document_per_base_request_in_allocation_order():
    data = vm1_raw()
    results = data["status"]["allocation"]["devices"]["results"]
    results.insert(
        0, {"request": "b", "driver": "sriov.example.com", "pool": "node-a", "device": "vf-2"}
    )
    results[2]["request"] = "a/x"  # vf-2 (moved to third) serves subrequest a/x
    out = build_metadata(claim_from(data), slices(), "sriov.example.com")
    assert [m.request for m in out] == ["b", "nics", "a"]
    assert [r.name for r in out[2].document.requests] == ["a/x"]
    assert [d.name for d in out[1].document.requests[0].devices] == ["vf-1"]


def test_network_data_from_claim_status_and_explicit_override():
    claim = claims()["vm1-devices"]
    (nics,) = build_metadata(claim, slices(), "sriov.example.com")
    got = [d.network_data.hardware_address for d in nics.document.requests[0].devices]
    assert got == ["02:00:00:3b:02:01", "02:00:00:3b:02:02"]
    override = {
        ("sriov.example.com", "node-a", "vf-2"): NetworkDeviceData.model_validate(
            {"interfaceName": "x0", "ips": ["10.9.0.1/24"]}
        )
    }
    (nics,) = build_metadata(claim, slices(), "sriov.example.com", network_data=override)
    devices = nics.document.requests[0].devices
    assert devices[0].network_data is None  # an explicit map replaces the status entirely
    assert devices[1].network_data.ips == ["10.9.0.1/24"]
    assert set(network_from_status(claim)) == {
        ("sriov.example.com", "node-a", "vf-1"),
        ("sriov.example.com", "node-a", "vf-2"),
    }


def test_newest_pool_generation_is_used():
    data = raw("slices.yaml")[0]["items"][0]
    newer = copy.deepcopy(data)
    newer["metadata"]["name"] = "newer"
    newer["spec"]["pool"]["generation"] = 2
    newer["spec"]["devices"][0]["attributes"]["pfName"] = {"string": "ens9"}
    old, new = (load(json.dumps(d), "s")[0] for d in (data, newer))
    (nics,) = build_metadata(claims()["vm1-devices"], [new, old], "sriov.example.com")
    assert attrs(nics.document)["pfName"].string == "ens9"


def test_golden_stream_bytes():
    expected = (GOLDEN / "vms_vm1-devices-gpu-metadata.json").read_bytes()
    (gpu,) = build_metadata(claims()["vm1-devices"], slices(), "gpu.nvidia.com")
    data = encode_stream(gpu.document, DEVICE_METADATA)
    assert data == expected  # byte for byte against the Go rules: tests/unit/test_gojson.py
    read = decode_stream(data, DEVICE_METADATA)
    assert read.api_version == "metadata.resource.k8s.io/v1beta1"
    assert read.warnings == ()  # the v1alpha1 object after it says the same
    decoded = decode_stream(data, DEVICE_METADATA)
    assert decoded.warnings == ()
    assert decoded.document.to_json_dict() == gpu.document.to_json_dict()


@pytest.mark.parametrize(
    ("claim", "driver"),
    [
        ("vm1-devices", "gpu.nvidia.com"),
        ("vm1-devices", "sriov.example.com"),
        ("virt-launcher-vm1-fast-nic-q7w2x", "dra.net"),
    ],
)
def test_the_pydantic_judge_accepts_every_built_document_unchanged(claim, driver):
    built = build_metadata(claims()[claim], slices(), driver)
    assert built
    for item in built:
        body = item.document.to_json_dict()
        judged = JudgeMetadata.model_validate(body, strict=True)
        assert judged.to_json_dict() == body


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("metadata", "uid"), "../../etc", "is not a UID"),
        (("metadata", "uid"), None, "required field is missing"),
        (("metadata", "namespace"), None, "required field is missing"),
    ],
)
def test_unsafe_identity_is_rejected(path, value, message):
    data = vm1_raw()
    if value is None:
        del data[path[0]][path[1]]
    else:
        data[path[0]][path[1]] = value
    with pytest.raises(SchemaError) as e:
        claim_identity(claim_from(data))
    assert message in str(e.value)
    assert "ResourceClaim/" in str(e.value)


def test_pod_claim_name_annotation_must_be_a_dns_label():
    data = copy.deepcopy(raw("claims.yaml")[1])
    data["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] = "../x"
    with pytest.raises(SchemaError) as e:
        build_metadata(claim_from(data), slices(), "dra.net")
    assert "pod-claim-name" in str(e.value)
    assert "is not a DNS label" in str(e.value)


def test_not_allocated_and_missing_device_are_schema_errors():
    data = vm1_raw()
    del data["status"]
    with pytest.raises(
        SchemaError, match=r"vm1-devices: status.allocation: the claim is not allocated"
    ):
        build_metadata(claim_from(data), slices(), "gpu.nvidia.com")
    with pytest.raises(
        SchemaError, match=r"results\[2\]: device gpu.nvidia.com/node-a/gpu-vfio-0 is in none"
    ):
        build_metadata(claims()["vm1-devices"], slices()[:1], "gpu.nvidia.com")


def test_bad_driver_name_is_rejected():
    with pytest.raises(SchemaError, match="driver name"):
        build_metadata(claims()["vm1-devices"], slices(), "../gpu")


def test_other_drivers_give_nothing():
    assert build_metadata(claims()["vm1-devices"], slices(), "dra.net") == ()


def test_claim_status_apply_configuration():
    now = NOW
    claim = claims()["vm1-devices"]
    body = apply_configuration(claim, "sriov.example.com", now=now)
    assert body["apiVersion"] == "resource.k8s.io/v1"
    assert body["kind"] == "ResourceClaim"
    assert body["metadata"] == {"name": "vm1-devices", "namespace": "vms", "uid": UID}
    entries = body["status"]["devices"]
    assert [(e["pool"], e["device"]) for e in entries] == [("node-a", "vf-1"), ("node-a", "vf-2")]
    ready = entries[0]["conditions"][0]
    assert (ready["type"], ready["status"]) == ("Ready", "True")
    assert ready["lastTransitionTime"] == "2026-11-30T04:00:00Z"
    assert entries[0]["networkData"]["hardwareAddress"] == "02:00:00:3b:02:01"
    assert "shareID" not in entries[0]
    # a Ready condition already True keeps its time, so applying again changes nothing
    template = claims()["virt-launcher-vm1-fast-nic-q7w2x"]
    (entry,) = device_status(template, "dra.net", now=now)
    assert entry["conditions"][0]["lastTransitionTime"] == "2026-11-30T03:00:00Z"
    assert device_status(template, "gpu.nvidia.com", now=now) == []


def test_claim_status_keeps_share_id_and_one_entry_per_device():
    data = vm1_raw()
    results = data["status"]["allocation"]["devices"]["results"]
    share = "4f1e2d3c-1111-4222-8333-944455556666"
    results[0]["shareID"] = share
    results.append({**results[0], "request": "nics"})  # the same share twice: one entry
    entries = device_status(claim_from(data), "sriov.example.com", now=NOW)
    assert [e.get("shareID") for e in entries] == [share, None]
