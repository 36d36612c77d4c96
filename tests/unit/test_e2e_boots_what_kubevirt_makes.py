"""The e2e boots what KubeVirt's own code makes for its VMIs, not our reading of it.

The recordings (tests/data/kubevirt, ``make record-kubevirt``) hold the domain KubeVirt's
converter makes for the e2e's VMIs, the launcher pod its template service renders and the
config drive virt-launcher writes; the e2e's QEMU and virtiofsd command lines and its config
drive (the neighbours' cloud-init boot, VMI inputs/vmi-neighbours.yaml) must say the same, built
by the functions the e2e uses, and what the domain leaves to others (a binding plugin's NICs,
an address libvirt chooses) must be what the e2e says it is. No QEMU is started here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

import kubevirtlab
from kvdev.schema.configdrive import ConfigDriveMetadata
from kvdev.schema.documents import Role, check_file

sys.path.insert(0, str(kubevirtlab.ROOT / "tests" / "e2e"))
import e2e_nics
import e2e_qemu

E2E_VMI = Path(kubevirtlab.ROOT / "tests" / "e2e" / "inputs" / "kubevirt" / "vmi.yaml")


def _pod_container(name: str) -> dict[str, object]:
    pod = json.loads(
        kubevirtlab.recorded_file(
            kubevirtlab.E2E_VERSION, kubevirtlab.E2E_CASE, "launcher-pod.json"
        ).read_text()
    )
    found: dict[str, object] = next(c for c in pod["spec"]["containers"] if c["name"] == name)
    return found


def test_virtiofsd_runs_with_the_launcher_pods_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(e2e_qemu, "virtiofsd", lambda: "/usr/libexec/virtiofsd")
    argv = e2e_qemu.virtiofsd_argv(tmp_path / "s.sock", tmp_path / "share")
    container = _pod_container("virtiofs-kvdev-metadata")
    assert argv[0] == container["command"][0]  # type: ignore[index]
    recorded = [
        a
        for a in container["args"]  # type: ignore[attr-defined]
        if not a.startswith(("--socket-path=", "--shared-dir="))
    ]
    assert argv[3:] == recorded
    assert "--cache=auto" in recorded


def test_the_virtiofs_device_has_the_domains_tag_and_queue(tmp_path: Path) -> None:
    domain = kubevirtlab.recorded_file(
        kubevirtlab.E2E_VERSION, kubevirtlab.E2E_CASE, "domain.xml"
    ).read_text()
    args = e2e_qemu.virtiofs_device_args(tmp_path / "s.sock", 1024)
    device = args[args.index("-device") + 1]
    assert '<target dir="kvdev-metadata">' in domain
    assert 'type="virtiofs" queue="1024"' in domain
    assert device.endswith(",tag=kvdev-metadata,queue-size=1024")
    assert e2e_qemu.VIRTIOFS_TAG == "kvdev-metadata"


def test_the_e2e_vmis_nics_are_left_to_the_binding_plugin() -> None:
    """KubeVirt's converter makes no domain device for a binding plugin's interface: the
    plugin's sidecar does (its MAC, its PCI address). The e2e's QEMU NICs stand for that
    sidecar's, at the VMI's macAddress and pciAddress; should KubeVirt make them itself, the
    e2e must take them from the recorded domain instead, and this fails."""
    vmi = next(
        d for d in yaml.safe_load_all(E2E_VMI.read_text()) if d["kind"] == "VirtualMachineInstance"
    )
    interfaces = vmi["spec"]["domain"]["devices"]["interfaces"]
    assert interfaces
    assert all("binding" in i for i in interfaces)
    assert kubevirtlab.domain_interfaces() == []


NEIGHBOURS = kubevirtlab.NEIGHBOURS_CASE
META_DATA = "openstack/latest/meta_data.json"


def _argv_devices(argv: list[str]) -> list[dict[str, str]]:
    """Every ``-device`` of a QEMU command line, as its properties."""
    return [
        dict(p.split("=", 1) if "=" in p else ("driver", p) for p in argv[i + 1].split(","))
        for i, a in enumerate(argv)
        if a == "-device"
    ]


def _neighbours_guest(tmp_path: Path) -> e2e_qemu.Guest:
    """The cloud-init neighbour's guest as test_vm_neighbours.py builds it."""
    return e2e_qemu.Guest(
        kernel=tmp_path / "vmlinuz",
        initrd=tmp_path / "initrd",
        disk=tmp_path / "disk",
        nics=e2e_nics.BOOT_NICS,
        share=tmp_path / "share",
        workdir=tmp_path,
        config_drive=e2e_nics.config_drive(tmp_path / "config-drive"),
    )


