"""kvdev.host.publish.writer on real files: modes, idempotence, generations, removal, names."""

import copy
import errno
import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from hostlab import fill
from kvdev.errors import PermanentError, RetryableError, SchemaError
from kvdev.host.k8s import ResourceClaim, load
from kvdev.host.k8s.device import NetworkDeviceData
from kvdev.host.publish import writer
from kvdev.schema import DEVICE_METADATA, decode_stream

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "packaging" / "examples" / "host"
VM1_UID = "8c1d2f55-2a0e-4c8e-9e1b-5f3f0b7d2a11"
NIC_UID = "0b6f4c3e-91d4-4d2a-8f55-6a7e2c1d9b30"
SRIOV = "sriov.example.com"


TWO_VFS = REPO / "tests" / "data" / "host-prepare" / "claims-two-vfs.yaml"  # "nics": 2 VFs


def claims():
    found = {c.metadata.name: c for c in load((EXAMPLES / "claims.yaml").read_text(), "claims")}
    return found | {c.metadata.name: c for c in load(TWO_VFS.read_text(), "two-vfs")}


def slices():
    return list(load((EXAMPLES / "slices.yaml").read_text(), "slices"))


def vm1():
    return claims()["vm1-devices"]


def claim_from(data):
    (obj,) = load(json.dumps(data), "test")
    assert isinstance(obj, ResourceClaim)
    return obj


def vm1_raw():
    return copy.deepcopy(next(yaml.safe_load_all(TWO_VFS.read_text())))


def layout(tmp_path, driver=SRIOV):
    return writer.Layout(driver, tmp_path / "plugins" / driver, tmp_path / "cdi")


def tree(root):
    """Every file and directory under root, relative, with its mode."""
    return {
        p.relative_to(root).as_posix(): stat.S_IMODE(p.lstat().st_mode)
        for p in sorted(root.rglob("*"))
    }


def generation(path):
    return decode_stream(path.read_bytes(), DEVICE_METADATA).document.metadata.generation


def nic_file(lay):
    return lay.metadata_root / "vms_vm1-devices" / "nics" / "metadata.json"


def test_layout_default_and_paths(tmp_path):
    lay = writer.Layout.default("gpu.nvidia.com")
    assert lay.plugin_data_dir == Path("/var/lib/kubelet/plugins/gpu.nvidia.com")
    assert lay.cdi_dir == Path("/var/run/cdi")
    lay = layout(tmp_path)
    prepared = writer.prepare(vm1(), slices(), lay)
    assert prepared.paths == (
        nic_file(lay),
        tmp_path / "cdi" / f"{SRIOV}_metadata_{VM1_UID}_nics.json",
    )
    assert [(d.requests, d.pool, d.device) for d in prepared.devices] == [
        (("nics",), "node-a", "vf-1"),
        (("nics",), "node-a", "vf-2"),
    ]
    assert prepared.devices[0].cdi_device_ids == (f"{SRIOV}/metadata={VM1_UID}_nics",)
    spec = json.loads(prepared.paths[1].read_text())
    assert spec["devices"][0]["containerEdits"]["mounts"][0]["hostPath"] == str(nic_file(lay))


def test_modes_are_0644_and_0755_under_umask_077(tmp_path):
    old = os.umask(0o077)
    try:
        writer.prepare(vm1(), slices(), layout(tmp_path))
    finally:
        os.umask(old)
    modes = tree(tmp_path)
    assert modes  # plugins/, the driver's dir, dra-device-metadata/, the claim dir, ...
    for rel, mode in modes.items():
        expected = 0o755 if (tmp_path / rel).is_dir() else 0o644
        assert mode == expected, rel


def test_prepare_is_idempotent_bytes_mtime_generation(tmp_path):
    lay = layout(tmp_path)
    first = writer.prepare(vm1(), slices(), lay)
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in first.paths}
    again = writer.prepare(vm1(), slices(), lay)
    assert again == first
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in again.paths} == before
    assert generation(nic_file(lay)) == 1


