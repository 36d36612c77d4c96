"""kvdev in a real Debian trixie guest under QEMU: one boot, three scenarios, in order.

1. The agent runs as kvdev-agent.service from the freshly built .deb, as its own user kvdev
   with CAP_NET_ADMIN as its only capability (the renames, altnames, MTUs and addresses below
   are all made that way, its .link files and status written as kvdev), scoring at most 1.6 in
   the guest's ``systemd-analyze security``, its API readable by a member of group kvdev who
   is not root; and the three boot-time NICs are handled by the expected rule: nic-pci by its
   pinned guest PCI address only (no MAC in its metadata), nic-mac by
   networkData.hardwareAddress only (no pin), the third NIC described by nothing and left
   alone -- each configured (name, altname, MTU, addresses).
2. While the VM runs the host re-runs ``kvdev-host update`` + ``bundle`` (a new IP, a new
   MTU); the guest applies it.
3. A fourth NIC is hot-plugged through QMP ``device_add`` at its planned slot; it is
   configured.

Every check is judged inside the guest (guest/guest_check.py, from ``kvdev status --json``
and ``ip -j``); the host drives the phases through the 9p share and asserts the verdicts.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import e2e_host
import pytest
from e2e_qemu import Guest, Nic, Vm, tail

pytestmark = pytest.mark.e2e

CLAIM, REQUEST = "vm1-nics", "nics"
NIC_PCI = Nic("nic-pci", 0x10, "52:54:00:e2:00:10")
NIC_MAC = Nic("nic-mac", 0x11, "52:54:00:e2:00:11")
NIC_SPARE = Nic("spare", 0x12, "52:54:00:e2:00:12")
NIC_HOT = Nic("nic-hot", 0x18, "52:54:00:e2:00:18")
BOOT_NICS = [NIC_PCI, NIC_MAC, NIC_SPARE]

BOOT_TIMEOUT = 420.0  # QEMU start to the first report, TCG on 2 busy cores
PHASE_TIMEOUT = 120.0  # how long the guest keeps looking for a phase's state
MAX_EXPOSURE = 1.6  # systemd-analyze security on the guest's own systemd (257)


@dataclass(repr=False)
class Run:
    """One boot of the guest and what the phases reported."""

    vm: Vm
    share: Path
    artifacts: Path
    host: e2e_host.HostSide
    package: str
    times: dict[str, float] = field(default_factory=dict)
    reports: dict[int, dict[str, Any]] = field(default_factory=dict)
    failed: bool = False

    def __repr__(self) -> str:  # pytest shows it in tracebacks: keep the reports out
        return f"Run({self.artifacts}, phases reported: {sorted(self.reports)})"

    def wait_booted(self) -> float:
        """Seconds from QEMU's start until the guest's runner reported in."""
        try:
            return self.vm.wait_for(self.share / "out" / "booted.json", BOOT_TIMEOUT, "boot")
        except (TimeoutError, RuntimeError):
            self.failed = True
            raise

    def require_guest(self, what: str) -> None:
        """Fail at once when the guest has stopped judging (an earlier phase failed)."""
        __tracebackhide__ = True
        if self.failed:
            pytest.fail(f"{what}: not run, an earlier phase failed and the guest stopped")

    def phase(
        self,
        name: str,
        checks: list[dict[str, Any]],
        *,
        final: bool = False,
        timeout: float = PHASE_TIMEOUT,
    ) -> dict[str, Any]:
        """Ask the guest to judge ``checks``; its report. Fails the test when one does not hold."""
        __tracebackhide__ = True
        n = len(self.reports) + 1  # the guest expects phases 1, 2, ... (-k may leave some out)
        self.require_guest(name)
        spec = {"name": name, "checks": checks, "timeoutSeconds": timeout, "final": final}
        ctl = self.share / "ctl" / f"phase-{n}.json"
        ctl.with_suffix(".tmp").write_text(json.dumps(spec))
        ctl.with_suffix(".tmp").rename(ctl)
        report_path = self.share / "out" / f"phase-{n}.json"
        try:
            self.vm.wait_for(report_path, BOOT_TIMEOUT if n == 1 else timeout + 60, name)
        except (TimeoutError, RuntimeError):
            self.failed = True
            raise
        report = json.loads(report_path.read_text())
        self.reports[n] = report
        bad = [v for v in report["verdicts"] if not v["ok"]]
        if bad:
            self.failed = True  # the guest stops after a failed phase
            lines = [
                f"{v['check']['kind']} {_label(v['check'])}: {'; '.join(v['problems'])}"
                for v in bad
            ]
            pytest.fail(f"phase {n} ({name}), judged in the guest:\n  " + "\n  ".join(lines))
        return report


def _label(check: dict[str, Any]) -> str:
    return str(check.get("device") or check.get("mac") or check.get("package") or "")


def device(nic: Nic, phase: str, **expect: Any) -> dict[str, Any]:
    return {
        "kind": "device",
        "claim": CLAIM,
        "request": REQUEST,
        "device": nic.id,
        "phase": phase,
        **expect,
    }


def link(nic: Nic, ifname: str, mtu: int, addresses: list[str]) -> dict[str, Any]:
    return {"kind": "link", "mac": nic.mac, "ifname": ifname, "mtu": mtu, "addresses": addresses}


UNMANAGED = {
    "kind": "unmanaged",
    "mac": NIC_SPARE.mac,
    "ifname": NIC_SPARE.kernel_name,
    "mtu": 1500,
}


@pytest.fixture(scope="module")
def run(e2e_summary) -> Iterator[Run]:
    """Build/reuse the image, make the disk with the .deb, publish the bundle, boot the guest."""
    t0 = time.monotonic()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    artifacts = Path(os.environ.get("KVDEV_E2E_ARTIFACTS", e2e_host.REPO / "build" / "e2e"))
    artifacts = artifacts / stamp
    share = artifacts / "share"
    for sub in ("guest", "ctl", "out"):
        (share / sub).mkdir(parents=True)
    shutil.copy(Path(__file__).parent / "guest" / "guest_check.py", share / "guest")
    e2e_summary.append(f"artifacts: {artifacts}")

    base = e2e_host.base_image()
    times = {"image": base.seconds}
    e2e_summary.append(
        f"image: {'built' if base.built else 'cached'} in {base.seconds:.1f} s ({base.path})"
    )
    deb = e2e_host.find_deb()
    host = e2e_host.HostSide(artifacts, share / "bundle")
    host.prepare("plan.yaml")

    scratch = Path(tempfile.mkdtemp(prefix="kvdev-e2e-", dir="/var/tmp"))
    try:
        t = time.monotonic()
        disk = scratch / "root.img"
        installed = e2e_host.run_disk(base, deb, disk, e2e_host.GUEST_SHARE / "bundle" / "current")
        times["disk"] = time.monotonic() - t
        e2e_summary.append(f"package: {deb.name} installed in the guest as '{installed}'")
        guest = Guest(
            kernel=base.kernel,
            initrd=base.initrd,
            disk=disk,
            nics=BOOT_NICS,
            share=share,
            workdir=artifacts,
        )
        vm = Vm(guest)
        e2e_summary.append(f"accelerator: {vm.accel}")
        r = Run(vm, share, artifacts, host, e2e_host.package_name(deb), times)
        try:
            yield r
        finally:
            _shutdown(r)
            times["vm"] = time.monotonic() - vm.started
            times["total"] = time.monotonic() - t0
            _summarize(r, e2e_summary)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _shutdown(r: Run) -> None:
    """Let the guest save its journal and power off; kill QEMU if it does not."""
    done = r.reports and r.reports[max(r.reports)]["final"]
    if not done:
        (r.share / "ctl" / "abort").touch()
    r.vm.wait_exit(120)
    r.vm.stop()  # kills it if it is still there; closes the QMP socket either way


def _summarize(r: Run, out: list[str]) -> None:
    t = r.times
    rows = [
        ("image build (or cache hit)", t.get("image")),
        ("run disk: overlay + dpkg -i + mkfs", t.get("disk")),
        ("QEMU start -> guest runner started", t.get("booted")),
        ("QEMU start -> phase 1 converged (host clock)", t.get("converged")),
        ("  guest uptime when phase 1 held", t.get("converged_uptime")),
        ("metadata change -> applied in the guest", t.get("change")),
        ("hot-plug -> NIC configured", t.get("hotplug")),
        ("VM lifetime (start to power-off)", t.get("vm")),
        ("e2e total: image, disk, boot, phases", t.get("total")),
    ]
    out.extend(f"{name:46} {'-' if v is None else f'{v:6.1f} s'}" for name, v in rows)
    (r.artifacts / "timings.json").write_text(json.dumps(t, indent=1))
    if r.reports:  # the agent's own view at the last phase, also when all went well
        status = r.reports[max(r.reports)]["snapshot"]["status"]
        (r.artifacts / "agent-status.json").write_text(json.dumps(status, indent=1))
    if r.failed or not r.reports or len(r.reports) < 3:
        journal = r.share / "out" / "journal.txt"
        agent = [ln for ln in tail(journal, 100_000).splitlines() if "kvdev-agent" in ln]
        out.append(f"--- guest journal: kvdev-agent, last 40 lines ({journal}) ---")
        out.extend(agent[-40:] or ["(no journal: the guest did not save one)"])
        out.append("--- guest journal, last 20 lines ---")
        out.append(tail(journal, 20))
        out.append(f"--- console, last 30 lines ({r.vm.console}) ---")
        out.append(tail(r.vm.console, 30))
        if r.reports:
            out.append(f"--- agent status at phase {max(r.reports)} (agent-status.json) ---")
            out.extend(_status_lines(r.reports[max(r.reports)]["snapshot"]))


def _status_lines(snap: dict[str, Any]) -> list[str]:
    """The agent's status in a few lines: per device its phase and why; errors; generations."""
    st = snap["status"]
    if "error" in st:
        return [st["error"]]
    lines = [f"summary: {st.get('summary')}; converged: {st.get('converged')}"]
    lines.extend(
        f"  {d['ref']}: {d['phase']} {d.get('interface') or '-'} {d.get('reason') or ''}"
        for d in st.get("devices", [])
    )
    lines.append(f"unmanaged: {st.get('unmanaged')}; last error: {st.get('lastError')}")
    lines.append(f"metadata errors: {st.get('metadataErrors')}")
    lines.extend(
        f"claim {c['claim']}: observed generation {c['observedGeneration']} from {c['source']}"
        for c in st.get("claims", [])
    )
    lines.append(f"metadata root in the guest: {snap.get('metadataRoot')}")
    return lines


