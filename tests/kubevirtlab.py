"""KubeVirt's own code as judge of the VMIs kvdev ships and documents: what the judge is asked.

``cases()`` extracts every VirtualMachineInstance from the files kvdev ships or documents (the
packaging examples, the docs' YAML files and fenced YAML blocks, the e2e inputs) and the VMIs
the chart's admission policy wired (``tests/data/kubevirt/wired/<slug>.yaml``, one per VMI the
policy changed, saved by tests/cluster/test_vmi_wiring.py: ``wired_text``), each as the API
server receives it on create (no status, no server-set metadata); a wired VMI is documented for
the versions its original is.
``judge_input(version)`` is the document ``tests/kubevirt/judge`` reads for a KubeVirt version:
the feature gates ``packaging/versions.toml`` names for it, the binding plugins the VMIs use,
the cases. ``inputs_digest`` and ``case_digest`` are the hashes a recording carries, so a test
sees when the tree no longer asks what was recorded. ``recording(version)`` reads one.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "kubevirt"
WIRED = DATA / "wired"
JUDGE = ROOT / "tests" / "kubevirt" / "judge"
RECORD = "make record-kubevirt KUBEVIRT=<a KubeVirt checkout>"
CONFIG_DRIVE = "config-drive"  # a case's recorded config drive: its files by their path on it
sys.path.insert(0, str(ROOT / "docs" / "_ext"))
import kvdev_versions  # noqa: E402

# Where shipped and documented VMIs live; every YAML file (and fenced YAML block in Markdown)
# under them is searched.
SOURCES = ("packaging", "docs", "tests/e2e/inputs")
SKIP = ("docs/_build",)
# A VMI is documented for every supported KubeVirt version unless named here.
# A VMI documented for no version is an example of a refusal: every version must refuse it,
# and the page it is on must quote KubeVirt's message.
DOCUMENTED_FOR: dict[str, tuple[str, ...]] = {
    "packaging/kubernetes/vmi-example.yaml#vm1-sriov": ("v1.9",),
    "docs/reference/compatibility.md#dra-nic-masquerade": (),
}
# The network binding plugins the judge's KubeVirt has registered
# (spec.configuration.network.binding): the name kvdev's VMIs use, a sidecar image.
BINDINGS = {"sriov-dra": {"sidecarImage": "registry.example/sriov-dra-binding:judge"}}
# Set by the API server on create, or only ever by KubeVirt: never part of what a user sends.
SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields")


@dataclass(frozen=True)
class Case:
    """One VMI: where it is written, its name there, and the object the API server receives."""

    name: str
    source: str
    vmi: dict[str, Any]
    wired_from: str = ""  # a wired VMI: the name of the documented one it was wired from

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9.-]+", "_", self.name)

    def documented_for(self, supported: tuple[str, ...]) -> tuple[str, ...]:
        return DOCUMENTED_FOR.get(self.wired_from or self.name, supported)


def _as_created(vmi: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(vmi)
    out.pop("status", None)
    meta = out.setdefault("metadata", {})
    for key in SERVER_SET:
        meta.pop(key, None)
    meta.setdefault("namespace", "default")
    return out


def _vmis(text: str) -> list[dict[str, Any]]:
    return [
        d
        for d in yaml.safe_load_all(text)
        if isinstance(d, dict) and d.get("kind") == "VirtualMachineInstance"
    ]


FENCE = re.compile(r"^```ya?ml[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _files() -> list[Path]:
    found: list[Path] = []
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*")):
            rel = path.relative_to(ROOT).as_posix()
            if path.suffix in (".yaml", ".yml", ".md") and not rel.startswith(SKIP):
                found.append(path)
    return found


def documented() -> list[Case]:
    """Every shipped or documented VMI, in a stable order."""
    out: list[Case] = []
    for path in _files():
        rel = path.relative_to(ROOT).as_posix()
        text = path.read_text()
        if "kind: VirtualMachineInstance" not in text:
            continue
        if path.suffix == ".md":
            for block in FENCE.finditer(text):
                out.extend(
                    Case(f"{rel}#{v['metadata']['name']}", rel, _as_created(v))
                    for v in _vmis(block.group(1))
                )
            continue
        out.extend(Case(f"{rel}#{v['metadata']['name']}", rel, _as_created(v)) for v in _vmis(text))
    return out


def wired_path(case: Case) -> Path:
    """Where the chart's policy's version of the documented ``case`` is saved."""
    return WIRED / f"{case.slug}.yaml"


def wired_text(case: Case, spec: dict[str, Any]) -> str:
    """The saved form of ``case`` as the policy left it: its metadata, the wired ``spec``."""
    doc = {k: v for k, v in case.vmi.items() if k != "spec"} | {"spec": spec}
    return yaml.safe_dump(doc, sort_keys=True, default_flow_style=False, allow_unicode=True)


def cases() -> list[Case]:
    """Every shipped or documented VMI, then every wired one, in a stable order."""
    out = documented()
    origin = {wired_path(c).name: c.name for c in out}
    for path in sorted(WIRED.glob("*.yaml")) if WIRED.is_dir() else []:
        rel = path.relative_to(ROOT).as_posix()
        out.extend(
            Case(
                f"wired:{path.stem}#{v['metadata']['name']}",
                rel,
                _as_created(v),
                origin.get(path.name, ""),
            )
            for v in _vmis(path.read_text())
        )
    return out


def versions_key(version: str) -> str:
    """``v1.9.0`` -> ``v1.9`` (the key versions.toml uses); ``main`` stays."""
    m = re.fullmatch(r"(v\d+\.\d+)\.\d+", version)
    return m.group(1) if m else version


def supported() -> tuple[str, ...]:
    return kvdev_versions.load().kubevirt.supported


def feature_gates(version: str) -> list[str]:
    """The KubeVirt gates the compatibility page names for ``version`` (all set on)."""
    key = versions_key(version)
    return sorted(
        g.name for g in kvdev_versions.load().gates if g.project == "KubeVirt" and key in g.stages
    )


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def judge_input(version: str) -> dict[str, Any]:
    return {
        "featureGates": feature_gates(version),
        "bindings": BINDINGS,
        "cases": [{"name": c.name, "vmi": c.vmi} for c in cases()],
    }


def judge_sources() -> list[Path]:
    return sorted(p for p in JUDGE.rglob("*") if p.is_file())


def case_digest(version: str, case: Case) -> str:
    doc = {"featureGates": feature_gates(version), "bindings": BINDINGS, "vmi": case.vmi}
    return "sha256:" + hashlib.sha256(_canonical(doc)).hexdigest()


def inputs_digest(version: str) -> str:
    """The judge's input document and its Go sources: what a recording answers."""
    h = hashlib.sha256(_canonical(judge_input(version)))
    for path in judge_sources():
        h.update(path.relative_to(JUDGE).as_posix().encode() + b"\0" + path.read_bytes())
    return "sha256:" + h.hexdigest()


