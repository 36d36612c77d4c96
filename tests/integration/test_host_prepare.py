"""`kvdev-host prepare/update/unprepare/status` through ``cli.main``, on real files.

The round trip: prepare writes host files and CDI specs; the container's view is built by
following each spec's bind mount; the guest side's own validator reads that tree.
"""

import json
import shutil
from pathlib import Path

import jsonschema
import pytest
import yaml
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

from kvdev.guest.cli import main as guest_cli
from kvdev.host import cli
from kvdev.schema import DEVICE_METADATA, decode_stream
from kvdev.schema.tree import ROOT

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "packaging" / "examples" / "host"
CLAIMS = str(EXAMPLES / "claims.yaml")
SLICES = str(EXAMPLES / "slices.yaml")
SCHEMA_DIR = REPO / "tests" / "data" / "cdi-schema"
DRIVERS = ("sriov.example.com", "gpu.nvidia.com", "dra.net")
VM1_UID = "8c1d2f55-2a0e-4c8e-9e1b-5f3f0b7d2a11"
NIC_UID = "0b6f4c3e-91d4-4d2a-8f55-6a7e2c1d9b30"


def run(capsys, *args):
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def dirs(tmp_path, driver):
    return (
        "--driver",
        driver,
        "--plugin-data-dir",
        str(tmp_path / "plugins" / driver),
        "--cdi-dir",
        str(tmp_path / "cdi"),
    )


def prepare_all(capsys, tmp_path, verb="prepare"):
    outs = {}
    for driver in DRIVERS:
        code, out, err = run(capsys, verb, "-f", CLAIMS, "-f", SLICES, *dirs(tmp_path, driver))
        assert code == 0, err
        outs[driver] = out
    return outs


