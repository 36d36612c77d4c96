"""The bundled examples are what the real chain would produce, shaped as KubeVirt reads them.

* The metadata tree (packaging/examples/dra-device-attributes) is byte for byte what
  kvdev-host's writer writes for packaging/examples/host (claims + slices), at the container
  paths: the same bytes upstream's Go writer would write (tests/unit/test_gojson.py).
* One device per request and no firstAvailable: virt-launcher reads exactly one device per
  request and matches the request name exactly.
* The config drive is what KubeVirt writes: ``type: nic`` entries without ``mac`` for DRA
  SR-IOV interfaces, and no entry at all for a DRA GPU.
"""

import json
from pathlib import Path

import yaml

from kvdev.host.k8s import load
from kvdev.host.publish.metadata import build_metadata, with_generation
from kvdev.schema import DEVICE_METADATA, check_file, decode_stream, encode_stream, role_of
from kvdev.schema.tree import MetadataLocation

EXAMPLES = Path(__file__).resolve().parents[2] / "packaging" / "examples"
TREE = EXAMPLES / "dra-device-attributes"
DRIVERS = ("sriov.example.com", "gpu.nvidia.com", "dra.net")


def tree_files():
    return {
        p.relative_to(TREE).as_posix(): p.read_bytes()
        for p in sorted(TREE.rglob("*-metadata.json"))
    }


def test_the_tree_is_what_the_host_writer_writes_for_the_host_example():
    claims = load((EXAMPLES / "host" / "claims.yaml").read_text(), "claims")
    slices = list(load((EXAMPLES / "host" / "slices.yaml").read_text(), "slices"))
    files = tree_files()
    written = {}
    for claim in claims:
        for driver in DRIVERS:
            if not any(r.driver == driver for r in claim.status.allocation.devices.results):
                continue
            for item in build_metadata(claim, slices, driver):
                doc = item.document
                location = MetadataLocation(
                    template=doc.pod_claim_name is not None,
                    claim=doc.pod_claim_name or doc.metadata.name,
                    request=item.request,
                    driver=driver,
                )
                on_disk = decode_stream(files[location.relpath], DEVICE_METADATA).document
                doc = with_generation(doc, on_disk.generation)  # as prepared, then updated
                written[location.relpath] = encode_stream(doc, DEVICE_METADATA)
    assert written == files


def test_one_device_per_request_and_no_first_available():
    for claim in yaml.safe_load_all((EXAMPLES / "host" / "claims.yaml").read_text()):
        requests = claim["spec"]["devices"]["requests"]
        assert all("firstAvailable" not in r for r in requests), claim["metadata"]["name"]
        results = claim["status"]["allocation"]["devices"]["results"]
        names = [r["request"] for r in results]
        assert len(names) == len(set(names)), claim["metadata"]["name"]
        assert all("/" not in n for n in names)
    for rel, data in tree_files().items():
        result = check_file(rel, role_of(rel), data)
        assert result.ok, rel
        assert len(result.described) == 1, rel
        assert result.warnings == (), rel


def test_the_config_drive_is_what_kubevirt_writes():
    drive = json.loads((EXAMPLES / "config-drive/openstack/latest/meta_data.json").read_text())
    devices = drive["devices"]
    assert devices
    for entry in devices:
        assert entry["type"] == "nic"  # a DRA SR-IOV interface: a nic entry
        assert "mac" not in entry  # ... which KubeVirt writes without a MAC
        assert entry["bus"] == "pci"
        assert entry["tags"]
    assert not any("gpu" in tag for e in devices for tag in e["tags"])  # no DRA GPU entry
