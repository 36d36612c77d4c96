"""The kvdev ``GuestHints`` a VMI's spec implies: which described device is which, in the guest.

``vmi_hints`` maps KubeVirt's VMI spec to one hint per claimed device (the interface's PCI
address, tag and, for a binding plugin's interface only, MAC; a GPU's or host device's tag) and
the VMI's own interfaces to ``protectedNICs``, the evidence the guest lacks at first boot. A
value kvdev cannot use costs only that value, with a warning naming the VMI and the field;
whatever the spec says, the document is valid. The mapping: docs/reference/controller.md.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from kvdev.errors import Problem, Severity
from kvdev.host.k8s.kubevirt import ClaimedDevice, VirtualMachineInstance
from kvdev.schema.hints import (
    HINTS_MAX,
    KIND,
    PROTECTED_NICS_MAX,
    V1ALPHA1,
    DeviceHint,
    GuestHints,
    GuestLocation,
    ProtectedNic,
)
from kvdev.schema.plain import Errors, read

_GUEST_FIELDS = {"mac_address": "macAddress", "pci_address": "pciAddress", "tag": "tag"}


@dataclass(frozen=True, slots=True)
class _Use:
    """One claimed device of the spec: where it is, which claim entry and request it names."""

    path: str  # e.g. spec.networks[1]
    claim_name: str | None
    request_name: str | None
    guest: dict[str, str | None]  # macAddress / pciAddress / tag -> the spec's value
    origins: dict[str, str]  # the same keys -> the field path each came from


def what(vmi: VirtualMachineInstance) -> str:
    """``VirtualMachineInstance/<namespace>/<name>``, for messages."""
    return f"VirtualMachineInstance/{vmi.metadata.namespace or '?'}/{vmi.metadata.name}"


def _uses(vmi: VirtualMachineInstance, ignored: list[Problem]) -> Iterator[_Use]:
    devices = vmi.devices
    interfaces = {i.name: (n, i) for n, i in enumerate(devices.interfaces or [])}
    for n, network in enumerate(vmi.spec.networks or []):
        ref = network.resource_claim
        if ref is None:
            continue
        guest: dict[str, str | None] = {}
        origins: dict[str, str] = {}
        found = interfaces.get(network.name)
        if found is not None:
            index, interface = found
            for field, key in _GUEST_FIELDS.items():
                guest[key] = getattr(interface, field)
                origins[key] = f"spec.domain.devices.interfaces[{index}].{key}"
            if interface.mac_address and not interface.kubevirt_sets_mac:
                guest.pop("macAddress")
                ignored.append(
                    Problem(
                        f"{what(vmi)}: KubeVirt does not give the guest the macAddress of a DRA "
                        f"{'SR-IOV ' if interface.sriov is not None else ''}interface (a host "
                        "device keeps the MAC its driver set, which networkData.hardwareAddress "
                        "reports); left out of the hint",
                        path=origins["macAddress"],
                        severity=Severity.WARNING,
                    )
                )
        yield _Use(f"spec.networks[{n}]", ref.claim_name, ref.request_name, guest, origins)
    listed: list[tuple[str, list[ClaimedDevice]]] = [
        ("gpus", devices.gpus or []),
        ("hostDevices", devices.host_devices or []),
    ]
    for field, entries in listed:
        for n, entry in enumerate(entries):
            if entry.claim_name is None and entry.request_name is None:
                continue  # a device-plugin device
            path = f"spec.domain.devices.{field}[{n}]"
            guest = {"tag": entry.tag}
            yield _Use(path, entry.claim_name, entry.request_name, guest, {"tag": f"{path}.tag"})


def _reason(errors: Errors) -> str:
    return "; ".join(message for _, message in errors)


def _claim_ref(vmi: VirtualMachineInstance, claim_name: str) -> dict[str, str] | None:
    for entry in vmi.spec.resource_claims or []:
        if entry.name == claim_name:
            if entry.resource_claim_name is not None:
                return {"resourceClaimName": entry.resource_claim_name}
            return {"podClaimName": claim_name}
    return None


def _guest(use: _Use, subject: str, warnings: list[Problem]) -> dict[str, str]:
    """The guest fields that parse, each checked on its own so a bad one costs only itself."""
    out: dict[str, str] = {}
    for key, value in use.guest.items():
        if value is None or value == "":
            continue
        checked, errors = read(GuestLocation, {key: value})
        if checked is None:
            reason = _reason(errors)
            message = f"{subject}: {value!r} cannot be a hint's guest.{key} ({reason}); left out"
            warnings.append(Problem(message, path=use.origins[key], severity=Severity.WARNING))
            continue
        out.update(checked.to_json_dict())
    return out


def _protected(vmi: VirtualMachineInstance, warnings: list[Problem]) -> list[dict[str, str]]:
    """The VMI's own interfaces (no ``resourceClaim``), as ``protectedNICs`` entries."""
    subject = what(vmi)
    statuses = vmi.status.interfaces if vmi.status is not None else None
    macs = {i.name: i.mac for i in statuses or [] if i.name and i.mac}
    interfaces = {i.name: (n, i) for n, i in enumerate(vmi.devices.interfaces or [])}
    out: list[dict[str, str]] = []
    for network in vmi.spec.networks or []:
        found = interfaces.get(network.name)
        if network.resource_claim is not None or found is None:
            continue
        index, interface = found
        at = f"spec.domain.devices.interfaces[{index}]"
        values = {
            "macAddress": (
                (macs[network.name], f"status.interfaces[name={network.name}].mac")
                if network.name in macs
                else (interface.mac_address, f"{at}.macAddress")
            ),
            "pciAddress": (interface.pci_address, f"{at}.pciAddress"),
        }
        entry: dict[str, str] = {}
        for key, (value, path) in values.items():
            if not value:
                continue
            nic, errors = read(ProtectedNic, {key: value})
            if nic is None:
                message = (
                    f"{subject}: {value!r} cannot be a protectedNICs {key} ({_reason(errors)})"
                )
                warnings.append(Problem(message, path=path, severity=Severity.WARNING))
            else:
                entry.update(nic.to_json_dict())
        if not entry:
            continue
        if len(out) == PROTECTED_NICS_MAX:
            message = (
                f"{subject}: more than {PROTECTED_NICS_MAX} own interfaces (without "
                "resourceClaim): the rest are left out of protectedNICs"
            )
            warnings.append(Problem(message, path=at, severity=Severity.WARNING))
            break
        out.append(entry)
    return out


