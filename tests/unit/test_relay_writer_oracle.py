"""The node relay carries the bytes upstream's writer wrote to the guest's ConfigMap, unchanged.

Upstream's ``kubeletplugin`` writer (the ``metadatawriter`` oracle, as a driver such as the
SR-IOV DRA driver runs it; both versions, as v0.37.2's helper demands) writes a CDI spec and
a metadata file for two claims of the packaged example VMI (a claim by name,
``vm1-devices``/``nic-1``, and one made from a template, ``fast-nic``/``nic``), with what only
the driver knows (an interface name attribute, network data). ``kvdev-host relay --once``
reads the CDI directory and prints the records; ``kvdev-host controller --once`` over the
example objects and those records prints the VMI's ConfigMap: those two keys are byte-equal
to the driver's files, the others are the reconstruction, and ``kvdev.io/sources`` says which
is which. Records of another node, or in another namespace than the relay's, change nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kvdev.host import cli
from kvdev.schema.metadata import V1ALPHA1, V1BETA1
from kvdev.schema.origins import parse
from upstreamlab import JsonLines

pytestmark = pytest.mark.upstream

REPO = Path(__file__).resolve().parents[2]
HOST = REPO / "packaging" / "examples" / "host"
FILES = [HOST / "claims.yaml", HOST / "slices.yaml", HOST / "vmi.yaml"]
NIC1 = "vm1-devices.nic-1.sriov.example.com-metadata.json"
FAST = "fast-nic.nic.dra.net-metadata.json"
DRIVER_ATTR = "sriovnetwork.k8snetworkplumbingwg.io/interfaceName"


def _claims() -> dict[str, dict]:
    out = {}
    for doc in yaml.safe_load_all((HOST / "claims.yaml").read_text()):
        for item in doc["items"] if doc.get("kind") == "List" else [doc]:
            if item and item.get("kind") == "ResourceClaim":
                out[item["metadata"]["name"]] = item
    return out


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A node's CDI directory after upstream's writer prepared the two claims."""
    top = tmp_path_factory.mktemp("relay-oracle")
    claims = _claims()
    oracle = JsonLines("metadatawriter")
    cases = [
        (
            "sriov.example.com",
            claims["vm1-devices"],
            [
                {
                    "requests": ["nic-1"],
                    "pool": "node-a",
                    "device": "vf-1",
                    "metadata": {
                        "attributes": {
                            DRIVER_ATTR: {"string": "net1"},
                            "resource.kubernetes.io/pciBusID": {"string": "0000:3b:02.1"},
                        },
                        "networkData": {
                            "interfaceName": "net1",
                            "ips": ["192.0.2.10/24"],
                            "hardwareAddress": "02:00:00:3b:02:01",
                        },
                    },
                }
            ],
        ),
        (
            "dra.net",
            next(c for n, c in claims.items() if n.startswith("virt-launcher-vm1-fast-nic")),
            [{"requests": ["nic"], "pool": "node-a", "device": "pci-0000-5e-00-1"}],
        ),
    ]
    try:
        for driver, claim, devices in cases:
            out = oracle.ask(
                {
                    "driver": driver,
                    "pluginDataDir": str(top / "plugins" / driver),
                    "cdiDir": str(top / "cdi"),
                    "versions": [V1BETA1, V1ALPHA1],
                    "claim": claim,
                    "devices": devices,
                    "updates": [],
                }
            )
            assert not out.get("fatal"), out
            assert out["error"] == "", out
    finally:
        oracle.close()
    return top


def _driver_files(cdi: Path) -> dict[str, bytes]:
    """The file each metadata spec mounts, by the ConfigMap key it must land under."""
    out = {}
    for spec_path in sorted(cdi.glob("*.json")):
        spec = json.loads(spec_path.read_text())
        (mount,) = spec["devices"][0]["containerEdits"]["mounts"]
        _, directory, request, name = mount["containerPath"].rsplit("/", 3)
        out[f"{directory}.{request}.{name}"] = Path(mount["hostPath"]).read_bytes()
    return out


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _records(capsys, cdi: Path, node: str, out: Path, namespace: str = "kvdev-system") -> Path:
    status, text, err = _run(
        capsys,
        "relay",
        "--once",
        "--node-name",
        node,
        "--namespace",
        namespace,
        "--cdi-dir",
        str(cdi),
        "--host-dir",
        str(cdi.parent / "plugins"),
        "-o",
        "json",
    )
    assert status == 0, err
    out.write_text(text)
    return out


def _configmap(capsys, *extra: Path) -> dict:
    args = [a for f in [*FILES, *extra] for a in ("-f", str(f))]
    status, text, err = _run(
        capsys, "controller", "--once", "--relay-namespace", "kvdev-system", *args, "-o", "json"
    )
    assert status == 0, err
    (cm,) = json.loads(text)["items"]
    return cm


def test_the_drivers_bytes_reach_the_vmis_keys_unchanged(written, capsys, tmp_path):
    files = _driver_files(written / "cdi")
    assert sorted(files) == [FAST, NIC1]
    records = _records(capsys, written / "cdi", "node-a", tmp_path / "records.json")
    listed = json.loads(records.read_text())["items"]
    assert {r["metadata"]["annotations"]["kvdev.io/node"] for r in listed} == {"node-a"}

    cm = _configmap(capsys, records)
    data = cm["data"]
    for key, raw in files.items():
        assert data[key].encode() == raw, key  # byte for byte, the driver's generation kept
    assert DRIVER_ATTR in data[NIC1]
    sources = json.loads(cm["metadata"]["annotations"]["kvdev.io/sources"])
    assert sources == {
        FAST: "driver",
        NIC1: "driver",
        "vm1-devices.nic-2.sriov.example.com-metadata.json": "reconstructed",
        "vm1-devices.gpu.gpu.nvidia.com-metadata.json": "reconstructed",
    }
    assert parse(data["kvdev-sources.json"].encode(), "cm") == (sources, None)  # the guest's


def test_without_a_record_of_the_vmis_node_the_keys_are_reconstructed(written, capsys, tmp_path):
    files = _driver_files(written / "cdi")
    baseline = _configmap(capsys)
    other_node = _records(capsys, written / "cdi", "node-b", tmp_path / "b.json")
    other_ns = _records(capsys, written / "cdi", "node-a", tmp_path / "ns.json", namespace="vms")
    for records in (other_node, other_ns):
        cm = _configmap(capsys, records)
        assert cm["data"] == baseline["data"]
        assert cm["data"][NIC1].encode() != files[NIC1]
        assert DRIVER_ATTR not in cm["data"][NIC1]  # only the driver knows it
        sources = json.loads(cm["metadata"]["annotations"]["kvdev.io/sources"])
        assert set(sources.values()) == {"reconstructed"}
        assert "kvdev-sources.json" not in cm["data"]  # none from a driver: no index for the guest
