"""Whether each guest applied the NICs its drivers described: the comparison (pure).

Owns, for one VMI, the described side, the reported side and the verdict per NIC:

* **described** (``described_nics``): each device of the VMI's ConfigMap streams (decoded with
  the guest's own reader, ``schema.stream`` + ``schema.described``; a stream the render encoded
  itself read from its document, as that reader reads it: ``read_written``) that is a NIC: a
  ``spec.networks[]`` entry names its claim and request, or its metadata has
  ``networkData``, or its hint says something of a network; and each DRA network of the spec
  no stream describes yet (``Pending``). Its MAC: the hint's
  ``guest.macAddress``, else the metadata's ``hardwareAddress``, else the MAC KubeVirt reports
  for its network in ``status.interfaces[]`` (the domain's). Its expected interface name: the
  hint's ``network.interfaceName``, when it names one. Its addresses: the metadata's
  ``networkData.ips`` and the hint's ``network.addresses`` (what the agent puts on it);
* **reported** (``reported_nics``): the ``status.interfaces[]`` entries whose ``infoSource``
  holds ``guest-agent`` (KubeVirt's virt-handler merges qemu-guest-agent's
  ``guest-network-get-interfaces`` into them: ``interfaceName``, ``ipAddresses`` without
  prefix length; ``linkState`` comes from the domain), by MAC;
* **the verdict** (``compare``), one ``NicState`` per NIC with the reason in words:
  ``Applied``; ``Differs``, naming what ("10.1.0.5/24 not on the guest's data0", "the guest
  names it eth1, not data0", "the guest's data0 link is down"); ``Unreported`` with an
  ``UnreportedReason`` (``vmi_not_running``, ``no_guest_agent``: no entry comes from the guest
  agent; ``mac_not_seen``: the guest agent reports interfaces but not this MAC;
  ``mac_unknown``: no MAC is described for the NIC, so nothing can be looked up); ``Pending``:
  described, nothing to apply yet (the driver's deferred metadata, metadata kvdev cannot act
  on), or within the grace after the VMI started or its metadata changed (``grace_left``: what
  would otherwise be ``Differs`` or ``Unreported`` waits, named in the detail).

A VMI's state is its worst NIC's (``WORST_FIRST``: Differs > Unreported > Pending > Applied);
``GuestReport.summary`` is the short line of the ConfigMap's ``GUEST_ANNOTATION``, which
``annotate`` puts on the ConfigMap the sync writes (an update of the annotation alone when it is
all that changed). The summary carries no time, so it changes only when a verdict does.

Cost: at most ``MAX_INTERFACES`` status entries and ``MAX_ADDRESSES`` addresses per entry are
read; the described side is bounded by what a ConfigMap holds (``render``'s bounds, and
``schema.described``'s per file). Pure: no I/O, no clock.
"""

from __future__ import annotations

import copy
import enum
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from kvdev.errors import SchemaError
from kvdev.host.contract import GUEST_ANNOTATION, HINTS_KEY
from kvdev.host.controller.render import Rendered, Verb
from kvdev.host.k8s.kubevirt import VirtualMachineInstance
from kvdev.schema.described import DescribedDevice, describe, hint_for
from kvdev.schema.fields import base_request, normalize_mac
from kvdev.schema.hints import DeviceHint
from kvdev.schema.origins import SOURCES_KEY
from kvdev.schema.stream import (
    DEVICE_METADATA,
    GUEST_HINTS,
    Writable,
    decode_stream,
    read_written,
)

GUEST_AGENT: Final = "guest-agent"
AGENT_CONNECTED: Final = "AgentConnected"
RUNNING: Final = "Running"
MAX_INTERFACES: Final = 256  # status.interfaces[] entries read (KubeVirt: at most 10 guest-only)
MAX_ADDRESSES: Final = 256  # addresses read per entry
SUMMARY_MAX: Final = 256  # characters of the annotation


class NicState(enum.Enum):
    """One NIC's verdict."""

    APPLIED = "Applied"
    DIFFERS = "Differs"
    UNREPORTED = "Unreported"
    PENDING = "Pending"


WORST_FIRST: Final = (NicState.DIFFERS, NicState.UNREPORTED, NicState.PENDING, NicState.APPLIED)


class UnreportedReason(enum.Enum):
    """Why a NIC is ``Unreported``: the metric's ``reason`` label."""

    NO_GUEST_AGENT = "no_guest_agent"
    VMI_NOT_RUNNING = "vmi_not_running"
    MAC_NOT_SEEN = "mac_not_seen"
    MAC_UNKNOWN = "mac_unknown"


