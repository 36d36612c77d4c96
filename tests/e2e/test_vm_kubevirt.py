"""kvdev the way a KubeVirt cluster carries it: the driver's own file, relayed into a VMI's
ConfigMap, over virtiofs, to the agent.

A second boot of the same guest and package, with nothing of the 9p bundle. The "node":
upstream's kubelet-plugin writer (the ``metadatawriter`` oracle, v0.37.2) prepares the VMI's
claim as a DRA driver does and writes the CDI specs and KEP-5304 files; ``kvdev-host relay
--once`` turns that CDI directory into relay records; ``kvdev-host controller --once`` renders
the VMI's ConfigMap from the VMI (two DRA networks through a binding-plugin interface, with
``tag`` and ``macAddress``), its launcher pod, its ResourceClaim as it evolves, the driver's
ResourceSlice and those records (tests/e2e/inputs/kubevirt); the host lays it out as kubelet
keeps a ConfigMap volume (``..data`` swapped by kubelet's own AtomicWriter, v1.37.2) in a
directory that ``virtiofsd`` shares with the guest as KubeVirt does (tag ``kvdev-metadata``,
``cache=auto``). In the guest the package's kvdev-metadata-share.service mounts it read-only
at the agent's default root, and the agent runs with no metadata setting at all.

1. At boot the driver has written nic-1's file in full and nic-2's structure-only (upstream's
   deferred flow: the device, no metadata, generation 1). In the guest each key's bytes are
   the driver's file's and the agent shows both streams with source ``driver``; nic-1 is
   pinned by the VMI's pciAddress and gets the driver's address; nic-2 is Pending and left
   alone (the third NIC is described by nothing).
2. The driver rewrites nic-2's file (``UpdateRequestMetadata``: network data, generation 2);
   relay, render, swap: the guest matches nic-2 by the VMI's macAddress and adds the
   driver's address, the key's bytes the rewritten file's.
3. A broken version of the ConfigMap (a metadata key that is not JSON) reaches the guest: the
   agent reports it and keeps every interface as it was.
4. The driver changes nic-2's addresses (generation 3); the next good version heals the error
   and is applied.
5. qemu-guest-agent runs in the guest (the image has it; the VM has its virtio-serial channel,
   as KubeVirt's domain does): its ``guest-network-get-interfaces`` answer, read from the host
   over the channel's socket and turned into the VMI's ``status.interfaces[]`` as KubeVirt
   does (``e2e_guestagent``), fed with the ConfigMap to the controller's comparison
   (``kvdev-host guests -f``): every NIC kvdev configured is ``Applied``.
6. The agent stopped and one of nic-2's addresses removed in the guest by hand: the guest
   agent's next answer makes nic-2 ``Differs``, naming the address and the guest's interface.

The driver writes **v1beta1 only** (v0.37.2's helper requires v1beta1 and allows it alone, as
dra-driver-cpu does; KubeVirt v1.9's own reader would find nothing), and gives nic-1 an
unqualified ``mtu`` attribute, as dra-driver-ovsdpdk does: the guest sets nic-1's MTU from it
(no hint names one) and notes, per device, that KubeVirt up to v1.9 cannot read the stream.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import e2e_host
import pytest
import yaml
from e2e_guestagent import status_interfaces
from e2e_qemu import VIRTIOFS_TAG, Guest, Nic, Qga, Vm
from e2e_run import Run, artifacts_dir, make_share, running, scratch_disk

from kvdev.schema.metadata import OLDER_READERS_NOTE, V1BETA1

pytestmark = pytest.mark.e2e

VMI_CLAIM = "vm2-nics"
NIC_1 = Nic("vf-1", 0x10, "52:54:00:e3:00:10")  # the VMI pins it to 0000:00:10.0
NIC_2 = Nic("vf-2", 0x11, "52:54:00:e3:00:11")  # the VMI's macAddress; it pins no address
NIC_SPARE = Nic("spare", 0x12, "52:54:00:e3:00:12")
REQUESTS = {NIC_1.id: "nic-1", NIC_2.id: "nic-2"}
HINTS_KEY = "guest-hints.json"
SOURCES_KEY = "kvdev-sources.json"
DRIVER = "sriov.e2e.kvdev.io"  # the claim's allocation results name it
KEYS = {n.id: f"{VMI_CLAIM}.{REQUESTS[n.id]}.{DRIVER}-metadata.json" for n in (NIC_1, NIC_2)}
DRIVER_ATTR = "sriovnetwork.k8snetworkplumbingwg.io/interfaceName"  # only the driver knows it
DRIVER_MTU = 1450  # nic-1's unqualified mtu attribute: the NIC's MTU in the guest
WRITTEN = (V1BETA1,)  # the driver writes v1beta1 only: no v1alpha1 for KubeVirt v1.9 to read


def _written(nic: Nic, ifname: str, ips: list[str] | None) -> dict[str, Any]:
    """The writer's device for ``nic``: with the driver's metadata, or none (``ips`` None)."""
    out: dict[str, Any] = {"requests": [REQUESTS[nic.id]], "pool": e2e_host.NODE, "device": nic.id}
    if ips is not None:
        attributes: dict[str, Any] = {DRIVER_ATTR: {"string": ifname}}
        if nic is NIC_1:
            attributes["mtu"] = {"int": DRIVER_MTU}
        out["metadata"] = {
            "attributes": attributes,
            "networkData": {"interfaceName": ifname, "ips": ips, "hardwareAddress": nic.mac},
        }
    return out


def _rewrite(ips: list[str]) -> dict[str, Any]:
    """One ``UpdateRequestMetadata`` of nic-2 (the driver's NRI hook): generation + 1."""
    return {"request": REQUESTS[NIC_2.id], "devices": [_written(NIC_2, "net2", ips)]}


NIC_1_WRITTEN = _written(NIC_1, "net1", ["192.0.2.21/24"])
# The node's states: what the driver has written by then (prepare, then each rewrite).
NODE_STATES = {
    "prepared": ([NIC_1_WRITTEN, _written(NIC_2, "net2", None)], []),
    "rewritten": (
        [NIC_1_WRITTEN, _written(NIC_2, "net2", None)],
        [_rewrite(["198.51.100.21/24"])],
    ),
    "changed": (
        [NIC_1_WRITTEN, _written(NIC_2, "net2", None)],
        [_rewrite(["198.51.100.21/24"]), _rewrite(["198.51.100.22/24", "2001:db8:e3::22/64"])],
    ),
}

ROWS = (
    ("image build (or cache hit)", "image"),
    ("run disk: overlay + dpkg -i + mkfs", "disk"),
    ("QEMU start -> guest runner started", "booted"),
    ("QEMU start -> phase 1 converged (host clock)", "converged"),
    ("  guest uptime when phase 1 held", "converged_uptime"),
    ("driver's rewrite -> relay + render + swap + applied", "network_data"),
    ("  of which writer + relay --once + controller --once", "render"),
    ("broken version -> reported, nothing changed", "broken"),
    ("changed addresses -> healed and applied", "change"),
    ("guest agent's first answer (from phase 4)", "guest_agent"),
    ("address removed by hand -> Differs (guest agent's answer)", "differs"),
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
    """The NIC keeps the kernel's name (the VMI names nothing), with kvdev's altname; nic-1
    has the driver's MTU."""
    return {
        "kind": "link",
        "mac": nic.mac,
        "ifname": nic.kernel_name,
        "altname": f"{VMI_CLAIM}.{REQUESTS[nic.id]}.{nic.id}",
        "mtu": DRIVER_MTU if nic is NIC_1 else 1500,
        "addresses": addresses,
    }


SHARE = {"kind": "share", "mounted": True, "tag": VIRTIOFS_TAG}
UNMANAGED = {
    "kind": "unmanaged",
    "mac": NIC_SPARE.mac,
    "ifname": NIC_SPARE.kernel_name,
    "mtu": 1500,
}


def stream(nic: Nic, driver_file: bytes, generation: int) -> dict[str, Any]:
    """In the guest: nic's key is the driver's bytes, at ``generation``, origin driver."""
    return {
        "kind": "stream",
        "key": KEYS[nic.id],
        "sha256": hashlib.sha256(driver_file).hexdigest(),
        "generation": generation,
        "origin": "driver",
    }


class Cluster:
    """The node's and the cluster's half of the run: the driver writes, the relay carries,
    the controller renders the VMI's ConfigMap; publish it, time it."""

    def __init__(self, side: e2e_host.ClusterSide, node: e2e_host.DriverNode) -> None:
        self.side = side
        self.node = node
        self.data: dict[str, str] = {}
        self.files: dict[str, bytes] = {}  # the driver's files of the last state, by key
        self.render_seconds = 0.0

    def roll_out(self, claims: str, state: str) -> dict[str, str]:
        """The driver's ``state`` on the node, relayed; the controller's ConfigMap for it and
        ``claims``, swapped into the volume."""
        t = time.monotonic()
        devices, updates = NODE_STATES[state]
        cdi = self.node.write(state, devices, updates)
        self.files = self.node.files(cdi)
        self.side.relay(cdi)
        self.data = self.side.render(claims)
        self.render_seconds = time.monotonic() - t
        self.side.publish(self.data)
        return self.data

    def streams(self, generations: dict[str, int]) -> list[dict[str, Any]]:
        """The guest-side checks that each NIC's key is the driver's file at that generation."""
        by_id = {NIC_1.id: NIC_1, NIC_2.id: NIC_2}
        return [stream(by_id[i], self.files[KEYS[i]], g) for i, g in generations.items()]


@pytest.fixture(scope="module")
def artifacts(e2e_summary) -> Path:
    """This boot's artifacts: the 9p share, the ConfigMap volume, logs, timings."""
    where = artifacts_dir("-kubevirt")
    e2e_summary.append(f"artifacts (KubeVirt path): {where}")
    return where


@pytest.fixture(scope="module")
def cluster(artifacts) -> Cluster:
    """The controller's renders, in a ConfigMap volume under the artifacts; the first one out."""
    claim = yaml.safe_load((e2e_host.INPUTS / "kubevirt" / "claims-allocated.yaml").read_text())
    node = e2e_host.DriverNode(artifacts / "node", DRIVER, claim, WRITTEN)
    c = Cluster(e2e_host.ClusterSide(artifacts, artifacts / "configmap-volume"), node)
    c.roll_out("claims-allocated.yaml", "prepared")
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
            guest_agent=True,
        )
        vm = Vm(guest)
        r = Run(vm, share, artifacts, None, e2e_host.package_name(deb), times)
        with running(r, t0, e2e_summary, ROWS):
            yield r


def _first_object(text: str) -> dict[str, Any]:
    return json.JSONDecoder().raw_decode(text.lstrip())[0]


def _objects(text: str) -> list[dict[str, Any]]:
    """Every object of a stream."""
    out, decoder, at = [], json.JSONDecoder(), 0
    while text[at:].strip():
        obj, end = decoder.raw_decode(text[at:].lstrip())
        at += len(text[at:]) - len(text[at:].lstrip()) + end
        out.append(obj)
    return out


def test_0_configmap_carries_the_drivers_files(cluster):
    """The first ConfigMap: one stream per request, each the driver's file byte for byte
    (nic-2's structure-only), the sources index, the hints from the binding interfaces."""
    data = cluster.data
    assert set(data) == {HINTS_KEY, SOURCES_KEY, *KEYS.values()}
    assert set(cluster.files) == set(KEYS.values())
    for key, raw in cluster.files.items():
        assert data[key].encode() == raw, key
    assert DRIVER_ATTR in data[KEYS[NIC_1.id]]
    for key in KEYS.values():  # the driver's v1beta1-only streams, relayed as they are
        assert [o["apiVersion"] for o in _objects(data[key])] == [V1BETA1], key
    nic_2 = _first_object(data[KEYS[NIC_2.id]])
    (written,) = [d for r in nic_2["requests"] for d in r["devices"]]
    assert nic_2["metadata"]["generation"] == 1
    assert not written.get("attributes")  # structure-only: the device, no metadata
    assert "networkData" not in written
    sources = _first_object(data[SOURCES_KEY])["sources"]
    assert sources == dict.fromkeys(KEYS.values(), "driver")
    hints = _first_object(data[HINTS_KEY])
    guest = {h["request"]: h.get("guest", {}) for h in hints["devices"]}
    assert guest == {
        "nic-1": {
            "pciAddress": NIC_1.pci_address,
            "macAddress": NIC_1.mac,
            "tag": "dra:vm2-nics/nic-1/0",
        },
        "nic-2": {"macAddress": NIC_2.mac, "tag": "dra:vm2-nics/nic-2/0"},
    }
    assert NIC_SPARE.mac not in json.dumps(hints)


def test_1_boot_reads_the_drivers_bytes(run, cluster):
    run.times["booted"] = run.wait_booted()
    report = run.phase(
        "share mounted; the driver's files in force; nic-1 configured, nic-2 Pending",
        [
            {"kind": "service", "package": run.package},
            SHARE,
            {"kind": "status", "minGeneration": {VMI_CLAIM: 1}},
            *cluster.streams({NIC_1.id: 1, NIC_2.id: 1}),
            device(
                NIC_1,
                "Configured",
                evidence=["pinned"],
                guestPciAddress=NIC_1.pci_address,
                driverMtu=DRIVER_MTU,
                notes=[OLDER_READERS_NOTE],
            ),
            device(NIC_2, "Pending"),
            link(NIC_1, ["192.0.2.21/24"]),
            UNMANAGED,
        ],
    )
    run.times["converged"] = time.monotonic() - run.vm.started
    run.times["converged_uptime"] = report["doneUptime"]


def test_2_the_drivers_rewrite_arrives_while_running(run, cluster):
    run.require_guest("driver's rewrite")
    t = time.monotonic()
    cluster.roll_out("claims.yaml", "rewritten")
    run.times["render"] = cluster.render_seconds
    run.phase(
        "the driver's rewrite (generation 2) applied",
        [
            {"kind": "status", "minGeneration": {VMI_CLAIM: 1}},
            *cluster.streams({NIC_1.id: 1, NIC_2.id: 2}),
            device(NIC_2, "Configured", evidence=["permanent-mac", "mac"], mac=NIC_2.mac),
            link(NIC_1, ["192.0.2.21/24"]),
            link(NIC_2, ["198.51.100.21/24"]),
            UNMANAGED,
        ],
    )
    run.times["network_data"] = time.monotonic() - t


def test_3_a_broken_version_changes_nothing(run, cluster):
    run.require_guest("broken version")
    key = KEYS[NIC_2.id]
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
    cluster.roll_out("claims-2.yaml", "changed")
    run.phase(
        "changed addresses applied, the error gone",
        [
            {"kind": "status", "converged": True, "minGeneration": {VMI_CLAIM: 1}},
            *cluster.streams({NIC_1.id: 1, NIC_2.id: 3}),
            link(NIC_1, ["192.0.2.21/24"]),
            link(NIC_2, ["198.51.100.22/24", "2001:db8:e3::22/64"]),
            UNMANAGED,
            SHARE,
            {"kind": "service", "package": run.package},
        ],
    )
    run.times["change"] = time.monotonic() - t


def _judged(run: Run, cluster: Cluster, answer: Any, name: str) -> tuple[dict[str, Any], str]:
    """The VMI with the status KubeVirt would write from ``answer``, and the ConfigMap, judged
    by the controller's comparison (``kvdev-host guests -f``): the NICs by name, the table."""
    docs = yaml.safe_load_all((e2e_host.INPUTS / "kubevirt" / "vmi.yaml").read_text())
    vmi = next(d for d in docs if d["kind"] == "VirtualMachineInstance")
    vmi["status"]["interfaces"] = status_interfaces(
        vmi["spec"]["domain"]["devices"]["interfaces"], answer
    )
    vmi["status"]["conditions"] = [{"type": "AgentConnected", "status": "True"}]
    path = run.artifacts / f"vmi-{name}.json"
    path.write_text(json.dumps(vmi, indent=1))
    (run.artifacts / f"guest-agent-{name}.json").write_text(json.dumps(answer, indent=1))
    files = ["-f", str(path), "-f", str(cluster.side.stored)]
    log = cluster.side.log
    out = json.loads(e2e_host.kvdev_host(log, "guests", *files, "-o", "json", ok=(0, 1)))
    table = e2e_host.kvdev_host(log, "guests", *files, ok=(0, 1))
    (vmi_out,) = out["vmis"]
    return {n["network"]: n for n in vmi_out["nics"]}, table


def _answer(run: Run) -> Any:
    answer, waited = Qga(run.vm.qga_path, timeout=10).wait("guest-network-get-interfaces", 120)
    run.times.setdefault("guest_agent", waited)
    return answer


def test_5_the_guest_agent_reports_every_nic_applied(run, cluster):
    run.require_guest("guest agent")
    nics, table = _judged(run, cluster, _answer(run), "applied")
    assert {k: n["state"] for k, n in nics.items()} == {"nic-1": "Applied", "nic-2": "Applied"}, (
        table
    )
    reported = set(nics["nic-2"]["reported"]["addresses"])  # and the kernel's link-local one
    assert {"198.51.100.22", "2001:db8:e3::22"} <= reported, table
    assert nics["nic-2"]["reported"]["interfaceName"] == NIC_2.kernel_name
    assert nics["nic-1"]["reported"]["infoSource"] == "domain, guest-agent"


def test_6_an_address_removed_by_hand_differs(run, cluster):
    run.require_guest("address removed by hand")
    t = time.monotonic()
    run.phase(
        "the agent stopped, 198.51.100.22/24 removed from nic-2 by hand",
        [link(NIC_1, ["192.0.2.21/24"]), link(NIC_2, ["2001:db8:e3::22/64"])],
        actions=[
            ["systemctl", "stop", "kvdev-agent.socket", "kvdev-agent.service"],
            ["ip", "addr", "del", "198.51.100.22/24", "dev", NIC_2.kernel_name],
        ],
    )
    nics, table = _judged(run, cluster, _answer(run), "differs")
    run.times["differs"] = time.monotonic() - t
    run.phase(  # no check that asks the agent: it is stopped
        "nothing else changed",
        [link(NIC_1, ["192.0.2.21/24"]), link(NIC_2, ["2001:db8:e3::22/64"])],
        final=True,
    )
    assert nics["nic-1"]["state"] == "Applied", table
    assert nics["nic-2"]["state"] == "Differs", table
    assert nics["nic-2"]["detail"] == f"198.51.100.22/24 not on the guest's {NIC_2.kernel_name}"
