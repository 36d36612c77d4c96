"""kvdev the way a KubeVirt cluster carries it: a VMI's ConfigMap, over virtiofs, to the agent.

A second boot of the same guest and package, with nothing of the 9p bundle: the host renders
the VMI's ConfigMap with ``kvdev-host controller --once`` (tests/e2e/inputs/kubevirt: the VMI,
its ResourceClaim as it evolves, the driver's ResourceSlice), lays it out as kubelet keeps a
ConfigMap volume (``..data`` swapped by kubelet's own AtomicWriter, v1.37.2) in a directory that
``virtiofsd`` shares with the guest as KubeVirt does (tag ``kvdev-metadata``, ``cache=auto``).
In the guest the package's kvdev-metadata-share.service mounts it read-only at the agent's
default root, and the agent runs with no metadata setting at all.

1. At boot the claim is allocated but the driver has reported no network data yet: nic-1 is
   matched from the VMI's spec alone (its pciAddress) and configured without addresses; nic-2
   is Missing: its VMI interface names only a macAddress, which KubeVirt does not apply to a
   DRA SR-IOV VF, so the controller left it out of the hints (the third NIC is described by
   nothing).
2. The driver reports the network data; the controller renders generation 2; kubelet swaps
   the volume; the guest matches nic-2 by the driver's hardwareAddress and adds the addresses.
3. A broken version of the ConfigMap (a metadata key that is not JSON) reaches the guest: the
   agent reports it and keeps every interface as it was.
4. The driver changes nic-2's addresses; the next good version heals the error and is applied.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import e2e_host
import pytest
from e2e_qemu import VIRTIOFS_TAG, Guest, Nic, Vm
from e2e_run import Run, artifacts_dir, make_share, running, scratch_disk

pytestmark = pytest.mark.e2e

VMI_CLAIM = "vm2-nics"
NIC_1 = Nic("vf-1", 0x10, "52:54:00:e3:00:10")  # the VMI pins it to 0000:00:10.0
NIC_2 = Nic("vf-2", 0x11, "52:54:00:e3:00:11")  # the driver's hardwareAddress; the VMI pins nothing
NIC_SPARE = Nic("spare", 0x12, "52:54:00:e3:00:12")
REQUESTS = {NIC_1.id: "nic-1", NIC_2.id: "nic-2"}
HINTS_KEY = "guest-hints.json"

ROWS = (
    ("image build (or cache hit)", "image"),
    ("run disk: overlay + dpkg -i + mkfs", "disk"),
    ("QEMU start -> guest runner started", "booted"),
    ("QEMU start -> phase 1 converged (host clock)", "converged"),
    ("  guest uptime when phase 1 held", "converged_uptime"),
    ("network data -> render + swap + applied", "network_data"),
    ("  of which kvdev-host controller --once", "render"),
    ("broken version -> reported, nothing changed", "broken"),
    ("changed addresses -> healed and applied", "change"),
    ("VM lifetime (start to power-off)", "vm"),
    ("e2e total: image, disk, boot, phases", "total"),
)


def device(nic: Nic, phase: str, **expect: Any) -> dict[str, Any]:
    return {
        "kind": "device",
        "claim": VMI_CLAIM,
        "request": REQUESTS[nic.id],
        "device": nic.id,
        "phase": phase,
        **expect,
    }


def link(nic: Nic, addresses: list[str]) -> dict[str, Any]:
    """The NIC keeps the kernel's name (the VMI names nothing), with kvdev's altname."""
    return {
        "kind": "link",
        "mac": nic.mac,
        "ifname": nic.kernel_name,
        "altname": f"{VMI_CLAIM}.{REQUESTS[nic.id]}.{nic.id}",
        "mtu": 1500,
        "addresses": addresses,
    }


SHARE = {"kind": "share", "mounted": True, "tag": VIRTIOFS_TAG}
UNMANAGED = {
    "kind": "unmanaged",
    "mac": NIC_SPARE.mac,
    "ifname": NIC_SPARE.kernel_name,
    "mtu": 1500,
}


class Cluster:
    """The cluster's half of the run: render the VMI's ConfigMap, publish it, time it."""

    def __init__(self, side: e2e_host.ClusterSide) -> None:
        self.side = side
        self.data: dict[str, str] = {}
        self.render_seconds = 0.0

    def roll_out(self, claims: str) -> dict[str, str]:
        """The controller's ConfigMap for ``claims``, swapped into the volume."""
        t = time.monotonic()
        self.data = self.side.render(claims)
        self.render_seconds = time.monotonic() - t
        self.side.publish(self.data)
        return self.data


@pytest.fixture(scope="module")
def artifacts(e2e_summary) -> Path:
    """This boot's artifacts: the 9p share, the ConfigMap volume, logs, timings."""
    where = artifacts_dir("-kubevirt")
    e2e_summary.append(f"artifacts (KubeVirt path): {where}")
    return where


@pytest.fixture(scope="module")
def cluster(artifacts) -> Cluster:
    """The controller's renders, in a ConfigMap volume under the artifacts; the first one out."""
    c = Cluster(e2e_host.ClusterSide(artifacts, artifacts / "configmap-volume"))
    c.roll_out("claims-allocated.yaml")
    return c