@dataclass(frozen=True, slots=True)
class DescribedNic:
    """One NIC as the ConfigMap describes it (see the module docstring)."""

    ref: str  # <claim>/<request>/<driver>/<pool>/<device>
    network: str | None = None  # the VMI network (spec.networks[].name) using it
    mac: str | None = None
    mac_from: str = ""  # hints | metadata | VMI status
    name: str | None = None  # the interface name a hint asks for
    addresses: tuple[str, ...] = ()  # with prefix length, canonical
    waiting: str | None = None  # why there is nothing to apply yet

    @property
    def label(self) -> str:
        """The NIC's name for people: its VMI network, else its device."""
        return self.network or self.ref


@dataclass(frozen=True, slots=True)
class ReportedNic:
    """One ``status.interfaces[]`` entry of the guest agent, normalized."""

    mac: str
    interface_name: str | None = None
    addresses: tuple[str, ...] = ()  # bare, canonical
    link_state: str | None = None
    info_source: str = ""


@dataclass(frozen=True, slots=True)
class NicReport:
    """One NIC's verdict: the state, the Unreported reason, the words, what was reported."""

    nic: DescribedNic
    state: NicState
    detail: str
    reason: UnreportedReason | None = None
    reported: ReportedNic | None = None


@dataclass(frozen=True, slots=True)
class GuestReport:
    """Every described NIC of one VMI, judged."""

    nics: tuple[NicReport, ...] = ()

    @property
    def state(self) -> NicState | None:
        """The worst NIC's state (None: the VMI has no described NIC)."""
        states = {n.state for n in self.nics}
        return next((s for s in WORST_FIRST if s in states), None)

    @property
    def summary(self) -> str:
        """``Differs: 1/2 Applied, 1 Differs (net1: 10.1.0.5/24 not on the guest's data0)``."""
        worst = self.state
        if worst is None:
            return "no NIC described"
        counts = {s: sum(1 for n in self.nics if n.state is s) for s in NicState}
        parts = [f"{counts[NicState.APPLIED]}/{len(self.nics)} Applied"]
        parts += [f"{counts[s]} {s.value}" for s in WORST_FIRST[:-1] if counts[s]]
        text = f"{worst.value}: {', '.join(parts)}"
        if worst is not NicState.APPLIED:
            first = next(n for n in self.nics if n.state is worst)
            text += f" ({first.nic.label}: {first.detail})"
        return text if len(text) <= SUMMARY_MAX else text[: SUMMARY_MAX - 3] + "..."


# --------------------------------------------------------------------------- described


def _hints(data: Mapping[str, str], documents: Mapping[str, Writable]) -> tuple[DeviceHint, ...]:
    text = data.get(HINTS_KEY)
    if text is None:
        return ()
    written = documents.get(HINTS_KEY)
    try:
        if written is not None:
            return tuple(read_written(written, GUEST_HINTS, source=HINTS_KEY).devices or ())
        return tuple(decode_stream(text, GUEST_HINTS, source=HINTS_KEY).document.devices or ())
    except SchemaError:
        return ()


def _devices(data: Mapping[str, str], documents: Mapping[str, Writable]) -> list[DescribedDevice]:
    out: list[DescribedDevice] = []
    for key, text in sorted(data.items()):
        if key in (HINTS_KEY, SOURCES_KEY):
            continue
        written = documents.get(key)
        try:
            if written is not None:
                document = read_written(written, DEVICE_METADATA, source=key)
            else:
                document = decode_stream(text, DEVICE_METADATA, source=key).document
        except SchemaError:
            continue  # the agent reports what it cannot read; nothing here to compare
        out.extend(describe(document, source=key)[0])
    return out


def _network_of(device: DescribedDevice, vmi: VirtualMachineInstance) -> str | None:
    """The VMI network whose ``resourceClaim`` names the device's claim and request."""
    entries = {e.name: e for e in vmi.spec.resource_claims or []}
    for network in vmi.spec.networks or []:
        ref = network.resource_claim
        if ref is None or ref.claim_name is None or ref.request_name is None:
            continue
        entry = entries.get(ref.claim_name)
        if entry is None:
            continue
        if entry.resource_claim_name is not None:
            claim_ok = device.pod_claim_name is None and device.claim == entry.resource_claim_name
        else:
            claim_ok = device.pod_claim_name == ref.claim_name
        if claim_ok and base_request(device.request) == ref.request_name:
            return network.name
    return None


def _mac(value: str | None) -> str | None:
    if not value:
        return None
    try:
        return normalize_mac(value)
    except ValueError:
        return None


def _status_macs(vmi: VirtualMachineInstance) -> dict[str, str]:
    """The MAC KubeVirt reports per VMI network (``status.interfaces[name=...].mac``)."""
    entries = (vmi.status.interfaces if vmi.status else None) or []
    out: dict[str, str] = {}
    for entry in entries[:MAX_INTERFACES]:
        mac = _mac(entry.mac)
        if entry.name and mac:
            out.setdefault(entry.name, mac)
    return out