def test_changed_input_and_update_bump_the_generation(tmp_path):
    lay = layout(tmp_path)
    writer.prepare(vm1(), slices(), lay)
    net = {
        (SRIOV, "node-a", "vf-1"): NetworkDeviceData.model_validate(
            {"interfaceName": "net9", "ips": ["10.1.0.9/24"]}
        )
    }
    writer.prepare(vm1(), slices(), lay, network_data=net)  # new content: generation 2
    assert generation(nic_file(lay)) == 2
    writer.update(vm1(), slices(), lay, network_data=net)  # update always bumps
    writer.update(vm1(), slices(), lay, network_data=net)
    doc = decode_stream(nic_file(lay).read_bytes(), DEVICE_METADATA).document
    assert doc.metadata.generation == 4
    assert doc.requests[0].devices[0].network_data.interface_name == "net9"
    writer.prepare(vm1(), slices(), lay, network_data=net)  # same again: unchanged
    assert generation(nic_file(lay)) == 4


def test_unprepare_removes_exactly_what_was_written_and_is_idempotent(tmp_path):
    sriov, gpu = layout(tmp_path), layout(tmp_path, "gpu.nvidia.com")
    before = tree(tmp_path)
    (tmp_path / "cdi").mkdir()
    (tmp_path / "cdi" / "other-vendor.json").write_text("{}")
    kept_gpu = writer.prepare(vm1(), slices(), gpu)
    other = writer.prepare(claims()["virt-launcher-vm1-fast-nic-q7w2x"], slices(), sriov)
    assert other.paths == ()  # no sriov device in that claim: nothing written
    baseline = tree(tmp_path)
    prepared = writer.prepare(vm1(), slices(), sriov)
    removed = writer.unprepare("vms", "vm1-devices", VM1_UID, sriov)
    assert set(removed) == set(prepared.paths)
    after = tree(tmp_path)
    # the driver's own root stays (it holds other claims' locks); everything else is as before
    assert set(after) - set(baseline) == {
        "plugins/sriov.example.com",
        "plugins/sriov.example.com/dra-device-metadata",
    }
    assert set(baseline) <= set(after)
    assert all(p.exists() for p in kept_gpu.paths)
    assert writer.unprepare("vms", "vm1-devices", VM1_UID, sriov) == ()
    assert tree(tmp_path) == after
    assert before == {}


def test_unprepare_leaves_a_recreated_claim_alone(tmp_path):
    lay = layout(tmp_path)
    prepared = writer.prepare(vm1(), slices(), lay)
    other_uid = "11111111-2222-4333-8444-555555555555"
    assert writer.unprepare("vms", "vm1-devices", other_uid, lay) == ()
    assert all(p.exists() for p in prepared.paths)


def test_unprepare_without_a_record_uses_the_uid_in_the_files(tmp_path):
    lay = layout(tmp_path)
    prepared = writer.prepare(vm1(), slices(), lay)
    (lay.metadata_root / "vms_vm1-devices" / writer.RECORD_FILE).unlink()
    assert set(writer.unprepare("vms", "vm1-devices", VM1_UID, lay)) == set(prepared.paths)
    assert not (lay.metadata_root / "vms_vm1-devices").exists()


def test_a_request_that_left_the_allocation_is_removed(tmp_path):
    lay = layout(tmp_path)
    data = vm1_raw()
    data["status"]["allocation"]["devices"]["results"][1]["request"] = "extra"
    two = writer.prepare(claim_from(data), slices(), lay)
    assert len(two.paths) == 4
    one = writer.prepare(vm1(), slices(), lay)
    assert len(one.paths) == 2
    assert not (lay.metadata_root / "vms_vm1-devices" / "extra").exists()
    assert sorted(p.name for p in (tmp_path / "cdi").iterdir()) == [one.paths[1].name]