def vmi_hints(vmi: VirtualMachineInstance) -> tuple[GuestHints, tuple[Problem, ...]]:
    """The VMI's hints (``metadata.generation`` 0: the caller sets it) and the warnings."""
    subject = what(vmi)
    warnings: list[Problem] = []
    hints: list[DeviceHint] = []
    seen: dict[tuple[object, ...], str] = {}
    for use in _uses(vmi, warnings):
        if not use.claim_name or not use.request_name:
            message = f"{subject}: claimName and requestName must both be set; no hint"
            warnings.append(Problem(message, path=use.path, severity=Severity.WARNING))
            continue
        claim = _claim_ref(vmi, use.claim_name)
        if claim is None:
            message = (
                f"{subject}: claimName {use.claim_name!r} is not in spec.resourceClaims[]; no hint"
            )
            warnings.append(Problem(message, path=use.path, severity=Severity.WARNING))
            continue
        guest = _guest(use, subject, warnings)
        if not guest:
            continue
        body = {"claim": claim, "request": use.request_name, "guest": guest}
        hint, errors = read(DeviceHint, body)
        if hint is None:
            message = f"{subject}: no hint: {_reason(errors)}"
            warnings.append(Problem(message, path=use.path, severity=Severity.WARNING))
            continue
        key = hint.selector()
        if key in seen:
            message = f"{subject}: names the same claim request as {seen[key]}; no second hint"
            warnings.append(Problem(message, path=use.path, severity=Severity.WARNING))
            continue
        if len(hints) == HINTS_MAX:
            message = f"{subject}: more than {HINTS_MAX} device hints: the rest are left out"
            warnings.append(Problem(message, path=use.path, severity=Severity.WARNING))
            break
        seen[key] = use.path
        hints.append(hint)
    document_body: dict[str, object] = {
        "apiVersion": V1ALPHA1,
        "kind": KIND,
        "metadata": {"name": vmi.metadata.name, "generation": 0},
        "devices": [h.to_json_dict() for h in hints],
    }
    if protected := _protected(vmi, warnings):
        document_body["protectedNICs"] = protected
    document = GuestHints.parse(document_body)
    return document, tuple(warnings)
