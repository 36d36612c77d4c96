"""The committed gRPC stubs are what the .proto files generate, and the wire names are kubelet's."""

import filecmp
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from kvdev.host.proto import dra_v1_pb2, dra_v1beta1_pb2, registration_pb2

PROTO_DIR = Path(__file__).resolve().parents[3] / "agent" / "kvdev" / "host" / "proto"
COMMITTED = sorted(p.name for p in PROTO_DIR.iterdir() if "_pb2" in p.name)


def test_every_proto_has_its_four_committed_stubs():
    protos = sorted(p.stem for p in PROTO_DIR.glob("*.proto"))
    assert protos == ["dra_v1", "dra_v1beta1", "registration"]
    expected = sorted(
        f"{stem}{suffix}"
        for stem in protos
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")
    )
    assert sorted(COMMITTED) == expected


@pytest.mark.skipif(
    importlib.util.find_spec("grpc_tools") is None
    or importlib.util.find_spec("mypy_protobuf") is None,
    reason="regenerating needs grpcio-tools and mypy-protobuf (the dev extra)",
)
def test_regenerated_stubs_match_the_committed_ones(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "kvdev.host.proto", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    fresh = tmp_path / "kvdev" / "host" / "proto"
    assert sorted(p.name for p in fresh.iterdir()) == COMMITTED
    _, mismatch, errors = filecmp.cmpfiles(PROTO_DIR, fresh, COMMITTED, shallow=False)
    assert (mismatch, errors) == ([], []), "stubs are stale: run `make proto`"


def _fields(message) -> dict[str, tuple[int, bool]]:
    return {f.name: (f.number, f.is_repeated) for f in message.DESCRIPTOR.fields}


def test_registration_wire_names_and_numbers():
    service = registration_pb2.DESCRIPTOR.services_by_name["Registration"]
    assert service.full_name == "pluginregistration.Registration"
    methods = {m.name: (m.input_type.full_name, m.output_type.full_name) for m in service.methods}
    assert methods == {
        "GetInfo": ("pluginregistration.InfoRequest", "pluginregistration.PluginInfo"),
        "NotifyRegistrationStatus": (
            "pluginregistration.RegistrationStatus",
            "pluginregistration.RegistrationStatusResponse",
        ),
    }
    assert _fields(registration_pb2.PluginInfo) == {
        "type": (1, False),
        "name": (2, False),
        "endpoint": (3, False),
        "supported_versions": (4, True),
    }
    assert _fields(registration_pb2.RegistrationStatus) == {
        "plugin_registered": (1, False),
        "error": (2, False),
    }
    assert _fields(registration_pb2.InfoRequest) == {}
    assert _fields(registration_pb2.RegistrationStatusResponse) == {}


@pytest.mark.parametrize(("pb2", "version"), [(dra_v1_pb2, "v1"), (dra_v1beta1_pb2, "v1beta1")])
def test_dra_wire_names_and_numbers(pb2, version):
    package = f"k8s.io.kubelet.pkg.apis.dra.{version}"
    service = pb2.DESCRIPTOR.services_by_name["DRAPlugin"]
    assert service.full_name == f"{package}.DRAPlugin"
    assert {m.name: m.input_type.name for m in service.methods} == {
        "NodePrepareResources": "NodePrepareResourcesRequest",
        "NodeUnprepareResources": "NodeUnprepareResourcesRequest",
    }
    assert {m.name: m.output_type.name for m in service.methods} == {
        "NodePrepareResources": "NodePrepareResourcesResponse",
        "NodeUnprepareResources": "NodeUnprepareResourcesResponse",
    }
    assert _fields(pb2.Claim) == {"namespace": (1, False), "uid": (2, False), "name": (3, False)}
    # kubelet's v1 Device has `optional string share_id = 5`; v1beta1 has no share.
    assert _fields(pb2.Device) == {
        "request_names": (1, True),
        "pool_name": (2, False),
        "device_name": (3, False),
        "cdi_device_ids": (4, True),
    } | ({"share_id": (5, False)} if version == "v1" else {})
    if version == "v1":
        share = pb2.Device.DESCRIPTOR.fields_by_name["share_id"]
        assert share.has_presence  # proto3 `optional`: unset is told apart from ""
    assert _fields(pb2.NodePrepareResourceResponse) == {"devices": (1, True), "error": (2, False)}
    assert _fields(pb2.NodeUnprepareResourceResponse) == {"error": (1, False)}
    assert _fields(pb2.NodePrepareResourcesRequest) == {"claims": (1, True)}
    assert _fields(pb2.NodeUnprepareResourcesRequest) == {"claims": (1, True)}
    for response, value in (
        (pb2.NodePrepareResourcesResponse, "NodePrepareResourceResponse"),
        (pb2.NodeUnprepareResourcesResponse, "NodeUnprepareResourceResponse"),
    ):
        claims = response.DESCRIPTOR.fields_by_name["claims"]
        assert claims.number == 1
        assert claims.message_type.GetOptions().map_entry
        key, val = claims.message_type.fields
        assert key.type == key.TYPE_STRING
        assert val.message_type.full_name == f"{package}.{value}"


def test_a_v1_message_decodes_as_v1beta1_field_for_field():
    v1 = dra_v1_pb2.NodePrepareResourcesResponse()
    entry = v1.claims["uid-1"]
    entry.error = "e"
    entry.devices.add(
        request_names=["a", "b/c"], pool_name="p", device_name="d", cdi_device_ids=["x"]
    )
    beta = dra_v1beta1_pb2.NodePrepareResourcesResponse.FromString(v1.SerializeToString())
    device = beta.claims["uid-1"].devices[0]
    assert (list(device.request_names), device.pool_name, device.device_name) == (
        ["a", "b/c"],
        "p",
        "d",
    )
    assert list(device.cdi_device_ids) == ["x"]
    assert beta.claims["uid-1"].error == "e"
