"""Deferred and version-lagged metadata, through the real reconcile pass over an in-memory kernel.

Upstream's deferred flow: the kubelet plugin first writes a network device's file empty or
structure-only (its devices without attributes or networkData, generation 1), and the driver's
NRI hook rewrites it with them and generation + 1. Until then the agent shows the request as
Pending ("the driver has not written its metadata yet"), not as a metadata error, and leaves
its NIC alone; the rewrite configures it. Drivers write v1alpha1 only; an object without name
and uid is read as upstream reads it; a mediated device's UUID is read and shown.
"""

import json

from builders import V1ALPHA1

from kvdev.guest.cli.main import main as kvdev
from kvdev.guest.core.status import Phase
from kvdev.guest.reconciler import Reconciler, converge
from kvdev.schema.described import NOT_WRITTEN
from kvdev.schema.documents import check_file
from kvdev.schema.tree import Role, metadata_location
from memlab import example_config, example_kernel

NIC1 = "resourceclaims/vm1-devices/nic-1/sriov.example.com-metadata.json"


def phases(status):
    return {(d.request, d.name): (d.phase, d.reason) for d in status.devices}


def written(cfg):
    """The example's nic-1 stream as the driver's rewrite leaves it (one object per line)."""
    path = cfg.metadata_root / NIC1
    text = path.read_text()
    doc = json.loads(text[: text.index("\n}\n") + 2])
    return path, doc


def structure_only(doc):
    """``doc`` as the kubelet plugin first writes it: devices without metadata, generation 1."""
    out = json.loads(json.dumps(doc))
    out["metadata"]["generation"] = 1
    for request in out["requests"]:
        for device in request["devices"]:
            device.pop("attributes", None)
            device.pop("networkData", None)
    return out


def lines(*objects):
    return "".join(json.dumps(o) + "\n" for o in objects)


def test_an_empty_file_is_pending_and_the_rewrite_configures_it(tmp_path):
    cfg = example_config(tmp_path, gpu=False)
    path, doc = written(cfg)
    path.write_text("")
    kernel = example_kernel()
    r = Reconciler(cfg, kernel, scan_devices=tuple)
    first = converge(r).status
    assert phases(first)[("nic-1", "")] == (Phase.PENDING, NOT_WRITTEN)
    assert first.file_errors == ()  # not a metadata error
    assert not first.converged
    assert "eth1" in {lk.ifname for lk in kernel.state.links}  # its NIC is left alone
    path.write_text(lines(doc))  # the driver's rewrite
    after = converge(r).status
    assert phases(after)[("nic-1", "vf-1")][0] is Phase.CONFIGURED
    assert ("nic-1", "") not in phases(after)
    assert after.converged


def test_a_structure_only_file_is_pending_until_the_rewrite_with_generation_plus_one(tmp_path):
    cfg = example_config(tmp_path, gpu=False)
    path, doc = written(cfg)
    path.write_text(lines(structure_only(doc) | {"apiVersion": V1ALPHA1}))
    kernel = example_kernel()
    r = Reconciler(cfg, kernel, scan_devices=tuple)
    first = converge(r).status
    assert phases(first)[("nic-1", "vf-1")] == (Phase.PENDING, NOT_WRITTEN)
    assert first.file_errors == ()
    assert not any(a.address == "10.1.0.5/24" for a in kernel.state.addresses)
    doc["metadata"]["generation"] = 2
    path.write_text(lines(doc | {"apiVersion": V1ALPHA1}))  # v1alpha1 only, as drivers write
    after = converge(r).status
    assert phases(after)[("nic-1", "vf-1")][0] is Phase.CONFIGURED
    assert any(a.address == "10.1.0.5/24" for a in kernel.state.addresses)
    assert after.converged


def test_an_empty_file_never_replaces_content_in_force(tmp_path):
    cfg = example_config(tmp_path, gpu=False)
    path, _ = written(cfg)
    kernel = example_kernel()
    r = Reconciler(cfg, kernel, scan_devices=tuple)
    assert converge(r).status.converged
    path.write_text("")  # a writer that truncates before it writes, read in between
    again = converge(r).status
    assert phases(again)[("nic-1", "vf-1")][0] is Phase.CONFIGURED
    assert again.converged


def test_a_v1alpha1_only_tree_is_configured_end_to_end(tmp_path):
    cfg = example_config(tmp_path, gpu=False)
    for path in (cfg.metadata_root / "resourceclaims").rglob("*-metadata.json"):
        objects = [json.loads(x) for x in _objects(path.read_text())]
        path.write_text(lines(*(o | {"apiVersion": V1ALPHA1} for o in objects[:1])))
    for path in (cfg.metadata_root / "resourceclaimtemplates").rglob("*-metadata.json"):
        objects = [json.loads(x) for x in _objects(path.read_text())]
        path.write_text(lines(*(o | {"apiVersion": V1ALPHA1} for o in objects[:1])))
    status = converge(Reconciler(cfg, example_kernel(), scan_devices=tuple)).status
    assert status.converged
    assert {c.api_version for c in status.claims} == {V1ALPHA1}


def _objects(text):
    decoder, pos, out = json.JSONDecoder(), 0, []
    while pos < len(text.rstrip()):
        value, end = decoder.raw_decode(text, pos)
        out.append(json.dumps(value))
        pos = end + 1
    return out


def test_an_object_without_name_and_uid_is_read_and_its_place_names_the_claim(tmp_path):
    cfg = example_config(tmp_path, gpu=False)
    path, doc = written(cfg)
    doc["metadata"] = {"generation": 2}
    path.write_text(lines(doc))
    result = check_file(NIC1, Role.DEVICE_METADATA, path.read_bytes(), metadata_location(NIC1))
    assert result.ok
    assert [d.claim for d in result.described] == ["vm1-devices"]
    assert any(w.upstream_invalid and w.path == "metadata" for w in result.warnings)
    status = converge(Reconciler(cfg, example_kernel(), scan_devices=tuple)).status
    assert phases(status)[("nic-1", "vf-1")][0] is Phase.CONFIGURED


def test_a_mediated_devices_uuid_is_read_and_shown(tmp_path, capsys):
    cfg = example_config(tmp_path)
    gpu = next((cfg.metadata_root / "resourceclaims").rglob("gpu.nvidia.com-metadata.json"))
    text = gpu.read_text()
    objects = [json.loads(x) for x in _objects(text)]
    uuids = {"mdevUUID": "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"}
    standard = {"resource.kubernetes.io/mdevUUID": "83b8f4f2-509f-382f-3c1e-e6bfe0fa1002"}
    for attrs, want in ((uuids, "1001"), (standard, "1002")):
        for o in objects:
            device = o["requests"][0]["devices"][0]
            device["attributes"] = {
                k: v for k, v in device["attributes"].items() if "mdevUUID" not in k
            } | {k: {"string": v} for k, v in attrs.items()}
        gpu.write_text(lines(*objects))
        rel = str(gpu.relative_to(cfg.metadata_root))
        result = check_file(rel, Role.DEVICE_METADATA, gpu.read_bytes(), metadata_location(rel))
        assert result.described[0].mdev_uuid.endswith(want)
        assert kvdev(["metadata", "validate", str(gpu)]) in (0, 1)
        assert f"mdev 83b8f4f2-509f-382f-3c1e-e6bfe0fa{want}" in capsys.readouterr().out
    status = converge(Reconciler(cfg, example_kernel(), scan_devices=tuple)).status
    gpu_status = next(d for d in status.devices if d.request == "gpu")
    assert gpu_status.mdev_uuid.endswith("1002")