def _first_object(path: Path) -> dict[str, Any]:
    """The first (newest-version) object of a kvdev/KEP-5304 JSON stream file (any layout)."""
    return json.JSONDecoder().raw_decode(path.read_text().lstrip())[0]


def test_0_bundle_describes_each_nic_by_one_rule(run):
    """The inputs really leave one rule per NIC (else phase 1 would prove less than it says)."""
    current = run.share / "bundle" / "current"
    meta = _first_object(
        current / "resourceclaims" / CLAIM / REQUEST / f"{e2e_host.DRIVER}-metadata.json"
    )
    macs = {
        d["name"]: d.get("networkData", {}).get("hardwareAddress")
        for r in meta["requests"]
        for d in r["devices"]
    }
    hints = _first_object(current / "kvdev" / "guest-hints.json")
    pins = {h["device"]: h.get("guest", {}).get("pciAddress") for h in hints["devices"]}
    assert macs == {NIC_PCI.id: None, NIC_MAC.id: NIC_MAC.mac, NIC_HOT.id: None}
    assert pins == {
        NIC_PCI.id: NIC_PCI.pci_address,
        NIC_MAC.id: None,
        NIC_HOT.id: NIC_HOT.pci_address,
    }
    assert NIC_SPARE.mac not in macs.values()


