"""The KubeVirt-path e2e boots what KubeVirt's own code makes for its VMI, not our reading of it.

The recordings (tests/data/kubevirt, ``make record-kubevirt``) hold the domain KubeVirt's
converter makes for the e2e's VMI and the launcher pod its template service renders; the e2e's
QEMU and virtiofsd command lines must say the same, and what the domain leaves to others (a
binding plugin's NICs) must be what the e2e says it is. No QEMU is started here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

import kubevirtlab

sys.path.insert(0, str(kubevirtlab.ROOT / "tests" / "e2e"))
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