@pytest.mark.parametrize(
    ("namespace", "name", "uid"),
    [
        ("..", "vm1-devices", VM1_UID),
        ("vms", "../../etc", VM1_UID),
        ("vms", "a/b", VM1_UID),
        ("/abs", "x", VM1_UID),
        ("vms", "vm1-devices", "../" + VM1_UID),
        ("vms", "vm1-devices", "/etc/passwd"),
        ("vms", "x" * 250, VM1_UID),
    ],
)
def test_unsafe_names_are_rejected_before_any_file_is_touched(tmp_path, namespace, name, uid):
    lay = layout(tmp_path)
    writer.prepare(vm1(), slices(), lay)
    before = tree(tmp_path)
    with pytest.raises(SchemaError) as e:
        writer.unprepare(namespace, name, uid, lay)
    assert f"claim {namespace}/{name}" in str(e.value)
    assert tree(tmp_path) == before  # nothing created, nothing of the prepared claim removed


def test_unsafe_uid_in_a_claim_is_rejected_and_nothing_written(tmp_path):
    data = vm1_raw()
    data["metadata"]["uid"] = "../../../tmp/x"
    with pytest.raises(SchemaError, match=r"metadata.uid: '../../../tmp/x' is not a UID"):
        writer.prepare(claim_from(data), slices(), layout(tmp_path))
    assert tree(tmp_path) == {}


@pytest.mark.parametrize("driver", ["../x", "/abs", "a/b", "1gpu.example.com", ""])
def test_unsafe_driver_is_rejected(tmp_path, driver):
    with pytest.raises(SchemaError, match="driver name"):
        writer.Layout(driver, tmp_path, tmp_path)


# --------------------------------------------------------------------------- failures


def _mount_tmpfs(where, options):
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs")
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")


def _umount(where):
    subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def bigger_network_data():
    """Network data that makes the NIC file grow past its first 4 KiB page."""
    return {
        (SRIOV, "node-a", f"vf-{i}"): NetworkDeviceData.model_validate(
            {"interfaceName": "n" * 200, "ips": [f"fd00:{i}:{j + 1}::5/64" for j in range(16)]}
        )
        for i in (1, 2)
    }


def test_disk_full_is_retryable_names_the_file_and_keeps_the_old_one(tmp_path):
    full = tmp_path / "full"
    _mount_tmpfs(full, "size=64k,mode=0755")
    try:
        lay = writer.Layout(SRIOV, full / "plugins", full / "cdi")
        writer.prepare(vm1(), slices(), lay)
        old = nic_file(lay).read_bytes()
        inode = nic_file(lay).stat().st_ino
        filler = full / "filler"
        assert fill(filler) == errno.ENOSPC
        writer.update(vm1(), slices(), lay)  # the same size, in place: no new block needed
        assert generation(nic_file(lay)) == 2
        with pytest.raises(RetryableError) as e:
            writer.update(vm1(), slices(), lay, network_data=bigger_network_data())
        assert "No space left on device" in str(e.value)
        assert str(full) in str(e.value)
        assert nic_file(lay).read_bytes() == old.replace(b'"generation": 1', b'"generation": 2')
        assert nic_file(lay).stat().st_ino == inode  # the space was refused before a byte changed
        leftovers = list(full.rglob("*.tmp"))
        assert leftovers == []  # no partial file anywhere
        filler.unlink()
        writer.update(vm1(), slices(), lay, network_data=bigger_network_data())  # space back
        assert generation(nic_file(lay)) == 3
    finally:
        _umount(full)