def test_1_package_service_and_matching(run):
    run.times["booted"] = run.wait_booted()
    report = run.phase(
        "service from the package; NICs matched and configured",
        [
            {"kind": "service", "package": run.package},
            {"kind": "privilege", "user": "kvdev", "maxExposure": MAX_EXPOSURE},
            {"kind": "status", "minGeneration": {CLAIM: 1}},
            device(
                NIC_PCI,
                "Configured",
                evidence=["pinned"],
                interface="dpci0",
                guestPciAddress=NIC_PCI.pci_address,
                kernelAltname=True,
            ),
            link(NIC_PCI, "dpci0", 1400, ["192.0.2.10/24"]),
            device(
                NIC_MAC,
                "Configured",
                evidence=["permanent-mac", "mac"],
                interface="dmac0",
                guestPciAddress=NIC_MAC.pci_address,
                kernelAltname=True,
            ),
            link(NIC_MAC, "dmac0", 9000, ["198.51.100.11/24", "2001:db8:e2e::11/64"]),
            UNMANAGED,
            device(NIC_HOT, "Missing"),
        ],
    )
    run.times["converged"] = time.monotonic() - run.vm.started
    run.times["converged_uptime"] = report["doneUptime"]


def test_2_metadata_change_while_running(run):
    run.require_guest("metadata change")
    t = time.monotonic()
    run.host.update("network-data-2.yaml", "plan-2.yaml")
    run.phase(
        "host-side metadata change applied",
        [
            {"kind": "status", "minGeneration": {CLAIM: 2}},
            link(NIC_PCI, "dpci0", 1280, ["192.0.2.10/24"]),
            link(NIC_MAC, "dmac0", 9000, ["198.51.100.12/24", "2001:db8:e2e::11/64"]),
            UNMANAGED,
        ],
    )
    run.times["change"] = time.monotonic() - t


def test_3_hotplug_nic(run):
    run.require_guest("hot-plug")
    t = time.monotonic()
    run.vm.hotplug(NIC_HOT)
    run.phase(
        "hot-plugged NIC configured",
        [
            device(
                NIC_HOT,
                "Configured",
                evidence=["pinned"],
                interface="dhot0",
                guestPciAddress=NIC_HOT.pci_address,
                kernelAltname=True,
            ),
            link(NIC_HOT, "dhot0", 1500, ["203.0.113.18/24"]),
            UNMANAGED,
            {"kind": "status", "converged": True},
            {"kind": "service", "package": run.package},
        ],
        final=True,
    )
    run.times["hotplug"] = time.monotonic() - t
