"""kvdev.host.cdi.spec: the CDI spec of a metadata mount, valid against the CDI JSON schema."""

import json
from pathlib import Path

import jsonschema
import pytest
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

from kvdev.host.cdi import spec as cdi

REPO = Path(__file__).resolve().parents[3]
SCHEMA_DIR = REPO / "tests" / "data" / "cdi-schema"
GOLDEN = REPO / "tests" / "data" / "host-prepare"
UID = "8c1d2f55-2a0e-4c8e-9e1b-5f3f0b7d2a11"
HOST = (
    "/var/lib/kubelet/plugins/gpu.nvidia.com/dra-device-metadata/vms_vm1-devices/gpu/metadata.json"
)


def cdi_validator():
    schema = json.loads((SCHEMA_DIR / "schema.json").read_text())
    defs = json.loads((SCHEMA_DIR / "defs.json").read_text())
    resource = Resource.from_contents(defs, default_specification=DRAFT7)
    registry = Registry().with_resource("defs.json", resource)
    return jsonschema.Draft7Validator(schema, registry=registry)


def test_spec_follows_upstream_naming_and_paths():
    spec = cdi.metadata_spec("gpu.nvidia.com", UID, "gpu", host_path=HOST, claim_name="vm1-devices")
    assert spec.file_name == f"gpu.nvidia.com_metadata_{UID}_gpu.json"
    assert spec.device_id == f"gpu.nvidia.com/metadata={UID}_gpu"
    c = spec.content
    assert c["kind"] == "gpu.nvidia.com/metadata"
    assert c["cdiVersion"] == "0.5.0"  # what upstream writes, whatever the UID
    (device,) = c["devices"]
    assert device["name"] == f"{UID}_gpu"
    assert device["containerEdits"] == {
        "mounts": [
            {
                "hostPath": HOST,
                "containerPath": "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/"
                "vm1-devices/gpu/gpu.nvidia.com-metadata.json",
                "options": ["ro", "bind"],
            }
        ]
    }
    assert spec.to_bytes() == (GOLDEN / f"gpu.nvidia.com_metadata_{UID}_gpu.json").read_bytes()


def test_template_claims_mount_under_resourceclaimtemplates():
    spec = cdi.metadata_spec(
        "dra.net",
        UID,
        "nic",
        host_path="/h",
        claim_name="pod-x-fast-nic-q7w2x",
        pod_claim_name="fast-nic",
    )
    mount = spec.content["devices"][0]["containerEdits"]["mounts"][0]
    assert mount["containerPath"] == (
        "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/fast-nic/nic/"
        "dra.net-metadata.json"
    )


@pytest.mark.parametrize(
    ("uid", "pod_claim"),
    [(UID, None), ("A" + UID[1:], "fast-nic"), ("abcdef01-2a0e-4c8e-9e1b-5f3f0b7d2a11", None)],
)
def test_specs_are_valid_cdi(uid, pod_claim):
    spec = cdi.metadata_spec(
        "sriov.example.com",
        uid,
        "nics",
        host_path="/x/y.json",
        claim_name="c",
        pod_claim_name=pod_claim,
    )
    cdi_validator().validate(json.loads(spec.to_bytes()))


def test_schema_catches_a_broken_spec():
    spec = cdi.metadata_spec("dra.net", UID, "nic", host_path="/h", claim_name="c").content
    del spec["devices"][0]["containerEdits"]["mounts"][0]["containerPath"]
    with pytest.raises(jsonschema.ValidationError):
        cdi_validator().validate(spec)


def test_cdi_version_is_the_minimum_upstreams_writer_asks_for():
    # upstream's writer (judged in test_metadata_writer_oracle) writes
    # cdispec.MinimumRequiredVersion: 0.5.0 only for a device name that starts with a digit
    letter = cdi.metadata_spec(
        "dra.net", "abcdef01-" + UID[9:], "nic", host_path="/h", claim_name="c"
    )
    digit = cdi.metadata_spec(
        "dra.net", "01abcdef-" + UID[9:], "nic", host_path="/h", claim_name="c"
    )
    assert letter.content["cdiVersion"] == "0.3.0"
    assert digit.content["cdiVersion"] == "0.5.0"
    assert letter.content["containerEdits"] == {}  # written by Go despite omitempty


@pytest.mark.parametrize("vendor", ["1gpu.example.com", "gpu.example.com-", "gpu/x", "", "a b"])
def test_vendor_naming_rules(vendor):
    with pytest.raises(ValueError, match="CDI vendor"):
        cdi.kind(vendor)


@pytest.mark.parametrize("name", ["_x", "x_", "a/b", "a b", "..", ""])
def test_device_naming_rules(name):
    with pytest.raises(ValueError, match="CDI device name"):
        cdi.check_device_name(name)


def test_class_naming_rules():
    assert cdi.check_class("metadata") == "metadata"
    with pytest.raises(ValueError, match="CDI class"):
        cdi.check_class("m" * 64)
    with pytest.raises(ValueError, match="CDI class"):
        cdi.check_class("9meta")