@dataclass(frozen=True, slots=True)
class Decoded:
    """A ConfigMap's streams and hints, read: what a sync may keep while the data is the same."""

    devices: tuple[DescribedDevice, ...] = ()
    hints: tuple[DeviceHint, ...] = ()


def decode(data: Mapping[str, str], documents: Mapping[str, Writable] | None = None) -> Decoded:
    """Read the ConfigMap's ``data`` (the costly part of ``described_nics``).

    ``documents``: the documents a render encoded into ``data`` itself, by key
    (``Rendered.documents``): read as the stream's reader reads them (``read_written``),
    without decoding their text again; every other key is decoded.
    """
    written = documents or {}
    return Decoded(tuple(_devices(data, written)), _hints(data, written))


def described_nics(
    vmi: VirtualMachineInstance, data: Mapping[str, str], decoded: Decoded | None = None
) -> tuple[DescribedNic, ...]:
    """The NICs the ConfigMap's ``data`` describes for ``vmi`` (see the module docstring).

    ``decoded``: ``decode(data)``, when the caller kept it.
    """
    decoded = decoded if decoded is not None else decode(data)
    status_macs = _status_macs(vmi)
    out: list[DescribedNic] = []
    for device in decoded.devices:
        hint = hint_for(device, decoded.hints)
        net = hint.network if hint is not None else None
        network = _network_of(device, vmi)
        hint_mac = hint.guest.mac_address if hint is not None and hint.guest else None
        if not (network or device.mac or device.ips or device.interface_name or net or hint_mac):
            continue  # not a NIC (a GPU, a host device)
        mac, mac_from = hint_mac, "hints"
        if mac is None and device.mac:
            mac, mac_from = device.mac, "metadata"
        if mac is None and network is not None and network in status_macs:
            mac, mac_from = status_macs[network], "VMI status"
        waiting = None
        if device.deferred:
            waiting = "the driver has not written its metadata yet"
        elif device.problems:
            waiting = f"kvdev cannot act on its metadata: {device.problems[0].message}"
        addresses = tuple(dict.fromkeys([*device.ips, *((net.addresses or []) if net else [])]))
        out.append(
            DescribedNic(
                ref=device.ref,
                network=network,
                mac=mac,
                mac_from=mac_from if mac else "",
                name=net.interface_name if net is not None else None,
                addresses=addresses,
                waiting=waiting,
            )
        )
    out.extend(_undescribed(vmi, {n.network for n in out if n.network}))
    return tuple(out)


def _undescribed(vmi: VirtualMachineInstance, seen: set[str]) -> list[DescribedNic]:
    """The VMI's DRA networks no stream describes yet: Pending, named by claim and request."""
    out = []
    for network in vmi.spec.networks or []:
        ref = network.resource_claim
        if ref is None or network.name in seen:
            continue
        where = f"{ref.claim_name or '?'}/{ref.request_name or '?'}"
        waiting = f"no metadata describes {where} yet (its claim not allocated, or not prepared)"
        out.append(DescribedNic(ref=where, network=network.name, waiting=waiting))
    return out


# --------------------------------------------------------------------------- reported


def _bare(value: str) -> str | None:
    try:
        return str(ipaddress.ip_address(value.split("%", 1)[0].split("/", 1)[0]))
    except ValueError:
        return None


def _sources(info_source: str | None) -> set[str]:
    return {s.strip() for s in (info_source or "").split(",") if s.strip()}


def reported_nics(vmi: VirtualMachineInstance) -> dict[str, ReportedNic]:
    """The guest agent's interfaces, by MAC (the first entry of a MAC wins)."""
    entries = (vmi.status.interfaces if vmi.status else None) or []
    out: dict[str, ReportedNic] = {}
    for entry in entries[:MAX_INTERFACES]:
        mac = _mac(entry.mac)
        if mac is None or GUEST_AGENT not in _sources(entry.info_source) or mac in out:
            continue
        bare = (_bare(a) for a in (entry.ip_addresses or [])[:MAX_ADDRESSES])
        out[mac] = ReportedNic(
            mac=mac,
            interface_name=entry.interface_name or None,
            addresses=tuple(dict.fromkeys(a for a in bare if a is not None)),
            link_state=entry.link_state or None,
            info_source=entry.info_source or "",
        )
    return out


def agent_connected(vmi: VirtualMachineInstance) -> bool:
    """KubeVirt's ``AgentConnected`` condition is True."""
    conditions = (vmi.status.conditions if vmi.status else None) or []
    return any(c.type == AGENT_CONNECTED and c.status == "True" for c in conditions)


