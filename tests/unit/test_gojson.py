"""The bytes kvdev's host writer publishes are the bytes upstream's Go writer would.

Checked against ``goref``, a second encoder of Go's encoding/json rules written character by
character for these tests, on the bundled example (a golden file), on the Go type's layout
rules (field order, omitempty, pointers) and on random values (escapes, nesting, Unicode).
"""

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

import goref
from kvdev.host.k8s import load
from kvdev.host.publish import cdi
from kvdev.host.publish.metadata import build_metadata
from kvdev.schema import DEVICE_METADATA, encode_stream, gojson
from kvdev.schema.metadata import GO_LAYOUT, V1ALPHA1, V1BETA1

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "packaging" / "examples" / "host"
GOLDEN = REPO / "tests" / "data" / "host-prepare"
UID = "8c1d2f55-2a0e-4c8e-9e1b-5f3f0b7d2a11"


def go_object(api: str) -> dict:
    """The example GPU claim's metadata, keys in api/metadata's Go struct order, by hand."""
    attrs = {
        "deviceID": {"string": "0x20b0"},
        "numa": {"int": 1},
        "pcieBusID": {"string": "0000:CA:00.0"},
        "productName": {"string": "NVIDIA A100-SXM4-40GB"},
        "resource.kubernetes.io/numaNode": {"int": 1},
        "resource.kubernetes.io/pciBusID": {"string": "0000:ca:00.0"},
        "resource.kubernetes.io/pcieRoot": {"string": "pci0000:c9"},
        "type": {"string": "vfio"},
        "vendorID": {"string": "0x10de"},
    }
    return {
        "kind": "DeviceMetadata",  # TypeMeta is inlined: Kind comes before APIVersion
        "apiVersion": api,
        "metadata": {"name": "vm1-devices", "namespace": "vms", "uid": UID, "generation": 1},
        "requests": [
            {
                "name": "gpu",
                "devices": [
                    {
                        "driver": "gpu.nvidia.com",
                        "pool": "node-a",
                        "name": "gpu-vfio-0",
                        "attributes": attrs,  # a Go map: keys sorted
                    }
                ],
            }
        ],
    }


def example_gpu_stream() -> bytes:
    claims = {c.metadata.name: c for c in load((EXAMPLES / "claims.yaml").read_text(), "c")}
    slices = list(load((EXAMPLES / "slices.yaml").read_text(), "s"))
    (gpu,) = build_metadata(claims["vm1-devices"], slices, "gpu.nvidia.com")
    return encode_stream(gpu.document, DEVICE_METADATA)


def test_the_example_stream_is_what_the_go_writer_writes():
    expected = "".join(goref.marshal_indent(go_object(v)) + "\n" for v in (V1BETA1, V1ALPHA1))
    data = example_gpu_stream()
    assert data == expected.encode()
    assert data == (GOLDEN / "vms_vm1-devices-gpu-metadata.json").read_bytes()
    assert data.startswith(b'{\n  "kind": "DeviceMetadata",\n  "apiVersion": ')
    assert data.count(b"\n}\n") == 2  # each object ends with a newline, newest first


def test_the_cdi_spec_is_what_the_go_writer_writes_with_no_trailing_newline():
    host = "/var/lib/kubelet/plugins/gpu.nvidia.com/dra-device-metadata/vms_vm1-devices/gpu/m.json"
    for uid in (UID, "abcdef01-2a0e-4c8e-9e1b-5f3f0b7d2a11"):  # digit or letter first: 0.5.0
        spec = cdi.metadata_spec("gpu.nvidia.com", uid, "gpu", host_path=host, claim_name="vm1")
        expected = {
            "cdiVersion": "0.5.0",
            "kind": "gpu.nvidia.com/metadata",
            "devices": [
                {
                    "name": f"{uid}_gpu",
                    "containerEdits": {
                        "mounts": [
                            {
                                "hostPath": host,
                                "containerPath": "/var/run/kubernetes.io/dra-device-attributes/"
                                "resourceclaims/vm1/gpu/gpu.nvidia.com-metadata.json",
                                "options": ["ro", "bind"],
                            }
                        ]
                    },
                }
            ],
        }
        assert spec.to_bytes() == goref.marshal_indent(expected).encode()
    golden = GOLDEN / f"gpu.nvidia.com_metadata_{UID}_gpu.json"
    assert not golden.read_bytes().endswith(b"\n")


def test_the_go_layout_orders_keys_drops_empty_values_and_keeps_set_pointers():
    data = {
        "apiVersion": V1BETA1,
        "kind": "DeviceMetadata",
        "requests": [
            {
                "devices": [
                    {
                        "networkData": {},  # *NetworkDeviceData: set, so written as {}
                        "attributes": {"b": {"bool": False}, "a": {"int": 0, "strings": []}},
                        "name": "d",
                    }
                ],
                "name": "r",
            },
            {"name": "empty", "devices": []},  # omitempty: no "devices" key
        ],
        "podClaimName": "",  # *string: "" is set, so it is written
        "metadata": {"generation": 0, "uid": "", "name": "c"},  # omitempty: 0 and "" dropped
    }
    laid_out = gojson.go_value(data, GO_LAYOUT)
    assert json.dumps(laid_out) == json.dumps(
        {
            "kind": "DeviceMetadata",
            "apiVersion": V1BETA1,
            "metadata": {"name": "c"},
            "podClaimName": "",
            "requests": [
                {
                    "name": "r",
                    "devices": [
                        {
                            "driver": "",  # no omitempty on driver, pool and name
                            "pool": "",
                            "name": "d",
                            "attributes": {"a": {"int": 0}, "b": {"bool": False}},
                            "networkData": {},
                        }
                    ],
                },
                {"name": "empty"},
            ],
        }
    )


strings = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
specials = st.sampled_from(["<", ">", "&", "\u2028", "\u2029", "\b", "\f", "\x00", "\x1f", "\x7f"])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | strings | specials,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(strings, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_marshal_indent_matches_the_go_rules_on_any_value(value):
    assert gojson.marshal_indent(value) == goref.marshal_indent(value)