@pytest.fixture(scope="module")
def run(e2e_summary, artifacts, cluster) -> Iterator[Run]:
    """Make the disk, boot with the ConfigMap volume shared over virtiofs."""
    t0 = time.monotonic()
    share = make_share(artifacts)

    base = e2e_host.base_image()
    times = {"image": base.seconds}
    deb = e2e_host.find_deb()
    with scratch_disk() as disk:
        t = time.monotonic()
        e2e_host.run_disk(base, deb, disk, None)
        times["disk"] = time.monotonic() - t
        guest = Guest(
            kernel=base.kernel,
            initrd=base.initrd,
            disk=disk,
            nics=[NIC_1, NIC_2, NIC_SPARE],
            share=share,
            workdir=artifacts,
            virtiofs=cluster.side.volume,
        )
        vm = Vm(guest)
        r = Run(vm, share, artifacts, None, e2e_host.package_name(deb), times)
        with running(r, t0, e2e_summary, ROWS):
            yield r


def _first_object(text: str) -> dict[str, Any]:
    return json.JSONDecoder().raw_decode(text.lstrip())[0]


def test_0_configmap_tells_the_guest_which_nic_is_which(cluster):
    """The first ConfigMap: one stream per request, the hints from the VMI, no network data."""
    data = cluster.data
    streams = {k for k in data if k != HINTS_KEY}
    assert streams == {
        f"{VMI_CLAIM}.nic-1.sriov.e2e.kvdev.io-metadata.json",
        f"{VMI_CLAIM}.nic-2.sriov.e2e.kvdev.io-metadata.json",
    }
    for key in streams:
        meta = _first_object(data[key])
        devices = [d for r in meta["requests"] for d in r["devices"]]
        assert [d.get("networkData") for d in devices] == [None]
    hints = _first_object(data[HINTS_KEY])
    guest = {h["request"]: h.get("guest", {}) for h in hints["devices"]}
    assert guest == {
        "nic-1": {"pciAddress": NIC_1.pci_address}
    }  # nic-2's macAddress: not KubeVirt's
    assert "02:00:00:3b:02:99" not in json.dumps(hints)
    assert NIC_SPARE.mac not in json.dumps(hints)


def test_1_boot_matches_by_the_vmi_spec(run):
    run.times["booted"] = run.wait_booted()
    report = run.phase(
        "share mounted; NICs matched from the VMI spec, no addresses yet",
        [
            {"kind": "service", "package": run.package},
            SHARE,
            {"kind": "status", "minGeneration": {VMI_CLAIM: 1}},
            device(NIC_1, "Configured", evidence=["pinned"], guestPciAddress=NIC_1.pci_address),
            device(NIC_2, "Missing"),
            link(NIC_1, []),
            UNMANAGED,
        ],
    )
    run.times["converged"] = time.monotonic() - run.vm.started
    run.times["converged_uptime"] = report["doneUptime"]


def test_2_network_data_arrives_while_running(run, cluster):
    run.require_guest("network data")
    t = time.monotonic()
    cluster.roll_out("claims.yaml")
    run.times["render"] = cluster.render_seconds
    run.phase(
        "the driver's network data applied",
        [
            {"kind": "status", "minGeneration": {VMI_CLAIM: 2}},
            device(NIC_2, "Configured", evidence=["permanent-mac", "mac"], mac=NIC_2.mac),
            link(NIC_1, ["192.0.2.21/24"]),
            link(NIC_2, ["198.51.100.21/24"]),
            UNMANAGED,
        ],
    )
    run.times["network_data"] = time.monotonic() - t


def test_3_a_broken_version_changes_nothing(run, cluster):
    run.require_guest("broken version")
    key = f"{VMI_CLAIM}.nic-2.sriov.e2e.kvdev.io-metadata.json"
    broken = {**cluster.data, key: '{"kind": "DeviceMetadata", "apiVersion": '}
    t = time.monotonic()
    cluster.side.publish(broken)
    run.phase(
        "a key that is not JSON: reported, last good state kept",
        [
            {"kind": "status", "metadataError": key},
            SHARE,
            link(NIC_1, ["192.0.2.21/24"]),
            link(NIC_2, ["198.51.100.21/24"]),
            UNMANAGED,
        ],
    )
    run.times["broken"] = time.monotonic() - t


def test_4_the_next_good_version_heals_and_applies(run, cluster):
    run.require_guest("healing change")
    t = time.monotonic()
    cluster.roll_out("claims-2.yaml")
    run.phase(
        "changed addresses applied, the error gone",
        [
            # nic-2's stream is at generation 3 now; nic-1's, unchanged, stays at 2
            {"kind": "status", "converged": True, "minGeneration": {VMI_CLAIM: 2}},
            link(NIC_1, ["192.0.2.21/24"]),
            link(NIC_2, ["198.51.100.22/24", "2001:db8:e3::22/64"]),
            UNMANAGED,
            SHARE,
            {"kind": "service", "package": run.package},
        ],
        final=True,
    )
    run.times["change"] = time.monotonic() - t