# --------------------------------------------------------------------------- the verdict


def _differences(nic: DescribedNic, seen: ReportedNic) -> list[str]:
    where = f"the guest's {seen.interface_name}" if seen.interface_name else f"NIC {seen.mac}"
    out = []
    if nic.name and seen.interface_name and seen.interface_name != nic.name:
        out.append(f"the guest names it {seen.interface_name}, not {nic.name}")
    out.extend(f"{a} not on {where}" for a in nic.addresses if _bare(a) not in seen.addresses)
    if seen.link_state and seen.link_state.lower() != "up":
        out.append(f"{where} link is {seen.link_state}")
    return out


def _judge(  # noqa: PLR0911 - one return per verdict, in the order they are decided
    nic: DescribedNic,
    vmi: VirtualMachineInstance,
    seen: Mapping[str, ReportedNic],
) -> NicReport:
    """The verdict without grace."""
    phase = vmi.status.phase if vmi.status else None
    if phase != RUNNING:
        why = f"the VMI is {phase}, not Running" if phase else "the VMI is not Running yet"
        return NicReport(nic, NicState.UNREPORTED, why, UnreportedReason.VMI_NOT_RUNNING)
    if nic.waiting is not None:
        return NicReport(nic, NicState.PENDING, nic.waiting)
    if nic.mac is None:
        why = "no MAC is described for it (metadata, hints or VMI status): nothing to look up"
        return NicReport(nic, NicState.UNREPORTED, why, UnreportedReason.MAC_UNKNOWN)
    if not seen:
        why = (
            "the guest agent is connected but reports no interface yet"
            if agent_connected(vmi)
            else "no guest agent reports the guest's interfaces (AgentConnected is not True)"
        )
        return NicReport(nic, NicState.UNREPORTED, why, UnreportedReason.NO_GUEST_AGENT)
    found = seen.get(nic.mac)
    if found is None:
        why = f"the guest agent reports no interface with MAC {nic.mac}"
        return NicReport(nic, NicState.UNREPORTED, why, UnreportedReason.MAC_NOT_SEEN)
    differences = _differences(nic, found)
    if differences:
        return NicReport(nic, NicState.DIFFERS, "; ".join(differences), reported=found)
    where = found.interface_name or found.mac
    held = f", {len(nic.addresses)} address(es)" if nic.addresses else ""
    return NicReport(nic, NicState.APPLIED, f"as described on {where}{held}", reported=found)


def compare(
    vmi: VirtualMachineInstance, nics: Sequence[DescribedNic], *, grace_left: float = 0.0
) -> GuestReport:
    """Each NIC's verdict; within ``grace_left`` seconds, Differs and Unreported are Pending."""
    seen = reported_nics(vmi)
    out = []
    for nic in nics:
        report = _judge(nic, vmi, seen)
        waits = report.reason is not UnreportedReason.VMI_NOT_RUNNING
        if grace_left > 0 and waits and report.state in (NicState.DIFFERS, NicState.UNREPORTED):
            detail = f"within the grace: {report.detail}"
            report = replace(report, state=NicState.PENDING, detail=detail, reason=None)
        out.append(report)
    return GuestReport(tuple(out))


# --------------------------------------------------------------------------- the annotation


def annotate(result: Rendered, existing: Mapping[str, Any] | None, summary: str) -> Rendered:
    """``result`` with ``GUEST_ANNOTATION: summary`` on the ConfigMap it writes.

    A create or update carries it; where nothing else changed and the stored annotation is
    another, an update of the stored object (its ``resourceVersion``: a race is a 409).
    """
    if result.verb in (Verb.CREATE, Verb.UPDATE) and result.body is not None:
        body = copy.deepcopy(result.body)
    elif result.verb is Verb.NONE and existing is not None and result.data:
        annotations = (existing.get("metadata") or {}).get("annotations") or {}
        if annotations.get(GUEST_ANNOTATION) == summary:
            return result
        body = {**copy.deepcopy(dict(existing)), "apiVersion": "v1", "kind": "ConfigMap"}
    else:
        return result
    meta = body.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}), GUEST_ANNOTATION: summary}
    verb = Verb.UPDATE if result.verb is Verb.NONE else result.verb
    return replace(result, verb=verb, body=body)


__all__ = [
    "AGENT_CONNECTED",
    "GUEST_AGENT",
    "MAX_ADDRESSES",
    "MAX_INTERFACES",
    "WORST_FIRST",
    "Decoded",
    "DescribedNic",
    "GuestReport",
    "NicReport",
    "NicState",
    "ReportedNic",
    "UnreportedReason",
    "agent_connected",
    "annotate",
    "compare",
    "decode",
    "described_nics",
    "reported_nics",
]