def test_an_update_reaches_a_container_through_its_single_file_bind_mount(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to bind-mount")
    lay = layout(tmp_path)
    writer.prepare(vm1(), slices(), lay)
    host = nic_file(lay)
    inode = host.stat().st_ino
    view = tmp_path / "container" / f"{SRIOV}-metadata.json"  # what CDI mounts, file on file
    view.parent.mkdir()
    view.write_bytes(b"")
    subprocess.run(["mount", "--bind", str(host), str(view)], check=True)
    try:
        assert generation(view) == 1
        net = {
            (SRIOV, "node-a", "vf-1"): NetworkDeviceData.model_validate(
                {"interfaceName": "net1", "ips": ["10.1.0.42/24"]}
            )
        }
        writer.update(vm1(), slices(), lay, network_data=net)
        assert generation(view) == 2  # the running container sees the new generation
        assert b"10.1.0.42/24" in view.read_bytes()
        writer.update(vm1(), slices(), lay, network_data=bigger_network_data())
        writer.update(vm1(), slices(), lay)  # growing, then shrinking again
        assert view.read_bytes() == host.read_bytes()
        assert generation(view) == 4
        assert host.stat().st_ino == inode
    finally:
        _umount(view)


def test_read_only_cdi_dir_is_a_permanent_error_naming_it(tmp_path):
    cdi = tmp_path / "cdi"
    _mount_tmpfs(cdi, "ro,size=64k")
    try:
        lay = writer.Layout(SRIOV, tmp_path / "plugins", cdi)
        with pytest.raises(PermanentError) as e:
            writer.prepare(vm1(), slices(), lay)
        assert not isinstance(e.value, RetryableError)
        assert f"cannot write {cdi}/" in str(e.value)
        assert "Read-only file system" in str(e.value)
        # what was written before the failure is recorded, so unprepare cleans it up
        assert writer.unprepare("vms", "vm1-devices", VM1_UID, lay) == (nic_file(lay),)
        assert not (lay.metadata_root / "vms_vm1-devices").exists()
    finally:
        _umount(cdi)


def test_a_recreated_claim_replaces_the_old_uids_files(tmp_path):
    lay = layout(tmp_path)
    old = writer.prepare(vm1(), slices(), lay)
    data = vm1_raw()
    new_uid = "11111111-2222-4333-8444-555555555555"
    data["metadata"]["uid"] = new_uid
    new = writer.prepare(claim_from(data), slices(), lay)
    assert not old.paths[1].exists()  # the old uid's CDI spec
    assert all(p.exists() for p in new.paths)
    doc = decode_stream(nic_file(lay).read_bytes(), DEVICE_METADATA).document
    assert doc.metadata.uid == new_uid
    assert writer.unprepare("vms", "vm1-devices", VM1_UID, lay) == ()  # the old one: nothing
    assert set(writer.unprepare("vms", "vm1-devices", new_uid, lay)) == set(new.paths)


def test_oversize_names_are_rejected_before_anything_is_written(tmp_path):
    data = vm1_raw()
    data["metadata"]["name"] = ".".join(["a" * 60] * 4)  # a valid 243-character subdomain
    data["metadata"]["namespace"] = "n" * 20
    with pytest.raises(SchemaError, match=r"metadata.name: namespace and name are 263 characters"):
        writer.prepare(claim_from(data), slices(), layout(tmp_path))
    assert tree(tmp_path) == {}


def test_unprepare_with_the_plugin_dir_gone_removes_the_spec_and_creates_nothing(tmp_path):
    lay = layout(tmp_path)
    prepared = writer.prepare(vm1(), slices(), lay)
    shutil.rmtree(tmp_path / "plugins")
    assert writer.unprepare("vms", "vm1-devices", VM1_UID, lay) == (prepared.paths[1],)
    assert tree(tmp_path) == {"cdi": 0o755}


def test_unprepare_clears_a_record_temp_file_left_before_the_first_record(tmp_path):
    # A prepare killed while writing the claim's first record leaves only the record's
    # temporary file; unprepare must still leave nothing behind.
    lay = layout(tmp_path)
    prepared = writer.prepare(vm1(), slices(), lay)
    assert writer.unprepare("vms", "vm1-devices", VM1_UID, lay)
    claim_dir = lay.metadata_root / "vms_vm1-devices"
    claim_dir.mkdir()
    (claim_dir / f".{writer.RECORD_FILE}.x1y2.tmp").write_text('{"files": [')
    assert writer.unprepare("vms", "vm1-devices", VM1_UID, lay) == ()
    assert sorted(p.name for p in lay.metadata_root.iterdir()) == []
    assert not any(p.exists() for p in prepared.paths)
