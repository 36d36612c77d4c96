"""The taints of each allocated device, and the tolerations that let its claim keep it.

Device taints are GA in Kubernetes 1.38: a ``NoExecute`` taint on an allocated device (in its
ResourceSlice, or added by a DeviceTaintRule) evicts the pods that use the device, a KubeVirt
VM's virt-launcher pod included, unless the claim's allocation tolerates it (the request's
tolerations, copied into each allocation result); ``NoSchedule`` only keeps the device from new
allocations. ``allocated_taints`` lists, per allocated device that carries a taint, each taint
with the toleration that tolerates it (None: not tolerated), matched as the allocator matches
them (``toleration_for``, which the search uses too). ``taint_lines`` words each taint (the
controller passes them to the guest's ``kvdev explain``), ``taints_text`` a device's for
``kvdev-host allocate --explain``.

Pure: data in, data out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kvdev.host.k8s.claim import ResourceClaim
from kvdev.host.k8s.common import DeviceTaint, DeviceToleration
from kvdev.host.k8s.resource import IndexedSlices, ResourceSlice


def toleration_for(
    taint: DeviceTaint, tolerations: Sequence[DeviceToleration]
) -> DeviceToleration | None:
    """The first toleration that matches the taint (key, operator/value, effect), or None."""
    for tol in tolerations:
        if tol.effect and tol.effect != taint.effect:
            continue
        if tol.key and tol.key != taint.key:
            continue
        if tol.operator == "Equal" and (tol.value or "") != (taint.value or ""):
            continue
        return tol
    return None


@dataclass(frozen=True, slots=True)
class TaintedDevice:
    """One allocated device with taints: whose it is, and what tolerates each taint."""

    claim: str  # namespace/name
    request: str
    driver: str
    pool: str
    name: str
    taints: tuple[tuple[DeviceTaint, DeviceToleration | None], ...]

    @property
    def device(self) -> str:
        """``driver/pool/device``."""
        return f"{self.driver}/{self.pool}/{self.name}"


def allocated_taints(
    claims: Iterable[ResourceClaim], slices: Sequence[ResourceSlice]
) -> list[TaintedDevice]:
    """The allocated devices of ``claims`` that carry taints in ``slices``, in claim order.

    ``slices`` may be ``IndexedSlices`` (the controller's, kept per driver): then no slice is
    scanned.
    """
    indexed = IndexedSlices.of(slices)
    out = []
    for claim in claims:
        allocation = claim.status.allocation if claim.status else None
        devices = allocation.devices if allocation is not None else None
        for r in (devices.results if devices is not None else None) or []:
            found = indexed.taints(r.driver, r.pool, r.device)
            if not found:
                continue
            tolerations = r.tolerations or []
            out.append(
                TaintedDevice(
                    f"{claim.metadata.namespace or 'default'}/{claim.metadata.name}",
                    r.request,
                    r.driver,
                    r.pool,
                    r.device,
                    tuple((t, toleration_for(t, tolerations)) for t in found),
                )
            )
    return out


def _taint(t: DeviceTaint) -> str:
    value = f"={t.value}" if t.value else ""
    since = f", since {t.time_added}" if t.time_added else ""
    return f"{t.key}{value}:{t.effect}{since}"


def _toleration(t: DeviceToleration) -> str:
    what = t.key or "every key"
    if t.operator == "Equal":
        what += f"={t.value or ''}"
    effect = t.effect or "every effect"
    seconds = f", for {t.toleration_seconds}s" if t.toleration_seconds is not None else ""
    return f"{what} ({t.operator}), {effect}{seconds}"


def taint_lines(device: TaintedDevice) -> tuple[str, ...]:
    """One line per taint of ``device``: the taint, and what tolerates it (or what it does)."""
    lines = []
    for taint, toleration in device.taints:
        if toleration is not None:
            verdict = f"tolerated by {_toleration(toleration)}"
        elif taint.effect == "NoExecute":
            verdict = "NOT tolerated: the pods using it (the VM's launcher pod) are evicted"
        elif taint.effect == "NoSchedule":
            verdict = "not tolerated: kept, but no new allocation gets it"
        else:
            verdict = "no effect the allocator acts on"
        lines.append(f"{_taint(taint)}: {verdict}")
    return tuple(lines)


def taints_text(devices: Sequence[TaintedDevice]) -> str:
    """Per tainted device: each taint, and the toleration that lets the claim keep it."""
    lines = []
    for d in devices:
        lines.append(f"claim {d.claim}, request {d.request}: device {d.device} is tainted")
        lines.extend(f"  taint {line}" for line in taint_lines(d))
    return "".join(f"{line}\n" for line in lines)