def container_view(tmp_path):
    """What the containers see: each CDI spec's mount, copied to its container path."""
    view = tmp_path / "container"
    for spec_path in sorted((tmp_path / "cdi").glob("*.json")):
        spec = json.loads(spec_path.read_text())
        for device in spec["devices"]:
            for mount in device["containerEdits"]["mounts"]:
                assert mount["options"] == ["ro", "bind"]
                rel = Path(mount["containerPath"]).relative_to(ROOT)
                (view / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(mount["hostPath"], view / rel)
    return view


def test_prepare_prints_cdi_device_ids(capsys, tmp_path):
    outs = prepare_all(capsys, tmp_path)
    assert outs["gpu.nvidia.com"] == (
        f"vms/vm1-devices\tgpu\tnode-a/gpu-vfio-0\tgpu.nvidia.com/metadata={VM1_UID}_gpu\n"
    )
    assert outs["dra.net"].split("\t")[1:3] == ["nic", "node-a/pci-0000-5e-00-1"]
    assert outs["dra.net"].rstrip().endswith(f"dra.net/metadata={NIC_UID}_nic")
    assert len(outs["sriov.example.com"].splitlines()) == 2


def test_round_trip_the_guest_validator_reads_every_device(capsys, tmp_path):
    prepare_all(capsys, tmp_path)
    view = container_view(tmp_path)
    assert sorted(p.relative_to(view).as_posix() for p in view.rglob("*.json")) == [
        "resourceclaims/vm1-devices/gpu/gpu.nvidia.com-metadata.json",
        "resourceclaims/vm1-devices/nic-1/sriov.example.com-metadata.json",
        "resourceclaims/vm1-devices/nic-2/sriov.example.com-metadata.json",
        "resourceclaimtemplates/fast-nic/nic/dra.net-metadata.json",
    ]
    code = guest_cli.main(["metadata", "validate", "--json", str(view)])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    report = json.loads(out)
    assert report["valid"] is True
    devices = {d["pciAddress"]: d for f in report["files"] for d in f.get("devices", [])}
    assert set(devices) == {"0000:3b:02.1", "0000:3b:02.2", "0000:ca:00.0", "0000:5e:00.1"}
    assert devices["0000:3b:02.1"]["mac"] == "02:00:00:3b:02:01"
    assert devices["0000:5e:00.1"]["mac"] == "0c:42:a1:5e:00:01"
    assert devices["0000:ca:00.0"]["numaNodes"] == [1]
    warnings = [w for f in report["files"] for w in f.get("warnings", [])]
    assert warnings == []


def test_cdi_specs_are_valid_against_the_cdi_schema(capsys, tmp_path):
    prepare_all(capsys, tmp_path)
    schema = json.loads((SCHEMA_DIR / "schema.json").read_text())
    defs = Resource.from_contents(
        json.loads((SCHEMA_DIR / "defs.json").read_text()), default_specification=DRAFT7
    )
    validator = jsonschema.Draft7Validator(
        schema, registry=Registry().with_resource("defs.json", defs)
    )
    specs = sorted((tmp_path / "cdi").glob("*.json"))
    assert len(specs) == 4  # one per (claim, request, driver): nic-1, nic-2, gpu, fast-nic
    for spec in specs:
        validator.validate(json.loads(spec.read_text()))


def test_json_output_update_and_unprepare(capsys, tmp_path):
    code, out, _ = run(
        capsys, "prepare", "-f", CLAIMS, "-f", SLICES, *dirs(tmp_path, "dra.net"), "-o", "json"
    )
    assert code == 0
    body = json.loads(out)
    assert body["kind"] == "PreparedClaimList"
    nic = next(i for i in body["items"] if i["devices"])
    assert nic["uid"] == NIC_UID
    assert nic["devices"][0]["cdiDeviceIDs"] == [f"dra.net/metadata={NIC_UID}_nic"]
    meta = Path(nic["files"][0])
    net = tmp_path / "net.yaml"
    net.write_text(
        yaml.safe_dump(
            [
                {
                    "pool": "node-a",
                    "device": "pci-0000-5e-00-1",
                    "networkData": {"interfaceName": "eth9", "ips": ["198.51.100.7/24"]},
                }
            ]
        )
    )
    code, _, err = run(
        capsys,
        "update",
        "-f",
        CLAIMS,
        "-f",
        SLICES,
        *dirs(tmp_path, "dra.net"),
        "--network-data",
        str(net),
    )
    assert code == 0, err
    doc = decode_stream(meta.read_bytes(), DEVICE_METADATA).document
    assert doc.metadata.generation == 2
    assert doc.requests[0].devices[0].network_data.ips == ["198.51.100.7/24"]
    code, out, _ = run(capsys, "unprepare", "-f", CLAIMS, *dirs(tmp_path, "dra.net"))
    assert code == 0
    assert sorted(out.splitlines()) == sorted(nic["files"])
    assert not meta.exists()
    code, out, _ = run(capsys, "unprepare", "-f", CLAIMS, *dirs(tmp_path, "dra.net"))
    assert (code, out) == (0, "")


def test_status_prints_apply_configurations(capsys, tmp_path):
    code, out, _ = run(
        capsys, "status", "-f", CLAIMS, "--driver", "sriov.example.com", "-o", "json"
    )
    assert code == 0
    body = json.loads(out)
    assert body["kind"] == "List"
    (item,) = body["items"]
    assert item["metadata"] == {"name": "vm1-devices", "namespace": "vms", "uid": VM1_UID}
    assert [d["device"] for d in item["status"]["devices"]] == ["vf-1", "vf-2"]
    assert item["status"]["devices"][1]["networkData"]["ips"] == ["10.1.0.6/24"]
    code, out, _ = run(capsys, "status", "-f", CLAIMS, "--driver", "dra.net")
    assert code == 0
    (doc,) = yaml.safe_load_all(out)
    assert doc["status"]["devices"][0]["conditions"][0]["type"] == "Ready"


@pytest.mark.parametrize("verb", ["prepare", "update", "unprepare", "status"])
def test_help_shows_an_example(capsys, verb):
    with pytest.raises(SystemExit) as e:
        cli.main([verb, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out
    assert f"kvdev-host {verb} -f " in out


def test_unallocated_claim_exits_2_naming_object_and_field(capsys, tmp_path):
    data = list(yaml.safe_load_all(Path(CLAIMS).read_text()))
    del data[0]["status"]
    claims = tmp_path / "claims.yaml"
    claims.write_text(yaml.safe_dump_all(data))
    code, out, err = run(
        capsys, "prepare", "-f", str(claims), "-f", SLICES, *dirs(tmp_path, "dra.net")
    )
    assert code == 2
    assert "ResourceClaim/vms/vm1-devices: status.allocation: the claim is not allocated" in err
    assert out == ""
    assert not (tmp_path / "plugins").exists()  # nothing written, not even for the other claim


def test_bad_network_data_exits_2_naming_file_and_field(capsys, tmp_path):
    net = tmp_path / "net.yaml"
    net.write_text(
        yaml.safe_dump(
            {
                "devices": [
                    {"pool": "node-a", "device": "vf-1", "networkData": {"ips": ["10.1.0.5"]}},
                ]
            }
        )
    )
    code, _, err = run(
        capsys,
        "prepare",
        "-f",
        CLAIMS,
        "-f",
        SLICES,
        *dirs(tmp_path, "sriov.example.com"),
        "--network-data",
        str(net),
    )
    assert code == 2
    assert f"{net}: devices[0].networkData.ips[0]" in err
    assert "is not a CIDR address" in err


@pytest.mark.parametrize("driver", ["../etc", "/abs", "Gpu.example.com"])
def test_bad_driver_exits_2(capsys, tmp_path, driver):
    code, _, err = run(capsys, "prepare", "-f", CLAIMS, "-f", SLICES, *dirs(tmp_path, driver))
    assert code == 2
    assert "driver name" in err
    assert not tmp_path.joinpath("cdi").exists()


def test_io_failure_exits_1_naming_the_path(capsys, tmp_path):
    blocker = tmp_path / "cdi"
    blocker.write_text("a file where the CDI directory should be\n")
    code, _, err = run(
        capsys,
        "prepare",
        "-f",
        CLAIMS,
        "-f",
        SLICES,
        "--driver",
        "gpu.nvidia.com",
        "--plugin-data-dir",
        str(tmp_path / "p"),
        "--cdi-dir",
        str(blocker),
    )
    assert code == 1
    assert "kvdev-host: prepare: cannot " in err
    assert str(blocker) in err


def test_missing_files_option_is_a_usage_error(capsys):
    code, _, err = run(capsys, "prepare", "--driver", "dra.net")
    assert code == 2
    assert "-f/--filename" in err