@pytest.mark.parametrize("version", kubevirtlab.recorded_versions())
def test_kubevirt_writes_the_neighbours_config_drive(version: str) -> None:
    """Each version's drive: meta_data.json maps the tagged SR-IOV NIC to its pinned address
    (no MAC: a VF's is not in the domain), the untagged ones are absent, the user's network
    data is there verbatim, and kvdev's reader takes KubeVirt's bytes."""
    drive = kubevirtlab.config_drive(version)
    assert set(drive) == {META_DATA, "openstack/latest/user_data", e2e_nics.NETWORK_DATA}
    meta = json.loads(drive[META_DATA])
    assert meta["instance_id"] == "vm1.e2e"
    assert meta["devices"] == [
        {"type": "nic", "bus": "pci", "address": "0000:00:10.0", "tags": ["dra:vm1-nics/nic-pci/0"]}
    ]
    vmi = next(c for c in kubevirtlab.cases() if c.name == NEIGHBOURS)
    volume = vmi.vmi["spec"]["volumes"][0]["cloudInitConfigDrive"]
    assert drive[e2e_nics.NETWORK_DATA].decode() == volume["networkData"]
    assert drive["openstack/latest/user_data"] == b""
    read = check_file(META_DATA, Role.CONFIG_DRIVE, drive[META_DATA])
    assert (read.errors, read.warnings) == ((), ())
    assert isinstance(read.document, ConfigDriveMetadata)
    assert [(d.pci_address, d.tags) for d in read.document.tagged()] == [
        ("0000:00:10.0", ["dra:vm1-nics/nic-pci/0"])
    ]


def test_the_e2e_config_drive_is_kubevirts_byte_for_byte(tmp_path: Path) -> None:
    guest = _neighbours_guest(tmp_path)
    assert guest.config_drive is not None
    written = {
        p.relative_to(guest.config_drive).as_posix(): p.read_bytes()
        for p in guest.config_drive.rglob("*")
        if p.is_file()
    }
    assert written == kubevirtlab.config_drive(kubevirtlab.E2E_VERSION)
    argv = e2e_qemu.qemu_argv(guest, [], "")
    blockdev = argv[argv.index("-blockdev") + 1]
    assert f"dir={guest.config_drive}," in blockdev
    assert "label=config-2" in blockdev


def test_the_e2e_nics_are_kubevirts_domain(tmp_path: Path) -> None:
    """QEMU's NICs: the domain's MACs (a VF's: the VMI's macAddress), and the slot wherever
    the domain pins one; KubeVirt pins only the SR-IOV interface's pciAddress."""
    recorded = kubevirtlab.domain_nics(kubevirtlab.E2E_VERSION, NEIGHBOURS)
    assert [(n.name, n.device, n.pci_address) for n in recorded] == [
        ("spare", "interface", None),
        ("nic-pci", "hostdev", "0000:00:10.0"),
        ("nic-mac", "hostdev", None),
    ]
    devices = {
        d["id"]: d
        for d in _argv_devices(e2e_qemu.qemu_argv(_neighbours_guest(tmp_path), [], ""))
        if d["driver"] == "virtio-net-pci"
    }
    assert set(devices) == {n.name for n in recorded}
    for n in recorded:
        assert devices[n.name]["mac"] == n.mac, n.name
        if n.pci_address is not None:
            assert devices[n.name]["bus"] == "pci.0"
            assert f"0000:00:{int(devices[n.name]['addr'], 16):02x}.0" == n.pci_address
    network = json.loads(kubevirtlab.config_drive(kubevirtlab.E2E_VERSION)[e2e_nics.NETWORK_DATA])
    assert sorted(k["ethernet_mac_address"] for k in network["links"]) == sorted(
        n.mac for n in recorded if n.mac
    )


def test_a_tagged_binding_plugin_nic_gets_no_config_drive_entry() -> None:
    """The e2e VMI's NICs carry tags, but the converter makes no device for them, so the
    config drive's devices[] is empty: the e2e boots with no config drive."""
    for version in kubevirtlab.recorded_versions():
        devices = kubevirtlab.recorded_file(version, kubevirtlab.E2E_CASE, "devices.json")
        assert json.loads(devices.read_text()) == [], version
        assert kubevirtlab.config_drive(version, kubevirtlab.E2E_CASE) == {}