def recorded_versions() -> list[str]:
    return sorted(p.name for p in DATA.iterdir() if (p / "recording.json").is_file())


def recording(version: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((DATA / version / "recording.json").read_text())
    return loaded


def recorded_file(version: str, case: str, name: str) -> Path:
    """A file of one case's recording (``domain.xml``, ``meta_data.json``, ...)."""
    rec = recording(version)
    slug = next(c["dir"] for c in rec["cases"] if c["name"] == case)
    return DATA / version / slug / name


# The VMI the KubeVirt-path e2e boots, and the KubeVirt version whose answers it boots.
E2E_CASE = "tests/e2e/inputs/kubevirt/vmi.yaml#vm2"
E2E_VERSION = "main"


@dataclass(frozen=True)
class Virtiofs:
    """A virtiofs share as KubeVirt makes it: the domain's tag and queue, virtiofsd's options."""

    tag: str
    queue_size: int
    options: tuple[str, ...]  # virtiofsd's arguments but --socket-path and --shared-dir


def virtiofs(name: str, version: str = E2E_VERSION, case: str = E2E_CASE) -> Virtiofs:
    """The filesystem ``name`` of the recorded domain (c) and its launcher pod's container (b)."""
    import xml.etree.ElementTree as ET  # noqa: PLC0415

    domain = ET.parse(recorded_file(version, case, "domain.xml")).getroot()  # noqa: S314 (our recording)
    fs = next(
        f
        for f in domain.iter("filesystem")
        if f.find("driver") is not None
        and f.find("target") is not None
        and f.find("target").get("dir") == name  # type: ignore[union-attr]
    )
    pod = json.loads(recorded_file(version, case, "launcher-pod.json").read_text())
    container = next(c for c in pod["spec"]["containers"] if c["name"] == f"virtiofs-{name}")
    options = tuple(
        a for a in container["args"] if not a.startswith(("--socket-path=", "--shared-dir="))
    )
    return Virtiofs(
        tag=fs.find("target").get("dir", ""),  # type: ignore[union-attr]
        queue_size=int(fs.find("driver").get("queue", "0")),  # type: ignore[union-attr]
        options=options,
    )


@dataclass(frozen=True)
class DomainNic:
    """A VMI interface as KubeVirt's domain makes it: the device, its guest address, its MAC.

    ``pci_address`` is the guest address the domain pins (``0000:00:10.0``), None where it
    leaves it to libvirt. ``mac`` is the domain's ``<mac>``; an SR-IOV VF's MAC is set on the
    host's VF, not in the domain, so for a ``<hostdev>`` it is the VMI's ``macAddress`` as
    defaulted (None where there is none).
    """

    name: str
    device: str  # "interface" | "hostdev"
    alias: str
    pci_address: str | None
    mac: str | None


SRIOV_ALIAS = "ua-sriov-"  # virtwrap's alias of an SR-IOV interface's <hostdev>
USER_ALIAS = "ua-"  # of a device the VMI names


def _pci(address: Any) -> str | None:
    if address is None or address.get("type") != "pci":
        return None
    parts = (address.get(k, "0") for k in ("domain", "bus", "slot", "function"))
    d, b, s, f = (int(x, 16) for x in parts)
    return f"{d:04x}:{b:02x}:{s:02x}.{f:x}"


def domain_nics(version: str = E2E_VERSION, case: str = E2E_CASE) -> list[DomainNic]:
    """The recorded domain's (c) NICs, in its order: ``<interface>`` and ``<hostdev>`` devices
    that stand for a VMI interface, named as the VMI names it."""
    import xml.etree.ElementTree as ET  # noqa: PLC0415

    domain = ET.parse(recorded_file(version, case, "domain.xml")).getroot()  # noqa: S314 (our recording)
    defaulted = json.loads(recorded_file(version, case, "defaulted.json").read_text())
    vmi_macs = {
        i["name"]: i.get("macAddress")
        for i in defaulted["spec"]["domain"]["devices"].get("interfaces", [])
    }
    devices = domain.find("devices")
    assert devices is not None
    out = []
    for d in devices:
        if d.tag not in ("interface", "hostdev"):
            continue
        alias_el = d.find("alias")
        alias = alias_el.get("name", "") if alias_el is not None else ""
        mac_el = d.find("mac")
        if d.tag == "hostdev":
            if not alias.startswith(SRIOV_ALIAS):
                continue  # a GPU or host device, not a NIC
            name = alias.removeprefix(SRIOV_ALIAS)
            mac = vmi_macs.get(name)
        else:
            name = alias.removeprefix(USER_ALIAS)
            mac = mac_el.get("address") if mac_el is not None else None
        out.append(DomainNic(name, d.tag, alias, _pci(d.find("address")), mac))
    return out


def domain_interfaces(version: str = E2E_VERSION, case: str = E2E_CASE) -> list[str]:
    """The aliases of the recorded domain's NIC devices (``domain_nics``)."""
    return [n.alias for n in domain_nics(version, case)]


# The VMI the neighbours' cloud-init boot stands for: its domain's NICs and its config drive
# are that boot's (tests/e2e/e2e_nics.py).
NEIGHBOURS_CASE = "tests/e2e/inputs/vmi-neighbours.yaml#vm1"


def config_drive(version: str = E2E_VERSION, case: str = NEIGHBOURS_CASE) -> dict[str, bytes]:
    """Every file KubeVirt put on the case's config drive, by its path on the drive."""
    entry = next(c for c in recording(version)["cases"] if c["name"] == case)
    prefix = f"{CONFIG_DRIVE}/"
    return {
        name.removeprefix(prefix): (DATA / version / entry["dir"] / name).read_bytes()
        for name in entry["files"]
        if name.startswith(prefix)
    }
